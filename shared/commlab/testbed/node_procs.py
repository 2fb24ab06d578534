"""Node processes started one by one, each with its own log file, for runs that inject faults.

A launcher (`commlab.fl.run`, `commlab.ddp.run`) starts all nodes and ends them together; a fault
test or the chaos benchmark needs each node's PID (to pause, kill or restart it), its own fault
point (commlab.runs.fault_points) and its output to wait for a line. The configs are the launchers' own.

    procs, paths, run_dir = start_fl(tmp, domain=40, rounds=3, halt={"client-1": "before_upload@2"})
    procs["client-1"].wait_for("HALTED at before_upload@2")
    procs["client-1"].proc.send_signal(signal.SIGKILL)

Given a `lab` (commlab.links.netns.NetnsLab of the run's node names), each node runs in its own
namespace and talks over its eth0, which the caller shapes and disturbs (link faults).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from commlab.fl.run import build_configs, parse_args
from commlab.links.netns import NetnsLab
from commlab.runs.fault_points import HALT_ENV
from commlab.runs.launch import NODES_DIR
from commlab.runs.roster import ddp_roster, fl_roster_of
from commlab.runs.zygote import forkable, shared_zygote
from commlab.testbed.compose_file import networked_dds
from commlab.testbed.engine import REPO

WORKER_CONFIG = REPO / "experiments" / "worker.conf.json"


class NodeProcess:
    """One node process, output in a file that can be waited on for a line."""

    def __init__(self, out_dir: Path, name: str, argv: list[str], halt_at: str | None = None,
                 env: dict[str, str] | None = None, lab: NetnsLab | None = None):
        self.name, self.log = name, out_dir / f"{name}.log"
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        full_env.pop(HALT_ENV, None)
        if halt_at:
            full_env[HALT_ENV] = halt_at
        with open(self.log, "w") as log:
            if lab or not forkable(argv):
                self.proc = subprocess.Popen([*(lab.prefix(name) if lab else []), *argv], stdout=log, stderr=subprocess.STDOUT,
                                             env=full_env)
            else:  # forked with its libraries imported (commlab.runs.zygote)
                self.proc = shared_zygote().spawn(argv, full_env, log)

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        """The first match of `pattern` in the output; AssertionError if the node exits first or
        after `timeout` seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = re.search(pattern, self.text())
            if m:
                return m
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode} before {pattern!r}:\n{self.text()[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no {pattern!r} within {timeout}s:\n{self.text()[-3000:]}")

    def finish(self, timeout: float = 120) -> int:
        """Its exit code; killed and AssertionError if still running after `timeout` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} still running after {timeout}s:\n{self.text()[-3000:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_fl(out_dir: Path, domain: int, rounds: int, deadline: float = 6.0, clients: int = 2,
             halt: dict[str, str] | None = None, downlink: str = "fp32", extra: tuple[str, ...] = (),
             run_id: str = "fault",
             lab: NetnsLab | None = None) -> tuple[dict[str, NodeProcess], dict[str, Path], Path]:
    """A small FL run (int8_sparse uploads, 128 samples a round) as one process per node, the
    controller first; `halt` maps a node name to its fault point, `extra` are more launcher flags.
    Returns the processes and config paths by node name, and the run's results folder."""
    ctl, cls = build_configs(parse_args([
        "--codec", "int8_sparse", "--clients", str(clients), "--rounds", str(rounds), "--deadline", str(deadline),
        "--samples-per-round", "128", "--batch-size", "32", "--train-subset", "2000", "--test-subset", "300",
        "--results-dir", str(out_dir / "results"), "--run-id", run_id, "--domain-id", str(domain),
        "--downlink-codec", downlink, *extra]))
    ctl["round_hard_limit_s"] = max(60.0, deadline)
    paths, procs = {}, {}
    for node, cfg in zip(fl_roster_of(cls), [ctl, *cls]):
        if lab:
            cfg = {**cfg, "dds": networked_dds(cfg["dds"], node.name, lab.addresses, "lan")}
        paths[node.name] = out_dir / f"{node.name}.json"
        paths[node.name].write_text(json.dumps(cfg))
        procs[node.name] = NodeProcess(out_dir, node.name, [sys.executable, str(NODES_DIR / node.script),
                                                           str(paths[node.name])], (halt or {}).get(node.name),
                                       lab=lab)
    return procs, paths, out_dir / "results" / run_id


def start_ddp(out_dir: Path, method: str, domain: int, world: int = 3, halt: dict[int, str] | None = None,
              train_subset: int = 960, epochs: int = 2, lab: NetnsLab | None = None, **changes) -> list[NodeProcess]:
    """A small DDP run (MNIST subset, the example worker config) as one process per rank (named
    rank<r>; in a lab, worker-<r>); `halt` maps a rank to its fault point, `changes` are worker
    config keys."""
    cfg = json.loads(WORKER_CONFIG.read_text())
    cfg.update(results_dir=str(out_dir / "results"), run_id=method, method=method, method_params={}, summary_every=1000,
               dds={"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]},
               dataset={"name": "mnist", "train_subset": train_subset, "test_subset": 200}, **changes)
    cfg["training"].update(epochs=epochs)
    procs = []
    for rank, node in enumerate(ddp_roster(world)):
        path = out_dir / f"{node.name}.json"  # each its own file: a started rank may be reading it already
        if lab:  # unicast, as on loopback: the ring (two directions here, one on loopback: last bits differ)
            cfg = {**cfg, "dds": networked_dds({**cfg["dds"], "multicast": "off"}, node.name, lab.addresses, "lan")}
        path.write_text(json.dumps(cfg))
        procs.append(NodeProcess(out_dir, node.name if lab else f"rank{rank}",
                                 [sys.executable, str(NODES_DIR / "worker.py"), str(path)],
                                 (halt or {}).get(rank), env=dict(node.env), lab=lab))
    return procs
