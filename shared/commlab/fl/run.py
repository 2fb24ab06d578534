"""`python -m commlab.fl.run --codec C --clients N --rounds R --backend local|docker|swarm|auto`

Builds the controller and client configs of one FL run (unique DDS domain, run id, results
folder), then starts the nodes through commlab.testbed.backend.run_nodes: local processes (in
network namespaces for a shaped profile when root) or one container per node.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from commlab.config.schema import ConfigError, from_dict, to_dict
from commlab.data.partition import SCHEMES
from commlab.fl.config import BATCHNORM, ClientConfig, ControllerConfig
from commlab.fl.defaults import fill_defaults
from commlab.runs.claims import hold
from commlab.runs.launch import CsvProgress, Launch, NodeProcesses, codec_params, launch, write_node_config
from commlab.links.profiles import profile_arg
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, resolve_spec_path
from commlab.output.run_folder import new_run_id, peak_memory_line, write_json_atomic
from commlab.runs.keys import run_keys, with_key_file
from commlab.runs.roster import CONTROLLER, fl_identities_of, fl_roster_of
from commlab.testbed.backend import choose_backend, run_nodes
from commlab.testbed.docker_run import run_fl
from commlab.testbed.netns_run import run_fl_netns
from commlab.runs.process_exit import exit_now

CLIENT_GRACE_S = 60.0  # how long clients may take to exit after the controller finished


def add_experiment_args(p: argparse.ArgumentParser) -> None:
    """The flags that define one FL experiment (clients, data, model, local training, seeds, output),
    shared with the Flower peer (commlab.peers.flower_run) so both run the same one."""
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    # Training flags default to None: the dataset's default (commlab.fl.defaults), set by fill_defaults.
    p.add_argument("--samples-per-round", type=int, help="per client and round (default: the dataset's)")
    p.add_argument("--model", default="mnist_cnn", help="a model by name (docs/workloads.md), sized for the dataset")
    p.add_argument("--model-param", action="append", default=[], metavar="KEY=JSON",
                   help="model parameter, e.g. hidden=256 (repeatable)")
    p.add_argument("--dataset", default="mnist", help="a dataset by name, text:<path> or synthetic:<name> "
                   "(docs/workloads.md); its files in COMMLAB_DATA_DIR (make DATA_DIR=)")
    p.add_argument("--partition", choices=SCHEMES, default="dirichlet",
                   help="the clients' shares (docs/workloads.md); natural: the dataset's writers or roles")
    p.add_argument("--alpha", type=float, default=0.5, help="dirichlet concentration")
    p.add_argument("--labels-per-client", type=int, default=2, help="shards, label_quantity")
    p.add_argument("--exponent", type=float, default=1.0, help="quantity: client shares follow k^-exponent")
    p.add_argument("--epochs", type=int, help="local epochs (default: the dataset's, commlab.fl.defaults)")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float, help="the clients' SGD learning rate in round 1")
    p.add_argument("--lr-decay", type=float, help="round r trains at lr * lr_decay**(r - 1)")
    p.add_argument("--momentum", type=float, help="the clients' SGD momentum")
    p.add_argument("--seed", type=int, default=0, help="the run seed: model init, sampling, local training, "
                   "codecs (commlab.runs.seeds)")
    p.add_argument("--data-seed", type=int, help="the data subsets and the clients' shares (default: --seed)")
    p.add_argument("--train-subset", type=int, help="use a random subset of the training set (fast checks)")
    p.add_argument("--test-subset", type=int)
    p.add_argument("--results-dir", default="results")
    p.add_argument("--run-id")
    p.add_argument("--train-step", default=DEFAULT_TRAIN_STEP, metavar="SPEC",
                   help="every client's loss of one batch: package.module:function or path/to/file.py:function "
                   "(default %(default)s; docs/fl.md)")


def training_section(a: argparse.Namespace) -> dict:
    """The training section of add_experiment_args' flags (controller's and Flower server's)."""
    return {"local_epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr, "lr_decay": a.lr_decay,
            "samples_per_round": a.samples_per_round}


