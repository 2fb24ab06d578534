"""Faults a run must survive, one row each: real FL and DDP runs on loopback (small data) while a
node is paused past its DDS lease, killed, restarted, starved by CPU hogs, or shares the machine
with other runs; as root also runs in network namespaces whose link is flapped to near zero or
loses packets in a burst (benchmarks/chaos_links.py). Every fault starts at a defined point of the node's protocol (fault_points), and
a pause ends only after every peer has logged the node as lost, plus the pause length.

A case passes when the run completes with the same per-round (FL) or per-epoch (DDP) model hashes
as the undisturbed run of the same settings, or, where the protocol cannot complete (a DDP rank
killed for good), when every other node ends with one line naming the lost node within the bound
the case states.

    python benchmarks/bench_chaos.py [--pauses 2,10,60]     # -> results/bench/chaos.{csv,md}
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.runs.claims import Claims
from commlab.runs.launch import NODES_DIR
from commlab.testbed.node_procs import NodeProcess, start_ddp, start_fl

from chaos_links import START_S, add_link_cases

LEASE_S = 2.0
FL_ROUNDS = 3
FL_MODEL = rf"round (\d+)/{FL_ROUNDS} .* model ([0-9a-f]{{16}})"
DDP_EPOCH = r"\[worker (\d)\] epoch (\d+): .* model ([0-9a-f]{16})"
DDP_RETURN_S = 10.0  # the return window of the killed-rank case


@dataclass
class Row:
    case: str
    fault: str
    expected: str
    outcome: str
    passed: bool
    wall_s: float


def fl_hashes(procs: dict[str, NodeProcess]) -> list[tuple[str, str]]:
    return re.findall(FL_MODEL, procs["controller"].text())


def ddp_hashes(procs: list[NodeProcess]) -> list[tuple[str, ...]]:
    return sorted(t for p in procs for t in re.findall(DDP_EPOCH, p.text()))


def finish_all(procs, timeout: float = 400) -> list[int]:
    """Exit codes, in order; every process is ended however this returns."""
    procs = list(procs)
    try:
        return [p.finish(timeout) for p in procs]
    finally:
        for p in procs:
            p.stop()


def pause(node: NodeProcess, others: list[NodeProcess], pause_s: float) -> None:
    """SIGSTOP the halted node until every other one logged it lost and pause_s passed; resume."""
    node.proc.send_signal(signal.SIGSTOP)
    start = time.monotonic()
    for p in others:
        p.wait_for(f"peer '{node_name(node)}' lost", timeout=60)
    time.sleep(max(0.0, pause_s - (time.monotonic() - start)))
    node.proc.send_signal(signal.SIGCONT)
    node.proc.send_signal(signal.SIGUSR1)


def node_name(p: NodeProcess) -> str:
    return f"worker-{p.name[len('rank'):]}" if p.name.startswith("rank") else p.name


class Chaos:
    def __init__(self, work: Path, bench_run: BenchRun, only: list[str] | None = None):
        self.work, self.bench_run, self.only = work, bench_run, only
        self.rows: list[Row] = []
        self._live: list[NodeProcess] = []  # ended after each case, whatever happened
        # Each run's DDS domain is claimed, so test suites and other runs on the machine never share it;
        # released after each case, once its nodes have ended.
        self._domains = Claims()

    def fl_run(self, work: Path, halt: dict[str, str] | None = None, run_id: str = "fault", **kw) -> dict[str, NodeProcess]:
        kw.setdefault("deadline", 200.0)
        procs, _, _ = start_fl(work, domain=self.next_domain(), rounds=FL_ROUNDS, halt=halt, run_id=run_id, **kw)
        self._live += procs.values()
        return procs

    def ddp_run(self, work: Path, **kw) -> list[NodeProcess]:
        procs = start_ddp(work, "dense", self.next_domain(), **kw)
        self._live += procs
        return procs

    def next_domain(self) -> int:
        return self._domains.take("domain")

    def selected(self, name: str) -> bool:
        """Whether --cases asks for the case ``name``."""
        return not self.only or any(fnmatch(name, pattern) for pattern in self.only)

    def case(self, name: str, fault: str, expected: str, run: Callable[[Path], tuple[str, bool]],
             needed: bool = False) -> None:
        """One row of the table. ``needed``: run even where --cases does not name it (a reference
        the selected cases are held to)."""
        if not (needed or self.selected(name)):
            return
        folder = self.work / name
        folder.mkdir()
        start = time.monotonic()
        try:
            outcome, passed = run(folder)
        except AssertionError as e:  # a node exited or hung where the case needed it
            outcome, passed = f"failed: {str(e).splitlines()[0]}", False
        finally:
            for p in self._live:
                p.stop()
            self._live.clear()
            self._domains.release()
        row = Row(name, fault, expected, outcome, passed, time.monotonic() - start)
        self.bench_run.step(f"{name}: {'pass' if passed else 'FAIL'}, {outcome} ({row.wall_s:.0f} s)")
        self.rows.append(row)

    def baselines(self) -> tuple[list, list]:
        for name in ("fl-undisturbed", "ddp-undisturbed"):
            (self.work / name).mkdir()
        fl = self.fl_run(self.work / "fl-undisturbed")
        assert finish_all(fl.values()) == [0, 0, 0], "the undisturbed FL run failed"
        ddp = self.ddp_run(self.work / "ddp-undisturbed")
        assert finish_all(ddp) == [0, 0, 0], "the undisturbed DDP run failed"
        return fl_hashes(fl), ddp_hashes(ddp)

    def fl_pause(self, node: str, point: str, pause_s: float, want: list) -> None:
        def run(folder: Path) -> tuple[str, bool]:
            procs = self.fl_run(folder, halt={node: point})
            procs[node].wait_for(f"HALTED at {point}", timeout=START_S)
            pause(procs[node], [p for n, p in procs.items() if n != node], pause_s)
            codes = finish_all(procs.values())
            same = fl_hashes(procs) == want
            return f"exit codes {codes}, models {'the same' if same else 'DIFFERENT'}", codes == [0] * len(codes) and same
        self.case(f"fl-pause-{node}-{pause_s:g}s", f"{node} paused at {point} for {pause_s:g} s "
                  f"({pause_s / LEASE_S:g} leases)", "completes, same models", run)

    def ddp_pause(self, pause_s: float, want: list) -> None:
        point = "before_exchange@12"

        def run(folder: Path) -> tuple[str, bool]:
            procs = self.ddp_run(folder, halt={1: point})
            procs[1].wait_for(f"HALTED at {point}", timeout=START_S)
            pause(procs[1], [procs[0], procs[2]], pause_s)
            codes = finish_all(procs)
            same = ddp_hashes(procs) == want
            return f"exit codes {codes}, models {'the same' if same else 'DIFFERENT'}", codes == [0, 0, 0] and same
        self.case(f"ddp-pause-rank-{pause_s:g}s", f"rank 1 of 3 paused at {point} for {pause_s:g} s "
                  f"({pause_s / LEASE_S:g} leases)", "completes, same models", run)

    def fl_kill_client(self) -> None:
        def run(folder: Path) -> tuple[str, bool]:
            procs = self.fl_run(folder, halt={"client-1": "before_upload@2"}, deadline=10.0)
            procs["client-1"].wait_for("HALTED at before_upload@2", timeout=START_S)
            procs["client-1"].proc.send_signal(signal.SIGKILL)
            codes = finish_all([procs["controller"], procs["client-0"]])
            rounds = len(fl_hashes(procs))
            return (f"exit codes {codes}, {rounds}/{FL_ROUNDS} rounds (2 and 3 closed by the deadline with client-0)",
                    codes == [0, 0] and rounds == FL_ROUNDS)
        self.case("fl-kill-client", "client-1 killed (SIGKILL) before its round-2 upload",
                  "completes with the other client (10 s deadline)", run)

    def fl_restart_controller(self) -> None:
        def run(folder: Path) -> tuple[str, bool]:
            procs = self.fl_run(folder, halt={"controller": "after_round@2"}, deadline=6.0)
            ctl = procs["controller"]
            after_2 = ctl.wait_for(rf"round 2/{FL_ROUNDS} .* model ([0-9a-f]{{16}})", timeout=START_S).group(1)
            ctl.wait_for("HALTED at after_round@2")
            ctl.proc.send_signal(signal.SIGKILL)
            ctl.proc.wait()
            path = folder / "controller.json"
            cfg = json.loads(path.read_text())
            cfg["init_path"] = str(folder / "results" / "fault" / "checkpoints")
            path.write_text(json.dumps(cfg))
            procs["controller"] = NodeProcess(folder, "controller-2", [sys.executable, str(NODES_DIR / "controller.py"),
                                                                       str(path)])
            self._live.append(procs["controller"])
            resumed = procs["controller"].wait_for(r"resuming at round (\d+) .* model ([0-9a-f]{16})",
                                                   timeout=START_S).groups()
            codes = finish_all(procs.values())
            return (f"exit codes {codes}, resumed at round {resumed[0]} from model {resumed[1]}",
                    codes == [0] * len(codes) and resumed == ("3", after_2))
        self.case("fl-restart-controller", "controller killed (SIGKILL) after round 2, restarted from its checkpoint",
                  "completes, resumes from the round-2 model", run)

    def ddp_kill_rank(self) -> None:
        bound = DDP_RETURN_S + 30.0

        def run(folder: Path) -> tuple[str, bool]:
            procs = self.ddp_run(folder, halt={2: "before_exchange@5"}, peer_return_s=DDP_RETURN_S)
            procs[2].wait_for("HALTED at before_exchange@5", timeout=START_S)
            procs[2].proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            codes = finish_all(procs[:2], timeout=bound)
            took = time.monotonic() - killed
            lines = [next((ln for ln in p.text().splitlines() if "PeerLost" in ln), "") for p in procs[:2]]
            named = all("rank 2" in ln for ln in lines)
            return (f"exit codes {codes} after {took:.0f} s: {lines[0].strip()}",
                    codes == [1, 1] and named and took <= bound)
        self.case("ddp-kill-rank", f"rank 2 of 3 killed (SIGKILL) before step 5's exchange; peer_return_s {DDP_RETURN_S:g}",
                  f"the others fail with one line naming rank 2 within {DDP_RETURN_S + 30:g} s", run)

    def fl_cpu_hogs(self, want: list) -> None:
        def run(folder: Path) -> tuple[str, bool]:
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
            try:
                procs = self.fl_run(folder)
                codes = finish_all(procs.values())
            finally:
                for h in hogs:
                    h.kill()
                    h.wait()
            same = fl_hashes(procs) == want
            return f"exit codes {codes}, models {'the same' if same else 'DIFFERENT'}", codes == [0] * len(codes) and same
        self.case("fl-cpu-hogs", "two busy processes beside the run (one per core)", "completes, same models", run)

    def fl_four_runs(self, want: list) -> None:
        def run(folder: Path) -> tuple[str, bool]:
            runs = []
            for k in range(4):
                (folder / f"run{k}").mkdir()
                runs.append(self.fl_run(folder / f"run{k}", run_id=f"run{k}"))
            codes = [finish_all(procs.values()) for procs in runs]
            same = [fl_hashes(procs) == want for procs in runs]
            return (f"{sum(c == [0, 0, 0] for c in codes)}/4 completed, {sum(same)}/4 with the same models",
                    all(c == [0, 0, 0] for c in codes) and all(same))
        self.case("fl-four-runs", "four FL runs at once on one machine (own DDS domains)",
                  "all complete, same models", run)


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "chaos", {"pauses": "10"})
    p.add_argument("--pauses", default="2,10,60", help="pause lengths in seconds, comma-separated")
    p.add_argument("--work", default="results/bench/chaos-runs", help="each case's node logs and results (emptied first)")
    p.add_argument("--cases", help="only the cases whose names match these comma-separated patterns, e.g. '*-link-*'")
    a = p.parse_args(argv)
    pauses = [float(s) for s in a.pauses.split(",")]
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    links = os.geteuid() == 0  # namespaces, tc and iptables
    with BenchRun(a, 3 * len(pauses) + 5 + 5 * links, "case") as s:
        chaos = Chaos(work, s, a.cases.split(",") if a.cases else None)
        fl_want, ddp_want = chaos.baselines()
        for pause_s in pauses:
            chaos.fl_pause("controller", "after_round@1", pause_s, fl_want)
            chaos.fl_pause("client-1", "before_upload@2", pause_s, fl_want)
            chaos.ddp_pause(pause_s, ddp_want)
        chaos.fl_kill_client()
        chaos.fl_restart_controller()
        chaos.ddp_kill_rank()
        chaos.fl_cpu_hogs(fl_want)
        chaos.fl_four_runs(fl_want)
        if links:
            add_link_cases(chaos, fl_want, fl_hashes, ddp_hashes, finish_all)
        failed = [r.case for r in chaos.rows if not r.passed]
        s.write(pd.DataFrame([{"case": r.case, "fault": r.fault, "expected": r.expected, "outcome": r.outcome,
                               "passed": "yes" if r.passed else "NO", "wall_s": round(r.wall_s, 1)}
                              for r in chaos.rows]), None,
                "FL and DDP runs while nodes are paused past their lease, killed, restarted, starved, share "
                "the machine, or lose their link",
                after=[f"{len(chaos.rows) - len(failed)}/{len(chaos.rows)} cases passed"]
                + ([] if links else ["link faults not run: they need root (network namespaces, tc, iptables)"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
