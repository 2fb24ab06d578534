"""The benchmark harness (benchmarks/*.py): the shared options (`BenchParser`), runs of a launcher
or a node set with their logs (`run_logged`), progress over the jobs and the result table as CSV
and markdown with the header of the generated results (`BenchRun`). Runs are read back with
`commlab.report.runs.load_run`; time to a target accuracy is in `commlab.bench.accuracy`."""
from .children import Child, Outcome, run_logged
from .options import ROOT, BenchParser, table_stem
from .bench_run import BenchRun

__all__ = ["BenchParser", "Child", "Outcome", "ROOT", "BenchRun", "run_logged", "table_stem"]
