"""The FL controller: match barrier, then per round TrainCmd -> collect updates -> aggregate ->
ModelBlob -> evaluate -> checkpoint -> one rounds.csv row; after the last round, Stop.

Transport-facing code only; the round logic is the Strategy, validation of updates the
UpdateCollector, persistence the checkpoint module.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from commlab.builders import build_dataset, build_node_model, dds_settings
from commlab.codecs import Codec, get_codec
from commlab.config_schema import to_dict
from commlab.data import Dataset
from commlab.dds import DdsError
from commlab.fault_points import halt_at
from commlab.fl.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from commlab.fl.collect import UpdateCollector
from commlab.fl.config import ControllerConfig, load_controller_config
from commlab.fl.entry import as_config_error, check_codec, log_to
from commlab.fl.messages import ClientUpdate, ModelBlob, Stop, TrainCmd
from commlab.fl.strategy import FedAvg, Strategy
from commlab.metrics import RunWriter, backend_name
from commlab.models import evaluate, flatten_params, load_params, weights_digest
from commlab.roster import CONTROLLER
from commlab.tables import COLUMNS


class Controller:
    def __init__(self, cfg: ControllerConfig, node: Any, strategy: Strategy, start_round: int,
                 model: torch.nn.Module, data: Dataset, writer: RunWriter, log: Callable[[str], None] = print):
        self.cfg, self.node, self.strategy, self.start_round = cfg, node, strategy, start_round
        self.model, self.data, self.writer, self.log = model, data, writer, log
        # Decoders read every parameter from the frame: the name alone says which decoder to use.
        self.codec: Codec = get_codec(cfg.codec.name)
        self.model_codec: Codec = get_codec("fp32")  # the broadcast model is always full precision
        self.cmd_pub = node.publisher(TrainCmd)
        self.blob_pub = node.publisher(ModelBlob)
        self.stop_pub = node.publisher(Stop)
        self.update_sub = node.subscriber(ClientUpdate)
        self.rounds_table = writer.table("rounds", COLUMNS["rounds"])

    def run(self) -> None:
        cfg = self.cfg
        self.log(f"waiting for {cfg.expected_clients} client(s) (timeout {cfg.match_timeout_s:.0f}s)")
        self.node.barrier(set(cfg.client_ids()), cfg.match_timeout_s)
        before = self.node.stats.snapshot()
        # Clients need the model of round r-1 for TrainCmd r, also after a controller restart.
        self.publish_model(self.start_round - 1)
        for rnd in range(self.start_round, cfg.rounds + 1):
            self.run_round(rnd, before)
            before = self.node.stats.snapshot()
        try:
            self.stop_pub.publish(Stop(run_id=cfg.run_id, last_round=cfg.rounds, reason="completed"))
        except DdsError as e:  # every round is done and saved; clients that miss this time out
            self.log(f"could not tell every client that the run is over: {e}")
        self.log(f"finished {cfg.rounds} rounds; final model {weights_digest(self.strategy.weights)}")

    def command(self, rnd: int) -> TrainCmd:
        fit = self.strategy.configure_round(rnd)
        return TrainCmd(round=rnd, epochs=fit.epochs, lr=fit.lr, seed=fit.seed,
                        subset_size=fit.subset_size, codec=self.cfg.codec.name, codec_params=dict(self.cfg.codec.params),
                        deadline_s=self.cfg.round_deadline_s, batch_size=fit.batch_size, run_id=self.cfg.run_id)

    def publish_model(self, rnd: int) -> None:
        # encode() serialises into new bytes: later aggregation cannot change what was sent.
        self.blob_pub.publish(ModelBlob(round=rnd, model_version=rnd,
                                        payload=self.model_codec.encode(self.strategy.weights)))

    def run_round(self, rnd: int, before: dict[str, float]) -> None:
        cfg = self.cfg
        started = time.perf_counter()
        self.cmd_pub.publish(self.command(rnd))
        collector = UpdateCollector(rnd, cfg.client_ids(), self.codec, self.strategy.weights.size, self.log)
        replies = collector.collect(lambda t: self.update_sub.receive(t), started, cfg.round_deadline_s,
                                    cfg.round_hard_limit_s, cfg.min_clients)
        agg_start = time.perf_counter()
        weights = self.strategy.aggregate(rnd, replies.results, replies.failures)
        aggregate_s = time.perf_counter() - agg_start
        self.publish_model(rnd)
        round_time = time.perf_counter() - started
        comm = self.node.stats.since(before)
        load_params(self.model, weights)
        accuracy, loss = evaluate(self.model, self.data.test_x, self.data.test_y, cfg.eval_batch_size)
        save_checkpoint(Path(cfg.checkpoint_dir),
                        Checkpoint(rnd, weights, self.strategy.state_dict(), to_dict(cfg)), cfg.keep_checkpoints)
        participants = replies.participants()
        self.rounds_table.append({
            "round": rnd, "round_time_s": round(round_time, 4), "participants": ";".join(participants),
            "n_participants": len(participants), "bytes_up": int(comm["bytes_received"]),
            "bytes_down": int(comm["bytes_sent"]), "aggregate_time_s": round(aggregate_s, 4),
            "decode_time_s": round(replies.decode_s, 4), "test_accuracy": accuracy, "test_loss": loss,
            "rejected_updates": replies.rejected})
        self.log(f"round {rnd}/{cfg.rounds} acc {accuracy:.4f} loss {loss:.4f} "
                 f"up {comm['bytes_received'] / 1e6:.2f}MB down {comm['bytes_sent'] / 1e6:.2f}MB "
                 f"time {round_time:.1f}s participants {';'.join(participants)} rejected {replies.rejected} "
                 f"model {weights_digest(weights)}")
        halt_at("after_round", rnd)



def run_controller(config_path: str) -> None:
    """Parse and check everything, then build the node and run; ConfigError before any side effect."""
    from commlab.dds import DdsNode
    cfg = load_controller_config(config_path)
    cfg.dds.check_host()
    check_codec(cfg.codec)
    model = as_config_error("model", lambda: build_node_model(cfg.model, cfg.seed, cfg.threads))
    weights, start_round, strategy_state = flatten_params(model), 1, None
    if cfg.init_path is not None:
        ckpt = as_config_error("init_path", lambda: load_checkpoint(Path(cfg.init_path), weights.size))
        weights, start_round, strategy_state = ckpt.weights, ckpt.round + 1, ckpt.strategy_state
    data = as_config_error("dataset", lambda: build_dataset(cfg.dataset))
    t = cfg.training
    strategy = FedAvg(weights, epochs=t.local_epochs, lr=t.lr, batch_size=t.batch_size,
                      subset_size=t.samples_per_round, seed=t.seed, server_lr=cfg.strategy.server_lr,
                      server_momentum=cfg.strategy.server_momentum)
    if strategy_state is not None:
        as_config_error("init_path", lambda: strategy.load_state_dict(strategy_state))
    settings = as_config_error("dds", lambda: dds_settings(cfg.dds))
    log = log_to(CONTROLLER)
    if start_round > 1:
        log(f"resuming at round {start_round} from {cfg.init_path}, model {weights_digest(strategy.weights)}")
    writer = RunWriter(cfg.results_dir, cfg.run_id, {
        "kind": "fl", "backend": backend_name(cfg.dds.interface), "model": cfg.model.name,
        "dataset": cfg.dataset.name, "codec": cfg.codec.name, "link_profile": cfg.link_profile,
        "clients": cfg.expected_clients, "rounds": cfg.rounds, "config": to_dict(cfg),
        "seeds": {"model_init": cfg.seed, "training": t.seed, "partition": cfg.partition.seed},
        "start_round": start_round, "status": "running"})
    node = DdsNode(CONTROLLER, settings)
    try:
        Controller(cfg, node, strategy, start_round, model, data, writer, log).run()
        writer.close("completed")
    except BaseException as e:
        writer.close(f"failed: {type(e).__name__}: {e}")
        raise
    finally:
        node.close()
