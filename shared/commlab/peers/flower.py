"""Flower FedAvg as a peer of the DDS FL run (docs/peers.md): one server and N clients over
Flower's transports, training exactly what `make fl-fp32` trains.

Same seed tree (`commlab.runs.seeds`: model init, Dirichlet partitions, each client's round subset and
batch orders), same round plan and local SGD (`commlab.fl.strategy.FedAvg.configure_round`,
`commlab.fl.local_training.round_subset` / `local_update`), FedAvg weighted by samples, the
controller's test-set evaluation after every round. Flower (`flwr`) is an optional extra: this
module is imported only by Flower nodes. What goes over the wire is Flower's own: the whole model
(one float32 vector with BatchNorm's statistics, as the DDS run's default batchnorm "aggregate",
`ndarrays_to_parameters`) down to every client and back up each round.

Two transports (`FlowerConfig.transport`), the same training: `grpc-bidi`, Flower's legacy API
(`start_server`/`start_client`), started as a node program (`FlowerNode.script`):
`ROLE=server|client CLIENT=i python flower.py CONFIG.json`; and `deployment`, Flower's deployment
runtime (SuperLink, SuperNodes, SuperExec, `flwr run`; `flower_run.py` starts them), whose ServerApp
and ClientApp (`flower_app.py`) use `server_parts` and `ClientTrainer` below.
"""
from __future__ import annotations

import sys

if __name__ == "__main__":  # run as a script: keep this package's folder off the import path
    sys.path.pop(0)

import logging  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from commlab.config.schema import (  # noqa: E402
    ConfigError, DatasetSection, ModelSection, SeedSection, load_config, positive, to_dict)
from commlab.fl.config import OptimizerSection, PartitionSection, TrainingSection  # noqa: E402
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, check_train_step, load_train_step  # noqa: E402
from commlab.runs.roster import Node  # noqa: E402

METHOD = "flower-fedavg"  # the manifest's codec: the series name beside the DDS codecs in the report
# Columns of commlab.output.tables a Flower node cannot measure (Flower's transport has no hooks for them):
# left out, which the report reads as empty (tables.ADDED).
NOT_SEPARATED = ("broadcast_time_s", "upload_s", "goodput_Bps", "bits", "rate_bps")
TRANSPORTS = ("grpc-bidi", "deployment")  # start_server/start_client | SuperLink + SuperNodes + flwr run


