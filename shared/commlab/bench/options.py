"""The options every benchmark shares, declared once: where run folders and tables go
(--results-dir, --name), --quick (the benchmark's own small settings), its seeds and link profile.

    p = BenchParser(__doc__, "matrix", quick={"fl_rounds": 1}, seeds=[0])
    p.add_argument("--fl-rounds", type=int, default=3)
    a = p.parse_args()      # a.results_dir (absolute, made), a.tables, a.quick, a.seeds, a.argv, a.command
"""
from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from commlab.links.profiles import profile_arg, profile_names

ROOT = Path(__file__).resolve().parents[3]  # the checkout: benchmarks/, results/ and docs/ are here
QUICK_SUFFIX = "-quick"


def table_stem(results_dir: Path, name: str, quick: bool) -> Path:
    """<results-dir>/bench/<name>[-quick]: a benchmark's tables (.csv, .md) without the suffix; a
    quick run never overwrites a full one."""
    return results_dir / "bench" / f"{name}{QUICK_SUFFIX if quick else ''}"


def script_path(path: str) -> str:
    """The running script as a user would type it: relative to the checkout when inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else path


class BenchParser(argparse.ArgumentParser):
    """argparse with the shared options; ``quick`` maps option names (dests) to the values
    --quick gives them, flags given on the command line still win. ``seeds``: a list gives
    --seeds (one run per seed), an int gives --seed, None neither; ``profile``: --profile's default."""

    def __init__(self, doc: str, name: str, quick: Mapping[str, Any], *,
                 seeds: Sequence[int] | int | None = None, profile: str | None = None) -> None:
        summary, _, details = doc.strip().partition("\n\n")
        super().__init__(description=summary, epilog=details or None,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
        self.quick = dict(quick)
        self.add_argument("--results-dir", type=Path, default=Path("results"),
                          help="run folders and their logs; the tables go to <results-dir>/bench (default: results)")
        self.add_argument("--name", default=name, help=f"file stem of the tables (default: {name}; "
                          f"--quick adds {QUICK_SUFFIX})")
        settings = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in self.quick.items()) or "none"
        self.add_argument("--quick", "--smoke", action="store_true",
                          help=f"small settings, a check of the pipeline in minutes ({settings})")
        if isinstance(seeds, int):
            self.add_argument("--seed", type=int, default=seeds)
        elif seeds is not None:
            self.add_argument("--seeds", type=int, nargs="+", default=list(seeds), help="one run per seed")
        if profile is not None:
            self.add_argument("--profile", default=profile, type=profile_arg, metavar="PROFILE",
                              help=f"link profile (commlab.links.profiles: {', '.join(profile_names())}, a rate, "
                                   f"trace:<file>, each with -loss<p>; default {profile})")

    def add_data_subsets(self, train: int, test: int) -> None:
        """--train-subset and --test-subset of an FL benchmark's runs (the launcher's flags)."""
        self.add_argument("--train-subset", type=int, default=train, help="training samples partitioned (0: all)")
        self.add_argument("--test-subset", type=int, default=test, help="test samples evaluated each round")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:
        argv = list(sys.argv[1:] if args is None else args)
        unknown = set(self.quick) - {action.dest for action in self._actions}
        if unknown:
            raise ValueError(f"quick settings for options this benchmark lacks: {sorted(unknown)}")
        a = super().parse_args(argv, namespace)
        if a.quick:
            saved = {k: self.get_default(k) for k in self.quick}
            self.set_defaults(**self.quick)
            try:
                a = super().parse_args(argv, namespace)
            finally:
                self.set_defaults(**saved)
        a.results_dir = a.results_dir.resolve()
        a.results_dir.mkdir(parents=True, exist_ok=True)
        a.tables = table_stem(a.results_dir, a.name, a.quick)
        a.argv = argv
        a.command = shlex.join(["python", script_path(sys.argv[0]), *argv])
        return a
