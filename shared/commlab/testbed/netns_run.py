"""Local backend with shaped links: each node a local process in its own network namespace.

The same link profiles as the containers, applied with tc to each namespace's eth0; nodes
reach each other over a private bridge in 198.19.<net>.0/24. Needs root. Results go straight
to the host results folder, with the same layout as the other backends (plus link-<node>.json
and manifest `link_applied`).
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from ..links.netns import NetnsLab
from ..links.profiles import link_for, trace_path
from ..links.trace import RATES_FILE, append_rates, load_trace
from ..links.trace_follower import TraceFollower
from ..output.progress import echo
from ..output.run_folder import write_json_atomic
from ..runs.launch import NodeProcesses, write_node_config
from ..runs.roster import Node, ddp_roster, fl_roster_of
from .backend import RunFailed, record_links
from .compose_file import networked_dds

GRACE_S = 60.0  # the others get this long to finish after the primary (first) node exited


def run_fl_netns(controller_cfg: dict[str, Any], client_cfgs: list[dict[str, Any]], link_profile: str,
                 net: int = 251) -> Path:
    return _run(fl_roster_of(client_cfgs), [controller_cfg, *client_cfgs], link_profile, net)


def run_ddp_netns(worker_cfgs: list[dict[str, Any]], link_profile: str, net: int = 252) -> Path:
    return _run(ddp_roster(len(worker_cfgs)), worker_cfgs, link_profile, net)


def _run(nodes: list[Node], cfgs: list[dict[str, Any]], link_profile: str, net: int) -> Path:
    """Raises NetnsError / LinkError only before any node started, RunFailed when a node failed."""
    def start(procs: NodeProcesses, lab: NetnsLab, run_dir: Path) -> None:
        for node, cfg in zip(nodes, cfgs):
            cfg = {**cfg, "link_profile": link_profile, "dds": networked_dds(cfg["dds"], node.name, lab.addresses,
                                                                            link_profile)}
            procs.start(node, write_node_config(run_dir, node.name, cfg), prefix=lab.prefix(node.name))

    def wait(procs: NodeProcesses) -> None:
        primary = procs.procs[nodes[0].name]
        procs.wait_while(lambda: primary.poll() is None)
        procs.wait_while(procs.running, GRACE_S)
    return run_in_namespaces(nodes, Path(cfgs[0]["results_dir"]) / cfgs[0]["run_id"], link_profile, net, start, wait)


def run_in_namespaces(nodes: list[Node], run_dir: Path, link_profile: str, net: int,
                      start: Callable[[NodeProcesses, NetnsLab, Path], None],
                      wait: Callable[[NodeProcesses], None]) -> Path:
    """A namespace per node on one bridge, each eth0 shaped by the profile (a trace's rates followed
    while the nodes run); `start` starts the nodes, `wait` decides when the run is over. Links are
    recorded with the results (every rate set: link-rates.csv); RunFailed names the nodes that
    failed (NetnsError / LinkError only before any node started)."""
    names = [n.name for n in nodes]
    trace = load_trace(path) if (path := trace_path(link_profile)) is not None else None
    with NetnsLab(names, net=net) as lab:
        links = {n: {"profile": link_profile, **lab.shape(n, link_for(link_profile, n))} for n in names}
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / RATES_FILE).unlink(missing_ok=True)
        append_rates(run_dir / RATES_FILE, 0.0, {n: link_for(link_profile, n).rate_bps for n in names})
        echo_not_applied(links)
        follow = TraceFollower(trace, lab.prefix, names, run_dir / RATES_FILE, echo) if trace else nullcontext()
        with NodeProcesses() as procs, follow:
            start(procs, lab, run_dir)
            wait(procs)
    for name, record in links.items():
        write_json_atomic(run_dir / f"link-{name}.json", record)
    record_links(run_dir, links)
    failed = procs.report()
    if failed:
        raise RunFailed(f"run {run_dir.name}: node(s) {', '.join(failed)} exited with errors")
    return run_dir


def echo_not_applied(links: dict[str, dict[str, Any]]) -> None:
    """One line for what the kernel could not apply to any node (e.g. no netem: delay)."""
    missing = {n: r["not_applied"] for n, r in links.items() if r.get("not_applied")}
    if missing:
        reasons = sorted({r["reason"] for r in missing.values()})
        what = sorted({k for r in missing.values() for k in r if k != "reason"})
        echo(f"[run] NOT applied on {len(missing)}/{len(links)} nodes: {', '.join(what)} ({'; '.join(reasons)})")
