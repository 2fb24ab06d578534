"""Key material of one run, made by the launcher: a keyring file per node (commlab.dds.auth) in a
private temporary folder (mode 0700, files 0600), outside the results folder, removed when the run
ends. Nodes find their file through `dds.key_file`; in containers it is a compose secret."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from commlab.dds.auth import make_keyrings, write_keyring


@contextmanager
def run_keys(run_id: str, nodes: list[str], trusted: set[str],
             identities: Mapping[str, Sequence[str]] | None = None) -> Iterator[dict[str, Path]]:
    """{node: its key file} for the duration of the run (`identities`: node -> the identities it
    speaks for, each with a key of its own; commlab.dds.auth)."""
    folder = Path(tempfile.mkdtemp(prefix="commlab-keys-"))  # mkdtemp: mode 0700
    try:
        paths = {}
        for node, ring in make_keyrings(run_id, nodes, trusted, identities).items():
            paths[node] = folder / f"{node}.key"
            write_keyring(paths[node], ring)
        yield paths
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def with_key_file(cfg: dict, key_file: Path) -> dict:
    """A node config with `dds.key_file` set."""
    return {**cfg, "dds": {**cfg["dds"], "key_file": str(key_file)}}
