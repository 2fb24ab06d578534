"""What secure aggregation and DP cost an FL run, side by side on the same links: 4 clients, each
uplink codec of --codecs, plain FedAvg, with --secagg (SecAgg+, docs/privacy.md), with DP-FedAvg's
noise added by the controller (--dp-noise), and with both (the clients add the noise under SecAgg+),
same seeds, data and settings. SecAgg+ takes integer levels only: its rows of a floating-point
codec (fp32) are not run, and say why. Beside them, Flower's SecAgg+ (its SecAggPlusWorkflow and
secaggplus_mod with Flower's own quantization, `python -m commlab.peers.run --kind flower --transport
deployment --secaggplus`) and Flower FedAvg without it, same clients, model, data, seeds and links
(codec `flower`: Flower sends float32 models down and up, its SecAgg+ masked integers up).

As root with a --profile other than lan every node runs in its own network namespace with the
profile's link (commlab.fl.run); without root the runs are unshaped. Per run: the bytes each client
sent per round (its clients-<i>.csv bytes_up: the update frame, or SecAgg+'s keys, shares, masked
input and unmask reply, with the transport's own traffic), the same on the wire (the controller's
interface counters, every header included, per client; namespaces only), the mean round time
(rounds.csv round_time_s, training included), each as x of the plain run of the same codec measured
in the same invocation, and the final accuracy against that plain run.

    python benchmarks/bench_secagg.py            # make bench-secagg
    python benchmarks/bench_secagg.py --quick    # 2 rounds
    python benchmarks/bench_secagg.py --codecs fp32 int8  # fp32 too (plain and DP rows)
    python benchmarks/bench_secagg.py --no-flower  # without Flower's rows
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.links.profiles import profile_arg
from commlab.privacy.field import field_steps
from commlab.report.runs import try_load_run

CLIENTS = 4
# z 0.1: with 4 clients a round, z 0.5 puts noise of std 0.125 on every weight of the mean each round,
# and the clients' training diverges to non-finite updates by round 2.
DP = ["--dp-noise", "0.1", "--dp-clip", "1.0", "--dp-delta", "1e-3"]
# SecAgg+ without DP clips each update to L2 norm 5: above the clients' update norms in these runs (about
# 1 to 3), so the clip leaves them whole; the rotated grid's step is proportional to it (privacy.update_grid).
SECAGG_CLIP = 5.0
MODES = {"plain": [], "secagg": ["--secagg", "--secagg-clip", str(SECAGG_CLIP)], "dp": DP,
         "secagg-dp": ["--secagg", *DP]}
FLOWER = "flower"  # the codec column of Flower's rows
FLOWER_MODES = {"plain": [], "secagg": ["--secaggplus"]}
# Flower's deployment runtime starts its ServerApp anew when one has not checked in within 30 s (its
# heartbeat interval), which on a loaded machine can repeat without end: a Flower run not over within
# 5 minutes plus 3 a round is ended, and its row says it failed.
FLOWER_LIMIT_S = (300.0, 180.0)
COLUMNS = {"codec": "uplink codec", "mode": "aggregation", "status": "status", "rounds": "rounds",
           "client_up_kB": "sent per client and round (kB)", "client_up_x": "x of plain",
           "wire_up_kB": "on the wire per client and round (kB)", "controller_in_kB": "received by the controller per round (kB)",
           "round_s": "mean round time (s)", "round_x": "x of plain", "test_accuracy": "final test accuracy (%)",
           "accuracy_pp": "vs plain (pp)", "epsilon": "epsilon"}


def fl_run(s: BenchRun, codec: str, mode: str, a: argparse.Namespace, run_id: str) -> str:
    common = ["--clients", str(CLIENTS), "--rounds", str(a.rounds), "--samples-per-round", str(a.samples),
              "--batch-size", "32", "--partition", "iid", "--train-subset", str(a.train_subset),
              "--test-subset", str(a.test_subset), "--profile", a.profile, "--seed", str(a.seed),
              "--results-dir", str(a.results_dir), "--run-id", run_id]
    if codec == FLOWER:
        cmd = [sys.executable, "-m", "commlab.peers.run", "--kind", "flower", "--transport", "deployment", *common,
               *FLOWER_MODES[mode]]
        return s.run(cmd, run_id, timeout_s=FLOWER_LIMIT_S[0] + a.rounds * FLOWER_LIMIT_S[1]).status
    cmd = [sys.executable, "-m", "commlab.fl.run", "--codec", codec, "--backend", "local", *common, *MODES[mode]]
    return s.run(cmd, run_id).status


def refusal(codec: str, mode: str) -> str | None:
    """Why a mode cannot run with a codec (SecAgg+ off the field grid, Flower not installed), or None."""
    if codec == FLOWER:
        return None if importlib.util.find_spec("flwr") else "not run: flwr is not installed (make flwr)"
    if "--secagg" not in MODES[mode]:
        return None
    try:
        field_steps(codec)
    except ValueError as e:
        return f"not run: {str(e).split(': ', 1)[1]}"
    return None


def row_of(codec: str, mode: str, status: str, a: argparse.Namespace, run_id: str) -> dict:
    row: dict = {"codec": codec, "mode": mode, "status": status}
    run = try_load_run(a.results_dir / run_id)
    if run is not None and len(run.tables["rounds"]):
        rounds, clients = run.tables["rounds"], run.tables["clients"]
        wire = rounds["iface_bytes_up"] / rounds["n_participants"]
        row.update(rounds=len(rounds), client_up_kB=clients["bytes_up"].mean() / 1e3,
                   wire_up_kB=wire.mean() / 1e3 if wire.notna().all() else None,
                   controller_in_kB=rounds["bytes_up"].mean() / 1e3, round_s=rounds["round_time_s"].mean(),
                   test_accuracy=100 * float(rounds["test_accuracy"].iloc[-1]),
                   epsilon=float(rounds["epsilon"].iloc[-1]) if codec != FLOWER and "--dp-noise" in MODES[mode] else None)
    return row


def with_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Each row against the plain run of its codec."""
    plain = table[table["mode"] == "plain"].set_index("codec")
    out = table.copy()
    for value, ratio in (("client_up_kB", "client_up_x"), ("round_s", "round_x")):
        out[ratio] = out[value] / out["codec"].map(plain[value])
    out["accuracy_pp"] = out["test_accuracy"] - out["codec"].map(plain["test_accuracy"])
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(__doc__, "secagg", {"rounds": 2}, seeds=0)
    p.add_argument("--codecs", nargs="+", default=["int8"], help="uplink codecs (fp32: plain and DP rows only)")
    p.add_argument("--no-flower", dest="flower", action="store_false", help="leave out Flower's rows")
    p.add_argument("--profile", default="10mbit", type=profile_arg, help="the links (namespaces as root)")
    # 6 rounds: up to round 4 or 5 the accuracy still climbs steeply (from about 60 to 90 %), and two runs
    # compared there differ by where each is on that slope more than by their aggregation.
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--samples", type=int, default=256, help="samples per client and round")
    p.add_data_subsets(train=4000, test=1000)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    cases = [(codec, mode) for codec in a.codecs for mode in MODES] + [(FLOWER, m) for m in FLOWER_MODES if a.flower]
    rows = []
    with BenchRun(a, sum(refusal(*case) is None for case in cases)) as s:
        for codec, mode in cases:
            if (reason := refusal(codec, mode)) is not None:
                rows.append({"codec": codec, "mode": mode, "status": reason})
                continue
            run_id = f"bench-secagg-{stamp}-{codec}-{mode}"
            rows.append(row_of(codec, mode, fl_run(s, codec, mode, a, run_id), a, run_id))
            s.step(f"{codec} {mode} {rows[-1]['status']}")
        table = with_ratios(pd.DataFrame(rows).reindex(columns=list(COLUMNS)))
        s.write(table, COLUMNS, "Secure aggregation (SecAgg+) and DP against plain FedAvg",
                notes=[f"MNIST, mnist_cnn, {CLIENTS} clients (iid), one process each, profile {a.profile}, "
                       f"{a.rounds} rounds, {a.samples} samples per client and round, seed {a.seed}; SecAgg+ with "
                       f"every other client as neighbour, threshold 2, clip {SECAGG_CLIP:g} (with DP: 1), the update "
                       "rotated onto the grid (without DP); DP: z 0.1, clip 1, delta 1e-3, all 4 clients each round; "
                       f"Flower {FLOWER} rows: Flower's deployment runtime (SuperLink, SuperNodes), its SecAgg+ with "
                       "shares to all 4 clients, threshold 3, clipping range 8, 2**22 levels, masks modulo 2**32"])
    # Ours must all run; a Flower run that failed (its runtime, FLOWER_LIMIT_S) is a row that says so.
    ours = table[~table["status"].str.startswith("not run") & (table["codec"] != FLOWER)]
    return 0 if (ours["status"] == "ok").all() else 1


if __name__ == "__main__":
    sys.exit(main())
