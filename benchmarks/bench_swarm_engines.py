"""The same FL run on compose (one engine) and as a stack on a swarm across two Docker engines: the
controller's model after every round must be bit-identical (docs/scale.md).

The two engines are dockerds of their own, each in a network namespace, joined by a veth pair in
198.19.252.0/30 (commlab.testbed.engine_pair); the stack puts the controller and client-1 on engine
a and client-0 on engine b, and DDS finds its peers by unicast (an overlay across engines carries
no multicast; multicast is off in both runs). Both runs: same seed and flags. Everything the pair
made (engines, namespaces, veth pair, their data) is removed at the end, also when a run fails.
Exit status 1 when a round's models differ or a run is missing a round.

    python benchmarks/bench_swarm_engines.py [--rounds 3 --samples 1000]   # make bench-swarm-engines (root)
"""
from __future__ import annotations

import os
import signal
import sys
import time

import pandas as pd
from bench_stack import add_fl_options, fl_run

from commlab.bench import BenchParser, BenchRun
from commlab.output.progress import echo
from commlab.report.runs import load_run
from commlab.testbed.backend import round_digests
from commlab.testbed.engine_pair import EnginePair


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "swarm-engines", {"rounds": 2, "samples": 300}, seeds=0, profile="10mbit")
    add_fl_options(p, rounds=3, samples=1000)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the engine pair is taken down
    with BenchRun(a, 3) as s:
        compose = fl_run(s, a, "docker", "swarm-engines")
        s.step("compose")
        t0 = time.monotonic()
        with EnginePair(log=echo) as pair:
            setup_s = time.monotonic() - t0
            s.step("engine pair up")
            os.environ["DOCKER_HOST"] = pair.manager.host  # the launcher's docker commands go to the swarm's manager
            try:
                swarm = fl_run(s, a, "swarm", "swarm-engines")
            finally:
                del os.environ["DOCKER_HOST"]
        s.step("swarm across two engines")
        runs = {"compose": load_run(compose), "swarm": load_run(swarm)}
        digests = {"compose": round_digests(compose / "compose.log"), "swarm": round_digests(swarm / "swarm.log")}
        acc = {k: dict(zip(r.tables["rounds"]["round"], r.tables["rounds"]["test_accuracy"])) for k, r in runs.items()}
        rows = [{"round": r, "compose_model": digests["compose"].get(r, "missing"),
                 "swarm_model": digests["swarm"].get(r, "missing"),
                 "equal": digests["compose"].get(r) is not None and digests["compose"].get(r) == digests["swarm"].get(r),
                 "compose_accuracy": acc["compose"].get(r), "swarm_accuracy": acc["swarm"].get(r)}
                for r in range(1, a.rounds + 1)]
        equal = sum(row["equal"] for row in rows)
        engines = runs["swarm"].manifest.get("swarm_engines", {})
        s.write(pd.DataFrame(rows), None, "The same FL run on compose and on a swarm across two Docker engines",
                notes=[f"{a.codec}, {a.clients} clients, {a.rounds} rounds of {a.samples} samples per client, "
                       f"profile {a.profile}, seed {a.seed}, DDS multicast off; swarm nodes on engines "
                       f"{', '.join(f'{n} {e}' for n, e in sorted(engines.items())) or 'unknown'}; "
                       f"engine pair up (namespaces, engines, swarm, images copied) in {setup_s:.0f} s"],
                after=[f"rounds with bit-identical models: {equal}/{a.rounds}"])
    return 0 if equal == a.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
