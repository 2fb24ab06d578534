"""`python -m commlab.peers.run --kind flower --clients 2 --rounds 10 --profile 10mbit`: Flower FedAvg
on the testbed's links with `make fl-fp32`'s data, model, seeds and hyper-parameters (docs/peers.md).

The Flower server is node `controller`, client i node `client-<i>`: with the `lan` profile plain
processes on loopback, otherwise (root) each in its own network namespace with the profile on its
eth0, the FL nodes' links (`link_for`), the server's 198.19.254.x address for the clients. Without
root the run is unshaped and says so (commlab.testbed.backend.run_nodes). Needs `flwr` (an optional
extra: `make peer-flower` and `make bench-peers-fl` install it).

`--transport grpc-bidi` (default): Flower's legacy API, the node programs of `flower.py`.
`--transport deployment`: Flower's deployment runtime. Node `controller` runs `flower-superlink`
(`--isolation process`) and a `flower-superexec` that runs the ServerApp (`flwr-serverapp`); node
`client-<i>` runs `flower-supernode --node-config client-id=<i>` (`--isolation process`) and a
`flower-superexec` that runs the ClientApp (`flwr-clientapp`, a process per round); then `flwr run
--stream` (in the controller's namespace) submits the app project written to
results/<run-id>/flower-app (components in `commlab.peers.flower_app`) and returns when the run
ended. Every API listens on loopback or the namespace's own address only, without TLS
(`--insecure`); every process started here is ended by PID when the run is over.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from commlab.config.schema import ConfigError, from_dict, to_dict
from commlab.fl.defaults import fill_defaults
from commlab.fl.run import add_experiment_args, experiment_sections, training_section
from commlab.links.profiles import profile_arg
from commlab.config.train_step_spec import resolve_spec_path
from commlab.output.progress import echo
from commlab.output.run_folder import new_run_id
from commlab.peers.flower import METHOD, TRANSPORTS, FlowerConfig, roster
from commlab.runs.claims import hold
from commlab.runs.launch import END_GRACE_S, PEER_GRACE_S, CsvProgress, Launch, NodeProcesses, launch, write_node_config
from commlab.testbed.backend import RunFailed, run_nodes

NET = 254            # 198.19.254.0/24 (FL namespaces 251, DDS workers 252, gloo 253)
NETNS_PORT = 8080    # the server has its own namespace: a fixed port is free
SUPERNODE_PORT = 9094  # deployment, in a namespace: each SuperNode's Runtime API on the namespace's own lo
BIN = Path(sys.executable).parent  # flower-superlink, flower-supernode, flower-superexec, flwr of this venv
LINK_READY_S = 120.0   # deployment: how long the SuperLink may take to answer its Control API


def parse_args(argv: list[str]) -> argparse.Namespace:
    """`python -m commlab.fl.run`'s flags and defaults, for those that apply to Flower FedAvg."""
    p = argparse.ArgumentParser(prog="python -m commlab.peers.run --kind flower", description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", default="flower")
    add_experiment_args(p)
    p.add_argument("--profile", default="lan", type=profile_arg)
    p.add_argument("--deadline", type=float, default=600.0, help="Flower's round timeout in seconds")
    p.add_argument("--net", type=int, default=NET, help="namespaces: 198.19.<net>.0/24 (its own bridge)")
    p.add_argument("--transport", default="grpc-bidi",
                   help=f"{' | '.join(TRANSPORTS)}: Flower's legacy start_server/start_client, or its deployment "
                   "runtime (SuperLink, SuperNodes, flwr run)")
    p.add_argument("--secaggplus", action="store_true", help="Flower's SecAgg+ (SecAggPlusWorkflow and "
                   "secaggplus_mod, with Flower's quantization defaults; --transport deployment, 3 clients or more)")
    return fill_defaults(p.parse_args(argv))


def build_config(a: argparse.Namespace) -> dict:
    """The one config every Flower node reads, validated through its schema (ConfigError)."""
    cfg = {"run_id": a.run_id or new_run_id("fl", METHOD), "results_dir": str(Path(a.results_dir).resolve()),
           "clients": a.clients, "rounds": a.rounds, "server_address": f"127.0.0.1:{hold('port')}",
           "transport": a.transport, "secaggplus": a.secaggplus,
           "link_profile": a.profile, **experiment_sections(a),
           "training": training_section(a),
           "optimizer": {"momentum": a.momentum}, "round_timeout_s": a.deadline,
           "train_step": resolve_spec_path(a.train_step)}
    return to_dict(from_dict(FlowerConfig, cfg))


def _wait(procs: NodeProcesses) -> None:
    """The server decides the run; stop early once a client failed (every round needs every client)."""
    server, *clients = procs.procs.values()
    procs.wait_while(lambda: server.poll() is None and all(c.poll() in (None, 0) for c in clients))
    procs.wait_while(procs.running, PEER_GRACE_S)


def run_local(cfg: dict) -> int:
    run_dir = Path(cfg["results_dir"]) / cfg["run_id"]
    path = write_node_config(run_dir, "flower", {**cfg, "interface": "lo"})
    if cfg["transport"] == "deployment":
        ports = {n.name: hold("port") for n in roster(cfg["clients"])[1:]}
        try:
            with NodeProcesses() as procs:
                start_deployment(procs, run_dir, path, cfg["server_address"], lambda name: (), ports)
                wait_deployment(procs, run_dir)
        except RunFailed as e:
            print(f"commlab.peers.run: {e}", file=sys.stderr, flush=True)
            return 1
        return 0
    with NodeProcesses() as procs:
        for node in roster(cfg["clients"]):
            procs.start(node, path)
        _wait(procs)
    return 1 if procs.report() else 0


def _flower_env(run_dir: Path, node: str) -> dict[str, str]:
    """Flower's processes: this venv's commands first on PATH (SuperExec starts flwr-serverapp /
    flwr-clientapp by name), no telemetry or update check (nothing leaves the testbed), warnings and
    errors only, each node's own Flower home (its installed FABs) in the run folder."""
    return {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_LOG_LEVEL": "WARNING",
            "FLWR_HOME": str(run_dir / "flower-home" / node)}


def write_app(run_dir: Path, config_path: Path, link: str) -> Path:
    """The Flower app project of this run (its components are `commlab.peers.flower_app`'s, its run
    config the path of the run's flower.json) and the `flwr` CLI's connection to the run's SuperLink."""
    secaggplus = json.loads(config_path.read_text()).get("secaggplus", False)
    app = run_dir / "flower-app"
    app.mkdir(parents=True, exist_ok=True)
    (app / "pyproject.toml").write_text(f"""[project]
name = "commlab-flower-fedavg"
version = "1.0.0"
description = "The commlab Flower FedAvg peer (docs/peers.md), generated by commlab.peers.flower_run"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "commlab"

[tool.flwr.app.components]
serverapp = "commlab.peers.flower_app:server_app"
clientapp = "commlab.peers.flower_app:{'secaggplus_client_app' if secaggplus else 'client_app'}"

[tool.flwr.app.config]
config = {json.dumps(str(config_path))}
""")
    home = run_dir / "flower-home" / "cli"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[superlink]\ndefault = "commlab"\n\n'
                                      f'[superlink.commlab]\naddress = "{link}"\ninsecure = true\n')
    return app


