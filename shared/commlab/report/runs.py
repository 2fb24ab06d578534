"""Finding and loading runs under results/: the manifest and every metrics table, validated.

A run that cannot be read whole (missing or broken manifest, truncated or malformed CSV) becomes a
`Skipped` entry with the reason, so one bad run never takes the whole report down.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commlab.output.tables import ADDED, COLUMNS, OPTIONAL, TEXT  # columns a table must have (extra ones are kept)

if TYPE_CHECKING:  # pandas is imported where tables are read: launchers use the manifest helpers only
    import pandas as pd

# Per kind: the settings that define a comparable experiment, the series field, the tables.
KINDS = {
    "fl": {"series": "codec", "size": "clients", "length": "rounds",
           "tables": {"rounds": True, "clients": False}},
    "ddp": {"series": "method", "size": "world", "length": "epochs",
            "tables": {"steps": True, "epochs": False}},
}
SETTINGS = ("kind", "backend", "model", "dataset", "link_profile", "size", "length")
METRIC_PATTERNS = ("rounds.csv", "clients*.csv", "steps*.csv", "epochs*.csv")


class RunError(ValueError):
    """A run folder that cannot be reported; the message names the file and the problem."""


@dataclass
class Run:
    run_id: str
    path: Path
    manifest: dict
    tables: dict[str, pd.DataFrame]
    warnings: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def series(self) -> str:
        """The codec (FL) or method (DDP) this run compares; with adaptive bits (docs/adaptive.md)
        also the allocation policy, which is what such runs compare (their codec is the same)."""
        series = str(self.manifest[KINDS[self.kind]["series"]])
        adaptive = (self.manifest.get("config") or {}).get("adaptive") if self.kind == "fl" else None
        if isinstance(adaptive, dict):
            policy = adaptive.get("policy")
            bits = adaptive.get("fixed_bits")
            floor = f", min {adaptive['min_bits']} bits" if adaptive.get("min_bits", 1) != 1 else ""
            detail = (f"beta {adaptive.get('beta')}{floor}" if policy != "equal"
                      else "rates only" if bits is None else f"{bits} bits")
            series += f" {policy} {detail}"
        return series

    @property
    def final_accuracy(self) -> float:
        """Test accuracy of the last evaluated round (FL) or of rank 0's last epoch (DDP; every rank
        evaluates the same model); NaN when nothing was evaluated."""
        if self.kind == "fl":
            accuracy = self.tables["rounds"]["test_accuracy"]
        else:
            epochs = self.tables["epochs"]
            accuracy = epochs.loc[epochs["rank"] == 0, "test_accuracy"]
        evaluated = accuracy.dropna()
        return float(evaluated.iloc[-1]) if len(evaluated) else float("nan")

    @property
    def settings(self) -> dict:
        m, k = self.manifest, KINDS[self.kind]
        out = {"kind": self.kind, "backend": m.get("backend", "local"), "model": m["model"],
               "dataset": m["dataset"], "link_profile": m["link_profile"],
               k["size"]: int(m[k["size"]]), k["length"]: int(m[k["length"]])}
        training = training_settings(self.kind, m.get("config") or {})
        if training:
            out["training"] = " ".join(f"{name}={value}" for name, _, value in training)
        return out

    @property
    def group(self) -> str:
        """File-name-safe name of the settings group, e.g.
        fl-mnist_cnn-mnist-lan-c2-r10-local-lr0.05-e1-b64-n6000-dirichlet0.5."""
        s, k = self.settings, KINDS[self.kind]
        name = (f"{s['kind']}-{s['model']}-{s['dataset']}-{s['link_profile']}-"
                f"{k['size'][0]}{s[k['size']]}-{k['length'][0]}{s[k['length']]}-{s['backend']}")
        training = training_settings(self.kind, self.manifest.get("config") or {})
        name += "".join(f"-{short}{value}" for _, short, value in training)
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def training_settings(kind: str, config: dict) -> list[tuple[str, str, object]]:
    """(name, short name for group names, value) of the hyperparameters that make two runs of the
    same codec/method not comparable, from the node config recorded in the manifest; empty for a
    run recorded without it."""
    training, partition, out = config.get("training") or {}, config.get("partition") or {}, []
    if "lr" in training:
        out.append(("lr", "lr", training["lr"]))
    if kind == "fl" and "local_epochs" in training:
        out.append(("local_epochs", "e", training["local_epochs"]))
    if "batch_size" in training:
        out.append(("batch", "b", training["batch_size"]))
    if kind == "fl" and "samples_per_round" in training:
        out.append(("samples_per_round", "n", training["samples_per_round"]))
    if kind == "ddp" and "dataset" in config:
        out.append(("train_subset", "n", config["dataset"].get("train_subset") or "all"))
    if kind == "fl" and "scheme" in partition:
        extra = {"dirichlet": partition.get("alpha"), "shards": partition.get("labels_per_client")}.get(partition["scheme"])
        out.append(("partition", "", f"{partition['scheme']}{'' if extra is None else extra}"))
    return out


@dataclass
class Skipped:
    path: Path
    reason: str


def looks_like_run(path: Path) -> bool:
    """Run folders hold a manifest or metrics tables; anything else (bench/, report/) is not a run."""
    return (path / "manifest.json").exists() or any(
        next(path.glob(p), None) is not None for p in METRIC_PATTERNS)


def read_manifest(path: Path) -> dict:
    file = path / "manifest.json"
    if not file.exists():
        raise RunError(f"{file}: missing manifest")
    try:
        manifest = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{file}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise RunError(f"{file}: expected a JSON object")
    kind = manifest.get("kind")
    if kind not in KINDS:
        raise RunError(f"{file}: kind is {kind!r}, expected 'fl' or 'ddp'")
    k = KINDS[kind]
    missing = [f for f in ("model", "dataset", "link_profile", k["series"], k["size"], k["length"])
               if manifest.get(f) in (None, "")]
    if missing:
        raise RunError(f"{file}: missing fields {missing}")
    for f in (k["size"], k["length"]):
        if not isinstance(manifest[f], int) or isinstance(manifest[f], bool):
            raise RunError(f"{file}: {f} is {manifest[f]!r}, expected an integer")
    return manifest


def read_table(file: Path, columns: list[str], growing: bool = False) -> pd.DataFrame:
    """Strict CSV read: a short last line (a writer killed mid-row) or a non-number is an error.
    ``growing``: the file of a run still going, whose writer may be mid-row: only whole lines count."""
    import pandas as pd
    raw = file.read_bytes()
    if growing:
        raw = raw[:raw.rfind(b"\n") + 1]
    if raw and not raw.endswith(b"\n"):
        raise RunError(f"{file}: truncated (last line has no newline)")
    rows = list(csv.reader(raw.decode("utf-8", errors="replace").splitlines()))
    if not rows:
        raise RunError(f"{file}: empty (no header)")
    header = rows[0]
    missing = [c for c in columns if c not in header and c not in ADDED]
    if missing:
        raise RunError(f"{file}: header lacks columns {missing}")
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise RunError(f"{file}: line {n} has {len(row)} fields, header has {len(header)}")
    df = pd.DataFrame(rows[1:], columns=header)
    for c in columns:
        if c not in header:  # a run from before the column existed
            df[c] = float("nan")
            continue
        if c in TEXT:
            continue
        values = pd.to_numeric(df[c].replace("", None), errors="coerce")
        # "nan" is a number a node wrote (the loss of a diverged model), not a broken cell
        bad = values.isna() & (df[c].str.lower() != "nan") & ((df[c] != "") | (c not in OPTIONAL))
        if bad.any():
            line = int(bad.idxmax()) + 2
            raise RunError(f"{file}: line {line}, column {c}: {df[c].iloc[line - 2]!r} is not a number")
        df[c] = values
    return df


def read_tables(path: Path, name: str, growing: bool = False) -> pd.DataFrame | None:
    """`<name>.csv` and every `<name>-*.csv` (one per client or rank) concatenated, or None."""
    import pandas as pd
    files = sorted({*path.glob(f"{name}.csv"), *path.glob(f"{name}-*.csv")})
    if not files:
        return None
    frames = [read_table(f, COLUMNS[name], growing) for f in files]
    return pd.concat(frames, ignore_index=True)


def load_run(path: Path, growing: bool = False) -> Run:
    """The run in folder ``path``; ``growing``: a run still going, its tables read up to their
    last whole line (read_table)."""
    import pandas as pd
    manifest = read_manifest(path)
    run = Run(run_id=str(manifest.get("run_id") or path.name), path=path, manifest=manifest, tables={})
    for name, required in KINDS[manifest["kind"]]["tables"].items():
        df = read_tables(path, name, growing)
        if df is None or df.empty:
            if required:
                raise RunError(f"{path}: no rows in {name}.csv (run not started or wrong kind?)")
            run.warnings.append(f"{run.run_id}: no {name}*.csv, figures from it are left out")
            df = pd.DataFrame(columns=COLUMNS[name])
        run.tables[name] = df
    return run


def try_load_run(path: Path, growing: bool = False) -> Run | None:
    """load_run, or None for a run that cannot be read (yet): no manifest, no rows, a broken file."""
    try:
        return load_run(path, growing)
    except (RunError, OSError):
        return None


def load_runs(results: Path, run_ids: list[str] | None = None,
              exclude: tuple[Path, ...] = ()) -> tuple[list[Run], list[Skipped]]:
    """Every run under `results` (or the named ones), and the folders skipped with reasons."""
    if run_ids:
        paths = [results / r for r in run_ids]
    elif results.is_dir():
        excluded = {p.resolve() for p in exclude}
        paths = sorted(p for p in results.iterdir() if p.is_dir() and p.resolve() not in excluded
                       and looks_like_run(p))
    else:
        paths = []
    runs, skipped = [], []
    for p in paths:
        try:
            runs.append(load_run(p))
        except (RunError, OSError) as e:
            skipped.append(Skipped(p, str(e)))
    return runs, skipped