def experiment_sections(a: argparse.Namespace) -> dict:
    """The model, dataset and partition sections of add_experiment_args' flags (every node's)."""
    return {"model": {"name": a.model, "params": codec_params(a.model_param, "model parameter")},
            "dataset": {"name": a.dataset, "train_subset": a.train_subset, "test_subset": a.test_subset},
            "partition": {"scheme": a.partition, "alpha": a.alpha, "labels_per_client": a.labels_per_client,
                          "exponent": a.exponent},
            "seeds": {"run": a.seed, "data": a.data_seed}}


def per_round_arg(text: str) -> int | float:
    """--per-round: "10" is a count, "0.1" a share of the clients (config sampling.clients_per_round)."""
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a count or a fraction, got {text!r}") from None


def fixed_bits_arg(text: str) -> int | None:
    """--fixed-bits: "4" -> 4; "codec" -> None (config adaptive.fixed_bits null: the run's codec)."""
    if text == "codec":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bits 1..8 or `codec`, got {text!r}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m commlab.fl.run", description=__doc__.split("\n\n")[0])
    add_experiment_args(p)
    p.add_argument("--codec", default="fp32")
    p.add_argument("--codec-param", action="append", default=[], metavar="KEY=JSON",
                   help="codec parameter, e.g. ratio=0.05 (repeatable)")
    p.add_argument("--downlink-codec", default="fp32", metavar="NAME",
                   help="compressor of the model broadcast (any --codec name); fp32 sends the whole model each round")
    p.add_argument("--downlink-param", action="append", default=[], metavar="KEY=JSON")
    p.add_argument("--multicast", choices=("off", "discovery", "data"),
                   help="what DDS may multicast (default: data on the private networks of namespaces and "
                   "containers, off on loopback, where multicast is refused)")
    p.add_argument("--batchnorm", choices=BATCHNORM, default="aggregate",
                   help="BatchNorm running statistics: sent and averaged with the weights (aggregate), or kept on "
                   "the clients, the controller recomputing them to evaluate (local) (docs/workloads.md)")
    p.add_argument("--backend", choices=("local", "docker", "swarm", "auto"), default="local")
    p.add_argument("--profile", default="lan", type=profile_arg,
                   help="link profile (commlab.links.profiles): applied in containers, or "
                   "with --backend local in network namespaces (root; without root the run is unshaped)")
    p.add_argument("--strategy", default="fedavg", help="aggregation: fedavg, median, trimmed_mean, norm_clip, krum, "
                   "fltrust (docs/security.md), or fedbuff: asynchronous, buffered (docs/scale.md)")
    p.add_argument("--per-round", type=per_round_arg, metavar="N|FRACTION",
                   help="clients sampled each round (seeded by --seed and the round): a count, or a share in (0, 1] "
                   "such as 0.1; fedbuff: clients training at the same time (default: all)")
    p.add_argument("--availability", help="CSV trace client_id,first_round,last_round: clients train only in "
                   "those rounds (make fl-trace writes a diurnal one)")
    p.add_argument("--procs", type=int, help="client processes hosting the --clients clients (logical clients: "
                   "each process trains its clients one after another; docs/scale.md); default: one per client")
    p.add_argument("--buffer-size", type=int, default=2, help="fedbuff: updates per server step")
    p.add_argument("--max-staleness", type=int, default=10, help="fedbuff: older updates are rejected")
    p.add_argument("--trim-fraction", type=float, help="trimmed_mean: share cut at each end (default 0.25)")
    p.add_argument("--clip-norm", type=float, help="norm_clip: L2 bound (default: the round's median norm)")
    p.add_argument("--num-malicious", type=int, help="krum: f, the attackers its score allows for (default 1)")
    p.add_argument("--keep", type=int, help="krum: best-scored updates averaged (default 1: Krum; more: Multi-Krum)")
    p.add_argument("--root-samples", type=int, help="fltrust: training samples the server holds as its clean "
                   "root set (default 100)")
    p.add_argument("--server-lr", type=float, help="step on the averaged update (1: FedAvg; default: the dataset's)")
    p.add_argument("--server-momentum", type=float, help="FedAvgM's beta (0: FedAvg; default: the dataset's)")
    p.add_argument("--attack", choices=("sign_flip",), help="TEST ONLY: the last --attackers clients forge "
                   "their updates (sign_flip: send -scale * delta)")
    p.add_argument("--attack-scale", type=float, default=10.0)
    p.add_argument("--attackers", type=int, default=1)
    p.add_argument("--min-clients", type=int, default=1)
    p.add_argument("--deadline", type=float, default=300.0, help="round deadline in seconds")
    p.add_argument("--memory-phases", action="store_true", help="each node's resident memory per phase, exact, and "
                   "the exchange's against its target (docs/workloads.md); costs time: freed memory goes back to the "
                   "kernel at every phase boundary, and training faults its memory in again each round")
    p.add_argument("--init-path", help="checkpoint file or directory to resume from")
    p.add_argument("--domain-id", type=int, help="DDS domain (default: one that no other run or test on this machine holds, commlab.runs.claims)")
    p.add_argument("--adaptive", choices=("joint", "equal"), help="per-client qsgd bits and uplink rates "
                   "(docs/adaptive.md): the joint allocation, or the baseline equal (--fixed-bits, B/M each); "
                   "needs --codec qsgd<levels> unless --fixed-bits codec (rates only)")
    p.add_argument("--total-uplink-mbit", type=float, default=16.0, help="adaptive: the shared uplink B")
    p.add_argument("--probe-bits", type=int, default=4)
    p.add_argument("--fixed-bits", type=fixed_bits_arg, default=4, metavar="BITS|codec",
                   help="adaptive equal: every client's qsgd bits, or `codec`: the --codec itself (any "
                   "compressor) and only the uplink rates chosen (split equally, or by joint)")
    p.add_argument("--beta", type=float, default=1.0, help="adaptive: weight of the quantization variance")
    p.add_argument("--min-bits", type=int, default=1, help="adaptive joint: fewest bits a client may get")
    p.add_argument("--stop-accuracy", type=float, metavar="FRACTION",
                   help="end the run once a round's test accuracy reaches this (e.g. 0.97)")
    p.add_argument("--round-time-budget", type=float, metavar="SECONDS",
                   help="end the run once the summed round times reach this")
    p.add_argument("--dp-noise", type=float, metavar="Z", help="client-level DP (DP-FedAvg, docs/privacy.md): "
                   "noise multiplier z, the noise std on the sum of clipped updates over --dp-clip")
    p.add_argument("--dp-clip", type=float, default=1.0, help="DP: L2 bound of a client update (adaptive: its start)")
    p.add_argument("--dp-delta", type=float, default=1e-5, help="DP: epsilon is reported at this delta")
    p.add_argument("--dp-adaptive", action="store_true", help="DP: clip at the median update norm, tracked "
                   "privately (Andrew et al. 2021)")
    p.add_argument("--dp-count-stddev", type=float, help="DP adaptive: noise on the count of unclipped updates "
                   "(default: clients per round / 20)")
    p.add_argument("--secagg", action="store_true", help="secure aggregation (SecAgg+, docs/privacy.md): the "
                   "controller learns only the sum of each round's updates (int8, qsgd<s>, minmax<n>, terngrad)")
    p.add_argument("--secagg-threshold", type=int, help="SecAgg+: shares that recover a secret (default: a majority "
                   "of the neighbours)")
    p.add_argument("--secagg-neighbours", type=int, help="SecAgg+: neighbours per client (default: every other client)")
    p.add_argument("--secagg-clip", type=float, help="SecAgg+: L2 bound a client clips its update to; without "
                   "--dp-noise the grid spans a rotated coordinate's spread under it (default: --dp-clip, which with "
                   "--dp-noise the clients clip to and add noise under SecAgg+)")
    p.add_argument("--secagg-record", action="store_true", help="SecAgg+: each party saves its own view to "
                   "<run>/secagg-levels (a client its levels, the controller the sum), to check the sum")
    p.add_argument("--speed-factors", help="compute heterogeneity: speed per client, cycling, e.g. 1,1,0.5,0.25 "
                   "(training stretched by a measured sleep to 1/speed of its time)")
    return fill_defaults(p.parse_args(argv))


