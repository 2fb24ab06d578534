"""Training schedules of FL on one dataset: the same run (fp32, 2 clients, Dirichlet(0.5), the
launcher's defaults for everything else) once per schedule and seed, to choose a dataset's defaults
(commlab.fl.defaults) by measurement. A schedule is EPOCHS:LR:BATCH[:SERVER_MOMENTUM[:LR_DECAY]]
(local epochs, the clients' learning rate in round 1, batch size, FedAvgM's beta, the lr's decay
per round; left out: the dataset's defaults). For each run: test accuracy after every round, the
final and the best, the first round at the target, and the wall time; under the table, per schedule,
the final accuracy's min and median over the seeds.

    python benchmarks/bench_fl_schedule.py --dataset fashion_mnist --schedules 1:0.05:64:0:1 2:0.05:64 --seeds 0 1 2
"""
from __future__ import annotations

import sys
import time
from typing import NamedTuple

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.bench.accuracy import time_to_target
from commlab.fl.defaults import dataset_defaults
from commlab.report.runs import load_run


class Schedule(NamedTuple):
    epochs: int
    lr: float
    batch: int
    server_momentum: float
    lr_decay: float

    def __str__(self) -> str:
        return f"{self.epochs}:{self.lr:g}:{self.batch}:{self.server_momentum:g}:{self.lr_decay:g}"


def default_schedule(dataset: str) -> str:
    """The launcher's defaults for ``dataset`` as a schedule."""
    d = dataset_defaults(dataset)
    return str(Schedule(d["epochs"], d["lr"], d["batch_size"], d["server_momentum"], d["lr_decay"]))


def parse_schedule(text: str, dataset: str) -> Schedule:
    """"EPOCHS:LR:BATCH[:SERVER_MOMENTUM[:LR_DECAY]]" -> Schedule, the fields left out from the
    dataset's defaults; a malformed one is one line naming it."""
    fields = text.split(":")
    given = fields + default_schedule(dataset).split(":")[len(fields):]
    try:
        if not 3 <= len(fields) <= 5:
            raise ValueError
        schedule = Schedule(int(given[0]), float(given[1]), int(given[2]), float(given[3]), float(given[4]))
    except ValueError:
        raise SystemExit(f"bench_fl_schedule: schedule {text!r} is not EPOCHS:LR:BATCH[:SERVER_MOMENTUM[:LR_DECAY]] "
                         "(e.g. 2:0.05:64 or 1:0.05:64:0.5:0.9)") from None
    return schedule


def seed_summary(df: pd.DataFrame) -> list[str]:
    """Per schedule: the final accuracy's min and median over the seeds that finished."""
    lines = []
    for schedule, g in df.groupby("schedule", sort=False):
        done = g["final_accuracy"].dropna() if "final_accuracy" in g else pd.Series(dtype=float)
        if not done.empty:
            lines.append(f"- {schedule}: final accuracy over {len(done)} seed(s): min {100 * done.min():.2f} %, "
                         f"median {100 * done.median():.2f} %")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "fl-schedule", {"rounds": 2, "samples_per_round": 1000}, seeds=[0])
    p.add_argument("--dataset", default="fashion_mnist")
    p.add_argument("--model", default="mnist_cnn")
    p.add_argument("--schedules", nargs="+", help="EPOCHS:LR:BATCH[:SERVER_MOMENTUM[:LR_DECAY]], one run each "
                   "and seed (default: the dataset's defaults, then plain FedAvg with 1 and 2 local epochs)")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples-per-round", type=int, default=6000)
    p.add_argument("--target", type=float, default=0.88, help="test accuracy to reach")
    a = p.parse_args(argv)
    texts = a.schedules or [default_schedule(a.dataset), "1:0.05:64:0:1", "2:0.05:64:0:1"]
    schedules = [parse_schedule(t, a.dataset) for t in texts]
    stamp, rows = time.strftime("%Y%m%d-%H%M%S"), []
    with BenchRun(a, len(schedules) * len(a.seeds)) as s:
        for sch in schedules:
            for seed in a.seeds:
                run_id = f"bench-fl-schedule-{stamp}-{str(sch).replace(':', '-')}-s{seed}"
                outcome = s.run([sys.executable, "-m", "commlab.fl.run", "--codec", "fp32", "--clients", str(a.clients),
                                 "--rounds", str(a.rounds), "--samples-per-round", str(a.samples_per_round),
                                 "--model", a.model, "--dataset", a.dataset, "--epochs", str(sch.epochs),
                                 "--lr", str(sch.lr), "--batch-size", str(sch.batch),
                                 "--server-momentum", str(sch.server_momentum), "--lr-decay", str(sch.lr_decay),
                                 "--backend", "local", "--seed", str(seed),
                                 "--results-dir", str(a.results_dir), "--run-id", run_id], run_id)
                row = {"schedule": str(sch), **sch._asdict(), "seed": seed, "status": outcome.status, "run_id": run_id}
                if outcome.ok:
                    rounds = load_run(a.results_dir / run_id).tables["rounds"]
                    hit = time_to_target(rounds, a.target)
                    row.update({"final_accuracy": float(rounds["test_accuracy"].iloc[-1]),
                                "best_accuracy": float(rounds["test_accuracy"].max()),
                                "round_to_target": hit["step_to_target"], "time_to_target_s": hit["time_to_target_s"],
                                "wall_s": outcome.wall_s,
                                "accuracy_by_round": " ".join(f"{100 * x:.2f}" for x in rounds["test_accuracy"])})
                rows.append(row)
                s.step(f"{sch} seed {seed}: {row['status']}")
        df = pd.DataFrame(rows)
        s.write(df, {"schedule": "epochs:lr:batch:server momentum:lr decay", "seed": "seed",
                     "final_accuracy": "final accuracy", "best_accuracy": "best accuracy",
                     "round_to_target": f"first round >= {a.target:g}", "time_to_target_s": "time to target (s)",
                     "wall_s": "run wall time (s)", "accuracy_by_round": "accuracy by round (%)", "status": "status"},
                f"FL training schedules on {a.dataset} ({a.model})",
                notes=[f"fp32, {a.clients} clients, Dirichlet(0.5), {a.rounds} rounds of {a.samples_per_round} "
                       f"samples per client, SGD momentum {dataset_defaults(a.dataset)['momentum']:g}; one run per "
                       f"schedule and seed (seeds {', '.join(map(str, a.seeds))})"],
                after=["\n".join(seed_summary(df))])
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