def start_deployment(procs: NodeProcesses, run_dir: Path, config_path: Path, link: str, prefix,
                     supernode_ports: dict[str, int], supernode_host: str = "127.0.0.1") -> None:
    """SuperLink + its SuperExec (node controller), a SuperNode + SuperExec per client, then `flwr run`
    once the SuperLink answers. `link` is the SuperLink's host:port (its Fleet, Control and Runtime
    HTTP API); `prefix(node)` the command prefix of a node (its namespace)."""
    host, port = link.rsplit(":", 1)
    insecure = ["--insecure"]
    server, *clients = roster(len(supernode_ports))
    app = write_app(run_dir, config_path, link)
    env = _flower_env(run_dir, server.name)
    procs.start_command("superlink", [str(BIN / "flower-superlink"), *insecure, "--isolation", "process",
                                      "--host", host, "--port", port, "--disable-runtime-dependency-installation"],
                        prefix(server.name), env)
    procs.start_command("superexec-controller", [str(BIN / "flower-superexec"), *insecure,
                                                 "--runtime-api-address", link], prefix(server.name), env)
    for i, node in enumerate(clients):
        env = _flower_env(run_dir, node.name)
        runtime = f"{supernode_host}:{supernode_ports[node.name]}"
        procs.start_command(node.name, [str(BIN / "flower-supernode"), *insecure, "--superlink", link,
                                        "--isolation", "process", "--host", supernode_host,
                                        "--port", str(supernode_ports[node.name]), "--node-config", f"client-id={i}"],
                            prefix(node.name), env)
        procs.start_command(f"superexec-{node.name}", [str(BIN / "flower-superexec"), *insecure,
                                                       "--runtime-api-address", runtime], prefix(node.name), env)
    cli_env = {**os.environ, **_flower_env(run_dir, "cli")}
    deadline = time.monotonic() + LINK_READY_S
    while True:  # `flwr ls` answers once the SuperLink's Control API is up
        ls = subprocess.run([*prefix(server.name), str(BIN / "flwr"), "ls", "--format", "json"], env=cli_env,
                            capture_output=True, text=True, timeout=LINK_READY_S)
        if ls.returncode == 0:
            break
        if time.monotonic() > deadline or procs.procs["superlink"].poll() is not None:
            raise RunFailed(f"the SuperLink at {link} did not answer: {(ls.stdout + ls.stderr).strip()[-300:]}")
        time.sleep(1.0)
    procs.start_command("flwr-run", [str(BIN / "flwr"), "run", str(app), "--stream"], prefix(server.name),
                        _flower_env(run_dir, "cli"))