@dataclass(frozen=True)
class FlowerConfig:
    run_id: str
    results_dir: str
    clients: int = 2
    rounds: int = 10
    transport: str = "grpc-bidi"             # one of TRANSPORTS
    server_address: str = "127.0.0.1:8080"   # grpc-bidi: the server listens here, clients connect to it;
                                             # deployment: the SuperLink's HTTP API (Fleet, Control, Runtime)
    interface: str = "lo"                    # whose kernel byte counters each node reads
    link_profile: str = "lan"                # recorded; shaping is applied by the testbed
    model: ModelSection = ModelSection()
    dataset: DatasetSection = DatasetSection()
    partition: PartitionSection = PartitionSection()
    training: TrainingSection = TrainingSection()
    optimizer: OptimizerSection = OptimizerSection()
    seeds: SeedSection = SeedSection()       # the DDS controller's (commlab.runs.seeds)
    round_timeout_s: float = 600.0           # Flower's round timeout: a lost client is a failure
    eval_batch_size: int = 1000
    threads: int = 1
    train_step: str = DEFAULT_TRAIN_STEP
    # Flower's SecAgg+ (SecAggPlusWorkflow, secaggplus_mod; deployment only): each client's key shared
    # with every client of the round (shares = clients, its own one included), a majority of them
    # recovering it (ours: every other client as neighbour, a majority of the neighbours).
    secaggplus: bool = False

    def check(self, where: str) -> None:
        positive(where, clients=self.clients, rounds=self.rounds, round_timeout_s=self.round_timeout_s,
                 eval_batch_size=self.eval_batch_size, threads=self.threads)
        check_train_step(self.train_step, f"{where}train_step")
        if self.transport not in TRANSPORTS:
            raise ConfigError(f"{where}transport: must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.secaggplus and (self.transport != "deployment" or self.clients < 3):
            raise ConfigError(f"{where}secaggplus: needs transport deployment (Flower's workflows run there only) "
                              f"and at least 3 clients (Flower's SecAgg+ needs more than 2 shares); got "
                              f"{self.transport}, {self.clients} clients")

    @property
    def secaggplus_shares(self) -> tuple[int, int]:
        """(num_shares, reconstruction_threshold) of Flower's SecAggPlusWorkflow."""
        return self.clients, self.clients // 2 + 1


@dataclass(frozen=True)
class FlowerNode(Node):
    """A Flower node of the roster: its program is this file, not nodes/<role>.py."""

    @property
    def script(self) -> str:
        return str(Path(__file__).resolve())


def roster(clients: int) -> list[FlowerNode]:
    """`controller` (the Flower server) and `client-<i>`: the FL node names, so every profile gives
    them the links of the DDS controller and clients."""
    return [FlowerNode("controller", "server", (("ROLE", "server"),))] + [
        FlowerNode(f"client-{i}", "client", (("ROLE", "client"), ("CLIENT", str(i)))) for i in range(clients)]


def _plan(cfg: FlowerConfig, weights: np.ndarray):
    """The DDS controller's round plan (epochs, subset size, lr...): its FedAvg, not a copy."""
    from commlab.fl.strategy import FedAvg
    t = cfg.training
    return FedAvg(weights, epochs=t.local_epochs, lr=t.lr, batch_size=t.batch_size,
                  subset_size=t.samples_per_round, lr_decay=t.lr_decay)


def server_parts(cfg: FlowerConfig):
    """Flower's FedAvg strategy with the DDS controller's round plan, timing and byte counters, a
    fixed client order and the test-set evaluation each round (both transports), and `finish(error)`
    to call when Flower's server loop returned (error None) or raised: it closes the manifest and
    raises RuntimeError unless every round completed."""
    import flwr as fl
    from flwr.common import ndarrays_to_parameters

    from commlab.config.builders import build_dataset, build_node_model
    from commlab.models import evaluate, flatten_params, load_params, weights_digest
    from commlab.output.run_folder import RunWriter
    from commlab.output.tables import COLUMNS
    from commlab.peers.iface import IfaceCounters

    seeds = cfg.seeds.tree
    data = build_dataset(cfg.dataset, seeds.subset)
    model = build_node_model(cfg.model, seeds.model_init, cfg.threads, data)
    weights = flatten_params(model, buffers=True)  # batchnorm "aggregate", the DDS run's default
    plan, iface = _plan(cfg, weights), IfaceCounters(cfg.interface)
    writer = RunWriter(cfg.results_dir, cfg.run_id, {
        "kind": "fl", "peer": "flower", "flwr_version": fl.__version__, "transport": f"flower {cfg.transport}",
        "backend": os.environ.get("COMMLAB_BACKEND", "local"), "model": cfg.model.name,
        "dataset": cfg.dataset.name, "codec": METHOD, "downlink_codec": "fp32", "link_profile": cfg.link_profile,
        "clients": cfg.clients, "rounds": cfg.rounds, "config": to_dict(cfg),
        "seeds": seeds.manifest(cfg.clients, ("local_training",)),
        "bytes_measured": f"/sys/class/net/{cfg.interface}/statistics tx_bytes/rx_bytes"
                          + (" (loopback: shared by every process of the host, an upper bound)"
                             if cfg.interface == "lo" else ""),
        "not_measured": list(NOT_SEPARATED), "start_round": 1, "status": "running"})
    # Flower sends the model inside its round (configure_fit): no broadcast time of its own, the column is left out.
    table = writer.table("rounds", [c for c in COLUMNS["rounds"] if c not in NOT_SEPARATED])
    on_lo = cfg.interface == "lo"
    state: dict = {}

    class Strategy(fl.server.strategy.FedAvg):
        """Flower's FedAvg; only timing, byte counters and a fixed client order are added."""

        def configure_fit(self, server_round, parameters, client_manager):
            state.update(start=time.perf_counter(), counters=iface.read())
            state.setdefault("t0", state["start"])  # wall_time_s counts from the first round's start
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            # In client order, not arrival order (as the DDS controller): float sums must not depend on it.
            results = sorted(results, key=lambda r: int(r[1].metrics["client_id"]))
            start = time.perf_counter()
            out = super().aggregate_fit(server_round, results, failures)
            up, down = iface.since(state["counters"])[::-1]
            end = time.perf_counter()
            state.update(aggregate_s=end - start, round_s=end - state["start"], wall_s=end - state["t0"],
                         up=up, down=down, participants=[f"client-{r[1].metrics['client_id']}" for r in results],
                         failures=len(failures))
            return out

    def evaluate_fn(server_round: int, parameters: list[np.ndarray], config: dict):
        if server_round == 0:  # the DDS controller does not evaluate the initial model either
            return None
        flat = parameters[0]
        load_params(model, flat, buffers=True)
        accuracy, loss = evaluate(model, data.test_x, data.test_y, cfg.eval_batch_size)
        s = state
        table.append({"round": server_round, "round_time_s": round(s["round_s"], 4),
                      "participants": ";".join(s["participants"]), "n_participants": len(s["participants"]),
                      "bytes_up": s["up"], "bytes_down": s["down"], "aggregate_time_s": round(s["aggregate_s"], 4),
                      "decode_time_s": 0.0, "test_accuracy": accuracy, "test_loss": loss,
                      "rejected_updates": s["failures"], "downlink_encode_time_s": 0.0,
                      "bytes_down_multicast": 0, "iface_bytes_up": "" if on_lo else s["up"],
                      "iface_bytes_down": "" if on_lo else s["down"], "resyncs": 0,
                      "wall_time_s": round(s["wall_s"], 4), "epsilon": "", "client_rates_bps": ""})
        print(f"[controller] flower round {server_round}/{cfg.rounds} acc {accuracy:.4f} loss {loss:.4f} "
              f"up {s['up'] / 1e6:.2f}MB down {s['down'] / 1e6:.2f}MB time {s['round_s']:.1f}s "
              f"model {weights_digest(flat)}", flush=True)
        return loss, {"accuracy": accuracy}

    strategy = Strategy(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=cfg.clients,
                        min_evaluate_clients=0, min_available_clients=cfg.clients, evaluate_fn=evaluate_fn,
                        fit_metrics_aggregation_fn=lambda metrics: {},  # per-client metrics: not aggregated
                        on_fit_config_fn=lambda rnd: asdict(plan.configure_round(rnd)),
                        initial_parameters=ndarrays_to_parameters([weights]))

    def finish(error: BaseException | None) -> None:
        if error is not None:
            if writer.manifest.get("status") == "running":
                writer.close(f"failed: {type(error).__name__}: {error}")
            return
        done = len(_rows(writer.dir / "rounds.csv"))
        writer.close("completed" if done == cfg.rounds else f"failed: {done} of {cfg.rounds} rounds")
        if done != cfg.rounds:
            raise RuntimeError(f"{done} of {cfg.rounds} rounds completed")

    server_config = fl.server.ServerConfig(num_rounds=cfg.rounds, round_timeout=cfg.round_timeout_s)
    return strategy, server_config, finish


def run_server(cfg: FlowerConfig) -> None:
    """grpc-bidi: Flower's legacy server (`start_server`) on the config's address."""
    import flwr as fl

    strategy, server_config, finish = server_parts(cfg)
    try:
        fl.server.start_server(server_address=cfg.server_address, strategy=strategy, config=server_config)
    except BaseException as e:
        finish(e)
        # Flower's gRPC server threads are not daemons: after a failed round they would keep this
        # process, and the clients waiting on it, alive for good. Say why in one line and end it.
        if not isinstance(e, (RuntimeError, OSError)):
            traceback.print_exc()
        print(f"flower controller: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    finish(None)


def _rows(path: Path) -> list[str]:
    return path.read_text().splitlines()[1:] if path.exists() else []


class ClientTrainer:
    """Client `index` of the FL run: its model, data partition and local SGD (`fit`), and its row of
    clients-<i>.csv per round. A row is written when the next round's fit starts (or the client
    ends): bytes from its fit's start to then (its upload, the next model's download), comm_time_s
    from its fit's end to then (an upper bound: it includes waiting for the slowest client, the
    server's aggregation and evaluation). `pending` holds the unwritten row between fits: a dict in
    the long-lived grpc-bidi client, a file for the deployment's ClientApp (a process per round).
    `train=False`: only the table and counters (to write the last row)."""

    def __init__(self, cfg: FlowerConfig, index: int, train: bool = True):
        from commlab.output.run_folder import CsvTable
        from commlab.output.tables import COLUMNS
        from commlab.peers.iface import IfaceCounters

        self.cfg, self.index = cfg, index
        self.iface = IfaceCounters(cfg.interface)
        self.table = CsvTable(Path(cfg.results_dir) / cfg.run_id / f"clients-{index}.csv",
                              [c for c in COLUMNS["clients"] if c not in NOT_SEPARATED])
        if train:
            from commlab.config.builders import build_dataset, build_node_model
            from commlab.fl.local_training import warm_up
            seeds = cfg.seeds.tree
            self.data = build_dataset(cfg.dataset, seeds.subset)
            # weights come from the server, as in DDS
            self.model = build_node_model(cfg.model, seeds.model_init, cfg.threads, self.data)
            self.part = cfg.partition.split(self.data, cfg.clients, seeds.partition)[index]
            self.step = load_train_step(cfg.train_step, "train_step")
            # The DDS client's warm-up: torch's optimizer and training kernels load here, not in round 1.
            warm_up(self.model, self.data, momentum=cfg.optimizer.momentum, weight_decay=cfg.optimizer.weight_decay,
                    step=self.step)

    def flush_row(self, pending: dict) -> None:
        """Write the previous round's row (if any) with the bytes and time since its fit."""
        if "fit_end" in pending:
            sent, received = self.iface.since(tuple(pending["counters"]))
            self.table.append({**pending["row"], "bytes_up": sent, "bytes_down": received,
                               "comm_time_s": round(time.time() - pending["fit_end"], 4)})
        pending.clear()

    def fit(self, parameters: list[np.ndarray], config: dict, pending: dict):
        """One round's local training on the round's subset: Flower's fit reply (model, samples, metrics)."""
        from commlab.fl.local_training import local_update, round_subset
        from commlab.fl.strategy import FitIns
        from commlab.models import flatten_params

        self.flush_row(pending)
        pending["counters"] = list(self.iface.read())
        fit = FitIns(**{k: config[k] for k in FitIns.__dataclass_fields__})
        seeds = self.cfg.seeds.tree.local(self.index, fit.round)
        indices = round_subset(self.part, fit, seeds)
        start = time.perf_counter()
        _, loss = local_update(self.model, parameters[0], self.data, indices, fit, seeds, momentum=self.cfg.optimizer.momentum,
                               weight_decay=self.cfg.optimizer.weight_decay, step=self.step)
        train_s = time.perf_counter() - start
        print(f"[client-{self.index}] round {fit.round}: {len(indices)} samples, loss {loss:.4f}, "
              f"train {train_s:.1f}s", flush=True)
        pending["row"] = {"round": fit.round, "client_id": self.index, "num_samples": len(indices),
                          "train_time_s": round(train_s, 4), "encode_time_s": 0.0, "decode_time_s": 0.0,
                          "stretch_s": 0.0}
        pending["fit_end"] = time.time()
        return [flatten_params(self.model, buffers=True)], len(indices), {"client_id": self.index, "train_loss": loss}


def run_client(cfg: FlowerConfig, index: int) -> None:
    """grpc-bidi: Flower's legacy client (`start_client`), one process for the whole run."""
    import flwr as fl
    from commlab.peers.listening import await_listener

    trainer, pending = ClientTrainer(cfg, index), {}
    await_listener(cfg.server_address, cfg.round_timeout_s)  # a stream refused at its start is not retried

    class Client(fl.client.NumPyClient):
        def fit(self, parameters, config):
            return trainer.fit(parameters, config, pending)

    try:
        fl.client.start_client(server_address=cfg.server_address, client=Client().to_client(),
                               insecure=True, max_wait_time=cfg.round_timeout_s)
    finally:
        trainer.flush_row(pending)
        trainer.table.close()


def main(argv: list[str]) -> int:
    """The node program: 0 done, 2 bad config, 1 failed (one line each)."""
    role = os.environ.get("ROLE", "server")
    if len(argv) != 1:
        print("usage: ROLE=server|client [CLIENT=i] flower.py CONFIG.json", file=sys.stderr)
        return 2
    try:
        cfg = load_config(FlowerConfig, argv[0])
        index = int(os.environ.get("CLIENT", "0"))
        if role not in ("server", "client") or not 0 <= index < cfg.clients:
            raise ConfigError(f"ROLE={role} CLIENT={index}: need ROLE server|client, CLIENT in 0..{cfg.clients - 1}")
        if cfg.transport != "grpc-bidi":  # deployment: Flower's own programs (flower_run.start_deployment)
            raise ConfigError(f"transport {cfg.transport}: this node program runs grpc-bidi; start deployment "
                              "runs with python -m commlab.peers.run --kind flower --transport deployment")
        import flwr  # noqa: F401  (an optional extra: say so in one line)
        logging.getLogger("flwr").setLevel(logging.WARNING)  # after the import, which sets DEBUG: not every message
    except ImportError:
        print("flower: flwr is not installed (pip install flwr; `make bench-peers-fl` does it)", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"flower: config error: {e}", file=sys.stderr)
        return 2
    from commlab.data import DatasetError
    name = "controller" if role == "server" else f"client-{index}"
    try:
        run_server(cfg) if role == "server" else run_client(cfg, index)
    except (DatasetError, RuntimeError, OSError) as e:
        print(f"flower {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr,
              flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