def build_configs(a: argparse.Namespace) -> tuple[dict, list[dict]]:
    """Controller and client configs (validated through the same schema the nodes use)."""
    run_id = a.run_id or new_run_id("fl", a.codec)
    domain = a.domain_id if a.domain_id is not None else hold("domain")
    results = str(Path(a.results_dir).resolve())
    common = {"run_id": run_id, "results_dir": results, "link_profile": a.profile,
              "dds": {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"], "multicast": a.multicast},
              **experiment_sections(a),
              "train_step": resolve_spec_path(a.train_step), "batchnorm": a.batchnorm,
              "memory_phases": a.memory_phases}
    controller = {**common, "checkpoint_dir": str(Path(results) / run_id / "checkpoints"),
                  "rounds": a.rounds, "expected_clients": a.clients, "min_clients": a.min_clients,
                  "codec": {"name": a.codec, "params": codec_params(a.codec_param)},
                  "downlink": {"name": a.downlink_codec, "params": codec_params(a.downlink_param)},
                  "training": training_section(a),
                  "strategy": {"name": a.strategy, "trim_fraction": a.trim_fraction, "clip_norm": a.clip_norm,
                               "num_malicious": a.num_malicious, "keep": a.keep, "root_samples": a.root_samples,
                               # fltrust's server update trains like the clients
                               "root_momentum": a.momentum if a.strategy == "fltrust" else None,
                               "server_lr": a.server_lr, "server_momentum": a.server_momentum},
                  "round_deadline_s": a.deadline, "round_hard_limit_s": max(600.0, 2 * a.deadline),
                  "init_path": a.init_path}
    # One process per client, or --procs processes hosting them all (logical clients, docs/scale.md).
    hosts = {} if a.procs is None else {"procs": a.procs}
    clients = [{**common, "client_id": i, "num_clients": a.clients, "optimizer": {"momentum": a.momentum},
                "warm_codec": controller["codec"], **hosts}
               for i in range(a.clients if a.procs is None else a.procs)]
    controller.update(hosts)
    if a.procs is not None and (a.attack is not None or a.speed_factors is not None):
        raise ConfigError("--procs: attackers and speed factors are per client process; not with logical clients")
    controller["sampling"] = {"clients_per_round": a.per_round,
                              "availability": None if a.availability is None else str(Path(a.availability).resolve())}
    controller["stop"] = {"accuracy": a.stop_accuracy, "round_time_budget_s": a.round_time_budget}
    if a.strategy == "fedbuff":
        controller["fedbuff"] = {"buffer_size": a.buffer_size, "max_staleness": a.max_staleness}
    if a.dp_noise is not None:
        controller["privacy"] = {"noise_multiplier": a.dp_noise, "clip_norm": a.dp_clip, "delta": a.dp_delta,
                                 "adaptive_clipping": a.dp_adaptive, "clipped_count_stddev": a.dp_count_stddev}
    if a.secagg:
        controller["secagg"] = {"threshold": a.secagg_threshold, "neighbours": a.secagg_neighbours,
                                "clip": a.dp_clip if a.secagg_clip is None else a.secagg_clip,
                                "record_levels": a.secagg_record}
    if a.adaptive is not None:
        controller["adaptive"] = {"policy": a.adaptive, "total_uplink_mbit": a.total_uplink_mbit,
                                  "probe_bits": a.probe_bits, "fixed_bits": a.fixed_bits, "beta": a.beta,
                                  "min_bits": a.min_bits}
    for c, speed in zip(clients, speed_factors(a.speed_factors, len(clients))):
        c["speed_factor"] = speed
    if a.attack is not None:
        if not 0 < a.attackers <= a.clients:
            raise ConfigError(f"--attackers: must be in 1..{a.clients}, got {a.attackers}")
        for c in clients[a.clients - a.attackers:]:
            c["attack"] = {"kind": a.attack, "scale": a.attack_scale}
    # Round-trip through the schema: a bad flag fails here, before any process starts.
    return (to_dict(from_dict(ControllerConfig, controller)),
            [to_dict(from_dict(ClientConfig, c)) for c in clients])


def run_local(controller_cfg: dict, client_cfgs: list[dict]) -> int:
    """Start controller + clients as local processes; non-zero if any of them failed."""
    run_dir = Path(controller_cfg["results_dir"]) / controller_cfg["run_id"]
    with NodeProcesses() as procs:
        controller, *clients = [procs.start(node, write_node_config(run_dir, node.name, cfg))
                                for node, cfg in zip(fl_roster_of(client_cfgs), [controller_cfg, *client_cfgs])]
        # The controller decides the run; stop early only when no client is left to train.
        procs.wait_while(lambda: controller.poll() is None and any(c.poll() in (None, 0) for c in clients))
        if controller.poll() == 0:
            procs.wait_while(lambda: any(c.poll() is None for c in clients), CLIENT_GRACE_S)
    return 1 if procs.report() else 0


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    return launch("commlab.fl.run", lambda: plan_run(a), (RuntimeError,))


def plan_run(a: argparse.Namespace) -> Launch:
    """The run the flags ask for: its node configs, backend, progress (rounds.csv) and summary."""
    controller, clients = build_configs(a)
    backend = choose_backend(a.backend)
    names = [node.name for node in fl_roster_of(clients)]

    def run(run_dir: Path) -> int:
        # Every message is authenticated: the controller holds the run key, each client process its
        # pair key and the keys of the clients it speaks for (their updates are signed with them).
        with run_keys(controller["run_id"], names, trusted={CONTROLLER},
                      identities=fl_identities_of(clients)) as key_files:
            keyed, *keyed_clients = [with_key_file(cfg, key_files[n]) for n, cfg in zip(names, [controller, *clients])]
            return run_nodes("commlab.fl.run", backend, a.profile, run_dir, names,
                             local=lambda: run_local(keyed, keyed_clients),
                             netns=lambda: run_fl_netns(keyed, keyed_clients, a.profile),
                             docker=lambda: run_fl(keyed, keyed_clients, a.profile, Path(controller["results_dir"]),
                                                   swarm=backend == "swarm"))

    def after(run_dir: Path) -> None:
        summarize(run_dir)
        record_heterogeneity(run_dir, {c["client_id"]: c["speed_factor"] for c in clients}, a.profile)
    # Every backend writes rounds.csv into the run folder on this host: one row per round, whoever runs the nodes.
    return Launch(controller, f"codec {a.codec} up, {a.downlink_codec} down, {a.clients} clients, {a.rounds} rounds, "
                              f"backend {backend}, DDS domain {controller['dds']['domain_id']}",
                  CsvProgress("rounds.csv", a.rounds, "round", note_column="test_accuracy", note_label="acc"),
                  run, after)


def shorten(participants: str, most: int = 8) -> str:
    """The participants of a round, or with many (sampling, logical clients) their count and the first few."""
    names = participants.split(";") if participants else []
    return participants if len(names) <= most else f"{len(names)} ({';'.join(names[:3])};...)"


def summarize(run_dir: Path) -> None:
    """One line per round from rounds.csv: what the run measured, whichever backend ran it."""
    path = run_dir / "rounds.csv"
    if not path.exists():
        return
    with open(path) as f:
        for r in csv.DictReader(f):
            print(f"[run] round {r['round']}: accuracy {float(r['test_accuracy']):.4f}, "
                  f"up {int(r['bytes_up']) / 1e6:.2f} MB, down {int(r['bytes_down']) / 1e6:.2f} MB, "
                  f"round time {float(r['round_time_s']):.1f}s, participants {shorten(r['participants'])}", flush=True)
    if memory := peak_memory_line(run_dir):
        print(f"[run] {memory}", flush=True)


def speed_factors(text: str | None, clients: int) -> list[float]:
    """"1,1,0.5,0.25" -> one speed per client, cycling; None -> all 1 (ValueError on a bad list)."""
    if not text:
        return [1.0] * clients
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"--speed-factors: expected numbers separated by commas, got {text!r}") from None
    return [values[i % len(values)] for i in range(clients)]


def record_heterogeneity(run_dir: Path, speeds: dict[int, float], link_profile: str) -> None:
    """Put how the clients' heterogeneity was emulated into the manifest (`heterogeneity`)."""
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        return
    manifest = json.loads(path.read_text())
    manifest["heterogeneity"] = {
        "compute": {"method": "measured sleep: after local training each client sleeps (1/speed_factor - 1) x its "
                              "measured training time (clients-<i>.csv stretch_s)",
                    "speed_factors": {f"client-{i}": f for i, f in sorted(speeds.items())}},
        "links": {"profile": link_profile,
                  "method": "tc tbf on each node's own interface (manifest link_applied); adaptive and equal "
                            "runs change each client's rate before its upload (clients-<i>.csv rate_bps)"}}
    write_json_atomic(path, manifest)


if __name__ == "__main__":
    exit_now(main())
