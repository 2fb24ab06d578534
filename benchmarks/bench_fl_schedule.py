"""Local training schedules of FL on one dataset: the same run (fp32, 2 clients, Dirichlet(0.5), the
launcher's defaults for everything else) once per schedule of local epochs, learning rate and batch
size, to choose a dataset's defaults by measurement. For each schedule:
test accuracy after every round, the final and the best, the first round at the target, and the
wall time of the run.

    python benchmarks/bench_fl_schedule.py --dataset fashion_mnist --schedules 1:0.05:64 2:0.05:64 --target 0.88
"""
from __future__ import annotations

import sys
import time

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.bench.accuracy import time_to_target
from commlab.report.runs import load_run


def parse_schedule(text: str) -> tuple[int, float, int]:
    """"EPOCHS:LR:BATCH" -> (epochs, lr, batch); a malformed one is one line naming it."""
    try:
        epochs, lr, batch = text.split(":")
        return int(epochs), float(lr), int(batch)
    except ValueError:
        raise SystemExit(f"bench_fl_schedule: schedule {text!r} is not EPOCHS:LR:BATCH (e.g. 2:0.05:64)") from None


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "fl-schedule", {"rounds": 2, "samples_per_round": 1000}, seeds=0)
    p.add_argument("--dataset", default="fashion_mnist")
    p.add_argument("--model", default="mnist_cnn")
    p.add_argument("--schedules", nargs="+", default=["1:0.05:64", "2:0.05:64", "1:0.02:32"],
                   help="EPOCHS:LR:BATCH, one run each (the first: the launcher's defaults)")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples-per-round", type=int, default=6000)
    p.add_argument("--target", type=float, default=0.88, help="test accuracy to reach")
    a = p.parse_args(argv)
    schedules = [parse_schedule(s) for s in a.schedules]
    stamp, rows = time.strftime("%Y%m%d-%H%M%S"), []
    with BenchRun(a, len(schedules)) as s:
        for epochs, lr, batch in schedules:
            run_id = f"bench-fl-schedule-{stamp}-e{epochs}-lr{lr:g}-b{batch}"
            outcome = s.run([sys.executable, "-m", "commlab.fl.run", "--codec", "fp32", "--clients", str(a.clients),
                             "--rounds", str(a.rounds), "--samples-per-round", str(a.samples_per_round),
                             "--model", a.model, "--dataset", a.dataset, "--epochs", str(epochs), "--lr", str(lr),
                             "--batch-size", str(batch), "--backend", "local", "--seed", str(a.seed),
                             "--results-dir", str(a.results_dir), "--run-id", run_id], run_id)
            row = {"local_epochs": epochs, "lr": lr, "batch_size": batch, "status": outcome.status, "run_id": run_id}
            if outcome.ok:
                rounds = load_run(a.results_dir / run_id).tables["rounds"]
                hit = time_to_target(rounds, a.target)
                row.update({"final_accuracy": float(rounds["test_accuracy"].iloc[-1]),
                            "best_accuracy": float(rounds["test_accuracy"].max()),
                            "round_to_target": hit["step_to_target"], "time_to_target_s": hit["time_to_target_s"],
                            "wall_s": outcome.wall_s,
                            "accuracy_by_round": " ".join(f"{100 * x:.2f}" for x in rounds["test_accuracy"])})
            rows.append(row)
            s.step(f"{epochs} epoch(s), lr {lr:g}, batch {batch}: {row['status']}")
        s.write(pd.DataFrame(rows), {"local_epochs": "local epochs", "lr": "lr", "batch_size": "batch",
                                     "final_accuracy": "final accuracy", "best_accuracy": "best accuracy",
                                     "round_to_target": f"first round >= {a.target:g}",
                                     "time_to_target_s": "time to target (s)", "wall_s": "run wall time (s)",
                                     "accuracy_by_round": "accuracy by round (%)", "status": "status"},
                f"FL local schedules on {a.dataset} ({a.model})",
                notes=[f"fp32, {a.clients} clients, Dirichlet(0.5), {a.rounds} rounds of {a.samples_per_round} "
                       f"samples per client, SGD momentum 0.9, seed {a.seed}; one run per schedule"])
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