def wait_deployment(procs: NodeProcesses, run_dir: Path) -> None:
    """Until `flwr run --stream` returned (the run ended) or the SuperLink or every SuperNode is
    gone; then every process started here is ended (by PID). RunFailed unless the ServerApp
    recorded a completed run."""
    run, link = procs.procs["flwr-run"], procs.procs["superlink"]
    nodes = [p for name, p in procs.procs.items() if name.startswith("client-")]
    procs.wait_while(lambda: run.poll() is None and link.poll() is None and any(p.poll() is None for p in nodes))
    procs.wait_while(lambda: run.poll() is None, PEER_GRACE_S)
    # Clients of an API before its server: the SuperExecs, then the SuperNodes, then the SuperLink
    # (each SIGTERM, then SIGKILL after END_GRACE_S), by PID.
    for stage in ("superexec-", "client-", ""):
        for name, proc in procs.procs.items():
            if name.startswith(stage) and proc.poll() is None:
                proc.terminate()
        for name, proc in procs.procs.items():
            if name.startswith(stage):
                try:
                    proc.wait(timeout=END_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    procs.end()  # nothing left running; joins the output relays
    codes = {name: p.returncode for name, p in procs.procs.items()}
    manifest = run_dir / "manifest.json"
    status = json.loads(manifest.read_text()).get("status") if manifest.exists() else "no manifest"
    echo(f"[run] Flower deployment processes ended, exit codes: {codes}; run {status}")
    if status != "completed" or codes["flwr-run"] != 0:
        raise RunFailed(f"run {run_dir.name}: Flower deployment run {status}, flwr run exit {codes['flwr-run']}")
    procs.procs.clear()  # ended on purpose: no node failed


def run_netns(cfg: dict, profile: str, net: int = NET) -> Path:
    from commlab.testbed.netns_run import run_in_namespaces
    nodes = roster(cfg["clients"])

    deployment = cfg["transport"] == "deployment"
    run_dir = Path(cfg["results_dir"]) / cfg["run_id"]

    def start(procs: NodeProcesses, lab, run_dir: Path) -> None:
        address = f"{lab.addresses[nodes[0].name]}:{NETNS_PORT}"
        path = write_node_config(run_dir, "flower", {**cfg, "interface": "eth0", "server_address": address})
        if deployment:  # each SuperNode's Runtime API on its own namespace's loopback
            start_deployment(procs, run_dir, path, address, lab.prefix,
                             {n.name: SUPERNODE_PORT for n in nodes[1:]})
            return
        for node in nodes:
            procs.start(node, path, prefix=lab.prefix(node.name))
    return run_in_namespaces(nodes, run_dir, profile, net, start,
                             (lambda procs: wait_deployment(procs, run_dir)) if deployment else _wait)


def _no_containers() -> Path:
    raise RuntimeError("no container images for the Flower peer yet (local processes or namespaces only)")


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    return launch("commlab.peers.run", lambda: plan_run(a))


def plan_run(a: argparse.Namespace) -> Launch:
    """The run the flags ask for: the Flower nodes' config, progress (rounds.csv), local processes or namespaces."""
    try:
        import flwr
    except ImportError:
        raise ConfigError("--kind flower needs flwr (pip install flwr; `make peer-flower` does it)") from None
    cfg = build_config(a)
    return Launch(cfg, f"{METHOD}{' with SecAgg+' if a.secaggplus else ''} (flwr {flwr.__version__}, {a.transport}), {a.clients} clients, {a.rounds} rounds, "
                       f"profile {a.profile}",
                  CsvProgress("rounds.csv", a.rounds, "round", note_column="test_accuracy", note_label="acc"),
                  lambda run_dir: run_nodes("commlab.peers.run", "local", a.profile, run_dir,
                                            [n.name for n in roster(a.clients)], local=lambda: run_local(cfg),
                                            netns=lambda: run_netns(cfg, a.profile, a.net), docker=_no_containers))
