"""The package layout shows the architecture: no import cycle between commlab's modules, every
package and module of shared/commlab in docs/architecture.md's tree, no module outside tests/ over
MAX_LINES lines. Reads files only (ast, text): no imports, no processes."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "shared"
PACKAGE = SHARED / "commlab"
MAX_LINES = 350


def module_name(path: Path) -> str:
    parts = path.relative_to(SHARED).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (never run: no import at run time)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The commlab modules `name` imports at run time, at module level or inside functions alike.
    `from pkg import x` imports module pkg.x where that is a module, else pkg itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return {m for m in found if m in known and m != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_import_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["e"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_commlab_modules():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert sum(len(edges) for edges in graph.values()) > 100  # the graph really was read
    cycles = import_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a] & set(c))) + ")"
        for c in cycles)


def architecture_tree(text: str) -> dict[str, str]:
    """The tree of a document (a code block starting with shared/commlab/): each folder -> the text
    of its own entry (its lines, without those of the folders inside it)."""
    block = re.search(r"```\n(shared/commlab/\n.*?)```", text, re.S)
    assert block, "no tree starting with shared/commlab/"
    own: dict[str, list[str]] = {}
    open_folders: list[tuple[int, str]] = []  # (indent, folder) of the packages whose entry is open
    for line in block.group(1).splitlines():
        indent = len(line) - len(line.lstrip())
        header = re.match(r"\s*([\w./]+/)(\s|$)", line)
        while open_folders and line.strip() and indent <= open_folders[-1][0]:
            open_folders.pop()
        if header:
            parent = open_folders[-1][1] if open_folders else ""
            folder = header.group(1) if not parent else parent + header.group(1)
            open_folders.append((indent, folder))
            own.setdefault(folder, [])
            line = line[header.end(1):]
        if open_folders:
            own[open_folders[-1][1]].append(line)
    return {folder: "\n".join(lines) for folder, lines in own.items()}


def test_architecture_tree_reader():
    tree = architecture_tree("```\nshared/commlab/\n  a/    the a package: x.py\n    b/  inner: y.py\n  c.py  z\n"
                             "  d/    its own\n        w.py\nbenchmarks/  other\n```")
    assert set(tree) == {"shared/commlab/", "shared/commlab/a/", "shared/commlab/a/b/", "shared/commlab/d/",
                         "benchmarks/"}
    assert "x.py" in tree["shared/commlab/a/"] and "y.py" not in tree["shared/commlab/a/"]
    assert "y.py" in tree["shared/commlab/a/b/"] and "w.py" in tree["shared/commlab/d/"]
    assert "c.py" in tree["shared/commlab/"] and "w.py" not in tree["shared/commlab/"]


def test_every_package_and_module_is_in_the_architecture_tree():
    tree = architecture_tree((ROOT / "docs" / "architecture.md").read_text())
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.parent.relative_to(ROOT).as_posix() + "/"
        if folder not in tree:
            missing.append(f"package {folder}")
        elif path.name != "__init__.py" and not re.search(rf"(?<![\w./]){re.escape(path.name)}(?!\w)", tree[folder]):
            missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, "not in docs/architecture.md's tree: " + ", ".join(sorted(set(missing)))


def test_no_module_outside_tests_over_the_line_cap():
    sources = [p for top in ("shared", "nodes", "benchmarks") for p in sorted((ROOT / top).rglob("*.py"))]
    assert len(sources) > 100
    over = {p.relative_to(ROOT).as_posix(): n for p in sources
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"
