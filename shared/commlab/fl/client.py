"""The FL client: wait for TrainCmd, train on its own partition, send the encoded delta, apply
the ModelBlob; end on Stop. Survives controller restarts: it keeps listening and runs whatever
round the controller announces, from the model of the previous round.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from commlab.builders import build_dataset, build_node_model, dds_settings
from commlab.codecs import CodecError, get_codec
from commlab.codecs.compression import Compression, build_compression
from commlab.data import Dataset, label_histogram, partition
from commlab.dds import DdsError
from commlab.fault_points import halt_at
from commlab.fl.config import ClientConfig, load_client_config
from commlab.fl.entry import as_config_error, log_to
from commlab.fl.local_training import local_update, round_subset
from commlab.fl.messages import ClientUpdate, ModelBlob, Stop, TrainCmd
from commlab.fl.strategy import FitIns
from commlab.metrics import CsvTable
from commlab.models import layout_of, weights_digest
from commlab.roster import CONTROLLER
from commlab.tables import COLUMNS
from commlab.train_step import load_train_step

POLL_S = 0.1


class ClientIdle(RuntimeError):
    """No command from the controller for idle_timeout_s."""


class Client:
    def __init__(self, cfg: ClientConfig, node: Any, model: torch.nn.Module, data: Dataset,
                 part: np.ndarray, log: Callable[[str], None] = print):
        self.cfg, self.node, self.model, self.data, self.part, self.log = cfg, node, model, data, part, log
        self.cmd_sub = node.subscriber(TrainCmd)
        self.blob_sub = node.subscriber(ModelBlob)
        self.update_pub = node.publisher(ClientUpdate)
        self.stop_sub = node.subscriber(Stop)
        self.model_codec = get_codec("fp32")
        self.train_step = load_train_step(cfg.train_step)  # already checked with the config
        self.weights: np.ndarray | None = None
        self.weights_round: int | None = None
        self.decode_s = 0.0  # ModelBlob decoding since the last row
        self._codec_key: tuple | None = None
        self.compression: Compression | None = None
        # The compression memory before each round: a round rerun after a controller restart
        # starts from the same memory, so the lost first attempt leaves no trace.
        self._memory_before: dict[int, dict] = {}
        run_dir = Path(cfg.results_dir) / cfg.run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        self.table = CsvTable(run_dir / f"clients-{cfg.client_id}.csv", COLUMNS["clients"])
        self._row_start = node.stats.snapshot()

    def run(self) -> None:
        # Announces this client (its readers exist now) and waits for the controller to appear.
        self.node.barrier({CONTROLLER}, self.cfg.idle_timeout_s)
        idle_since = time.monotonic()
        while True:
            self._apply_blobs(0.0)
            cmd = self.cmd_sub.receive(POLL_S)
            if cmd is None:
                # Only with no command waiting: every TrainCmd published before the Stop is run.
                if self._stopped():
                    return
                if time.monotonic() - idle_since > self.cfg.idle_timeout_s:
                    raise ClientIdle(f"{self.cfg.name}: no TrainCmd from the controller for {self.cfg.idle_timeout_s:.0f}s")
                continue
            if not self._accepts(cmd):
                continue
            idle_since = time.monotonic()
            self.run_round(cmd)
            idle_since = time.monotonic()

    def _accepts(self, cmd: TrainCmd) -> bool:
        """False, with one log line, for a command of another run or an invalid one."""
        if cmd.run_id != self.cfg.run_id:  # another run sharing the DDS domain: not ours to obey
            self.log(f"ignoring TrainCmd of run {cmd.run_id!r} (this is run {self.cfg.run_id!r})")
            return False
        if (problem := cmd.problem()) is not None:
            self.log(f"rejected TrainCmd for round {cmd.round}: {problem}")
            return False
        return True

    def _stopped(self) -> bool:
        """True once a Stop of this run arrived (a Stop of another run on the domain is ignored)."""
        while (stop := self.stop_sub.receive(0.0)) is not None:
            if stop.run_id == self.cfg.run_id:
                self.log(f"stopped on the Stop message: run over after round {stop.last_round} ({stop.reason})")
                return True
            self.log(f"ignoring Stop of run {stop.run_id!r} (this is run {self.cfg.run_id!r})")
        return False

    def _apply_blobs(self, timeout_s: float) -> None:
        """Apply every ModelBlob waiting (the controller is the authority: the latest one wins)."""
        while (blob := self.blob_sub.receive(timeout_s)) is not None:
            start = time.perf_counter()
            self.weights = self.model_codec.decode(blob.payload)
            self.decode_s += time.perf_counter() - start
            self.weights_round = blob.round
            timeout_s = 0.0

    def _wait_for_model(self, rnd: int, deadline_s: float) -> float:
        """Block until the model of round rnd-1 is here (ModelBlob and TrainCmd are separate topics,
        so the command can overtake the larger blob); returns the time waited on the network."""
        start = time.perf_counter()
        while self.weights_round != rnd - 1:
            if time.perf_counter() - start > deadline_s:
                raise ClientIdle(f"{self.cfg.name}: TrainCmd for round {rnd} but no model of round {rnd - 1} "
                                 f"within {deadline_s:.0f}s (have {self.weights_round})")
            self._apply_blobs(POLL_S)
        return time.perf_counter() - start

    def _compression_for(self, cmd: TrainCmd) -> Compression:
        """The codec the controller asked for, with its memory (error feedback; DGC's accumulation),
        kept across rounds while the codec stays the same."""
        key = (cmd.codec, tuple(sorted(cmd.codec_params.items())))
        if key != self._codec_key:
            self.compression = build_compression(cmd.codec, cmd.codec_params, layout_of(self.model),
                                                 seed=self.cfg.client_id)
            self._codec_key, self._memory_before = key, {}
        return self.compression

    def run_round(self, cmd: TrainCmd) -> None:
        rnd = cmd.round
        comm_s = self._wait_for_model(rnd, max(cmd.deadline_s, 1.0))
        fit = FitIns(round=rnd, epochs=cmd.epochs, lr=cmd.lr, batch_size=cmd.batch_size,
                     subset_size=cmd.subset_size, seed=cmd.seed)
        indices = round_subset(self.part, fit, self.cfg.client_id)
        self.log(f"round {rnd}: training on {len(indices)} samples from model {weights_digest(self.weights)} "
                 f"(round {self.weights_round})")
        start = time.perf_counter()
        delta, loss = local_update(self.model, self.weights, self.data, indices, fit,
                                   momentum=self.cfg.optimizer.momentum, weight_decay=self.cfg.optimizer.weight_decay,
                                   step=self.train_step)
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        try:
            payload = self._encode(rnd, delta, self._compression_for(cmd))
        except CodecError as e:  # e.g. a diverged update the codec cannot represent: the round goes on without it
            self.log(f"round {rnd}: no update sent, the codec refused it: {e}")
            return
        encode_s = time.perf_counter() - start
        waited = self.node.stats.wait_s
        halt_at("before_upload", rnd)
        try:
            self.update_pub.publish(ClientUpdate(round=rnd, client_id=self.cfg.name, num_samples=len(indices),
                                                 payload=payload))
        except DdsError as e:  # controller gone: keep listening, a restarted one re-announces the round
            self.log(f"round {rnd}: update not delivered ({e}); waiting for the controller")
        comm_s += self.node.stats.wait_s - waited
        comm = self.node.stats.since(self._row_start)
        self._row_start = self.node.stats.snapshot()
        self.table.append({"round": rnd, "client_id": self.cfg.name, "num_samples": len(indices),
                           "bytes_up": int(comm["bytes_sent"]), "bytes_down": int(comm["bytes_received"]),
                           "comm_time_s": round(comm_s, 4), "train_time_s": round(train_s, 4),
                           "encode_time_s": round(encode_s, 4), "decode_time_s": round(self.decode_s, 4)})
        self.decode_s = 0.0
        self.log(f"round {rnd}: sent {len(payload)} B update, loss {loss:.4f}, train {train_s:.1f}s, "
                 f"encode {encode_s:.3f}s")

    def _encode(self, rnd: int, delta: np.ndarray, compression: Compression) -> bytes:
        """Encode the delta through the codec's memory, so that what a lossy codec drops now is
        added to a later update instead of being lost."""
        if rnd in self._memory_before:
            compression.load_state_dict(copy.deepcopy(self._memory_before[rnd]))
        self._memory_before = {rnd: copy.deepcopy(compression.state_dict())}
        return compression.encode(delta)


def run_client(config_path: str) -> None:
    """Parse and check everything, then build the node and run; ConfigError before any side effect."""
    from commlab.dds import DdsNode
    cfg = load_client_config(config_path)
    cfg.dds.check_host()
    model = as_config_error("model", lambda: build_node_model(cfg.model, 0, cfg.threads))
    data = as_config_error("dataset", lambda: build_dataset(cfg.dataset))
    p = cfg.partition
    parts = as_config_error("partition", lambda: partition(data.train_y, cfg.num_clients, p.scheme, p.seed, **p.params()))
    settings = as_config_error("dds", lambda: dds_settings(cfg.dds))
    log = log_to(cfg.name)
    log(f"partition {p.scheme}: {len(parts[cfg.client_id])} samples, labels "
        f"{label_histogram(data.train_y, [parts[cfg.client_id]], data.num_classes)[0].tolist()}")
    node = DdsNode(cfg.name, settings)
    try:
        Client(cfg, node, model, data, parts[cfg.client_id], log).run()
    finally:
        node.close()
