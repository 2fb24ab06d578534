"""The chaos table's link faults (benchmarks/bench_chaos.py): FL and DDP runs with every node in its
own network namespace (root), where one node's link is flapped to near zero for a few seconds, or
loses a share of its incoming packets for a few seconds. Each fault starts at a protocol point
(fault_points): the node halts there, its link is disturbed, the node goes on, and the link comes
back after the fault's length. A case passes when the run completes with the undisturbed run's
model hashes (the transport repairs what was lost; a node lost for longer than its lease comes back).
FL's model does not depend on the link, so FL cases are held to the undisturbed loopback run.
DDP's does: its ring runs in one direction on loopback and in two on shaped links
(dds.settings.DdsSettings.ring_directions), and the two add the ranks' gradients in different
orders, so DDP cases are held to an undisturbed run on the same shaped links, made once.
"""
from __future__ import annotations

import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from commlab.links.netns import NetnsLab
from commlab.links.profiles import apply_link, ingress_drop_rule, set_rate
from commlab.links.spec import LinkSpec
from commlab.runs.roster import ddp_roster
from commlab.testbed.node_procs import NodeProcess

LINK_RATE = "100mbit"  # the undisturbed link of every node in the link cases
FLAP_BPS = 8000  # "near zero": tbf's smallest rate here (commlab.links.profiles.set_rate)
FAULT_S = 5.0
# How long a node may take to reach its fault point (every case of the table): nodes start, and
# run their first rounds, slowly on a loaded machine.
START_S = 600.0


def flap(lab: NetnsLab, node: str) -> Callable[[], None]:
    """Set the node's uplink to FLAP_BPS; returns what restores it."""
    set_rate(FLAP_BPS, "eth0", lab.prefix(node))
    return lambda: set_rate(LinkSpec(LINK_RATE).rate_bps, "eth0", lab.prefix(node))


def loss_burst(lab: NetnsLab, node: str, loss_pct: float) -> Callable[[], None]:
    """Drop loss_pct of the node's incoming packets; returns what ends the burst."""
    rule = ingress_drop_rule(loss_pct)
    iptables(lab, node, "-A", *rule)
    return lambda: iptables(lab, node, "-D", *rule)


def iptables(lab: NetnsLab, node: str, *args: str) -> None:
    """iptables in the node's namespace (waiting for the machine-wide xtables lock); AssertionError
    naming the command when it fails, which fails the case."""
    out = subprocess.run([*lab.prefix(node), "iptables", "-w", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"iptables {' '.join(args)} in {node}: {out.stderr.strip()}")


@contextmanager
def shaped_lab(names: list[str]) -> Iterator[NetnsLab]:
    with NetnsLab(names) as lab:
        for name in names:
            apply_link(LinkSpec(LINK_RATE), "eth0", lab.prefix(name))
        yield lab


def disturb(node: NodeProcess, point: str, start: Callable[[], Callable[[], None]], fault_s: float) -> None:
    """Wait for the node to halt at `point`, start the fault, let the node go on, end the fault
    fault_s later."""
    node.wait_for(f"HALTED at {point}", timeout=START_S)
    end = start()
    node.proc.send_signal(signal.SIGUSR1)
    time.sleep(fault_s)
    end()


def add_link_cases(chaos, fl_want: list, fl_hashes, ddp_hashes, finish_all) -> None:
    """The link-fault rows of the chaos table (bench_chaos.Chaos), the DDP ones after a row of
    their reference: an undisturbed DDP run on the same links."""
    faults = {"flap": (f"uplink flapped to {FLAP_BPS / 1000:g} kbit/s for {FAULT_S:g} s",
                       lambda lab, n: flap(lab, n)),
              "loss": (f"30 % of incoming packets lost for {FAULT_S:g} s",
                       lambda lab, n: loss_burst(lab, n, 30.0))}
    fl_nodes, ddp_nodes = ["controller", "client-0", "client-1"], [n.name for n in ddp_roster(3)]
    ddp_want: list = []

    def ddp_reference(folder: Path) -> tuple[str, bool]:
        with shaped_lab(ddp_nodes) as lab:
            procs = chaos.ddp_run(folder, lab=lab)
            codes = finish_all(procs)
        if codes == [0, 0, 0]:
            ddp_want.extend(ddp_hashes(procs))
        return f"exit codes {codes}", codes == [0, 0, 0]
    chaos.case("ddp-link-undisturbed", f"none: the reference of the DDP link cases ({LINK_RATE} links)",
               "completes", ddp_reference, needed=any(chaos.selected(f"ddp-link-{kind}") for kind in faults))

    for kind, (what, start) in faults.items():
        def fl_run(folder: Path, start=start) -> tuple[str, bool]:
            with shaped_lab(fl_nodes) as lab:
                procs = chaos.fl_run(folder, halt={"client-1": "before_upload@2"}, lab=lab)
                try:
                    disturb(procs["client-1"], "before_upload@2", lambda: start(lab, "client-1"), FAULT_S)
                finally:  # the nodes end before their namespaces go
                    codes = finish_all(procs.values())
            same = fl_hashes(procs) == fl_want
            return f"exit codes {codes}, models {'the same' if same else 'DIFFERENT'}", codes == [0, 0, 0] and same
        chaos.case(f"fl-link-{kind}", f"client-1: {what}, from its round-2 upload on ({LINK_RATE} links)",
                   "completes, same models", fl_run)

        def ddp_run(folder: Path, start=start) -> tuple[str, bool]:
            if not ddp_want:
                raise AssertionError("no reference: the undisturbed DDP run on the same links failed")
            with shaped_lab(ddp_nodes) as lab:
                procs = chaos.ddp_run(folder, halt={1: "before_exchange@12"}, lab=lab)
                try:
                    disturb(procs[1], "before_exchange@12", lambda: start(lab, "worker-1"), FAULT_S)
                finally:
                    codes = finish_all(procs)
            same = ddp_hashes(procs) == ddp_want
            return f"exit codes {codes}, models {'the same' if same else 'DIFFERENT'}", codes == [0, 0, 0] and same
        chaos.case(f"ddp-link-{kind}", f"rank 1 of 3: {what}, from step 12's exchange on ({LINK_RATE} links)",
                   "completes, same models", ddp_run)
