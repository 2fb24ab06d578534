"""The FL client: wait for TrainCmd, train on its own partition, send the encoded delta, apply
the ModelBlob; end on Stop. Survives controller restarts: it keeps listening and runs whatever
round the controller announces, from the model of the previous round. One process is one client,
or hosts several (logical clients, config `procs`): it trains the ones a command names one after
another from the same replica, each with its own partition, compression memory and table, and
uploads each update as its own message.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from commlab.codecs import CodecError, Compression, build_compression
from commlab.data import Dataset
from commlab.dds import DdsError, PeerGone
from commlab.dds.stats import Progress
from commlab.fl import update_identity
from commlab.fl.adaptive.shaping import ClientSide
from commlab.fl.broadcast import ModelReplica
from commlab.fl.client_memory import ClientMemory
from commlab.fl.config import ClientConfig
from commlab.fl.local_training import local_update, round_subset
from commlab.fl.messages import ClientUpdate, ModelBlob, ModelRequest, Stop, TrainCmd
from commlab.fl.secagg_client import SecAggAborted, SecAggSender
from commlab.fl.strategy import FitIns
from commlab.models import layout_of
from commlab.models.storage import share_storage
from commlab.config.train_step_spec import load_train_step
from commlab.output.memory_watch import MemoryWatch
from commlab.output.run_folder import CsvTable
from commlab.output.tables import COLUMNS
from commlab.runs.fault_points import halt_at
from commlab.runs.roster import CONTROLLER, client_name

POLL_S = 0.1


class ClientIdle(RuntimeError):
    """No command from the controller for idle_timeout_s."""


@dataclass
class HostedClient:
    """One client this process trains: its index, partition and table (its memory: ClientMemory)."""
    index: int
    name: str
    part: np.ndarray
    table: CsvTable


class Client:
    def __init__(self, cfg: ClientConfig, node: Any, model: torch.nn.Module, data: Dataset,
                 parts: dict[int, np.ndarray], log: Callable[[str], None] = print, watch: MemoryWatch | None = None):
        self.cfg, self.node, self.model, self.data, self.log = cfg, node, model, data, log
        self.seeds = cfg.seeds.tree  # the run's seed tree: this process's clients draw their own streams
        self.watch = watch or MemoryWatch()  # resident memory: idle, training, the exchange
        self.cmd_sub = node.subscriber(TrainCmd)
        self.blob_sub = node.subscriber(ModelBlob)
        self.update_pub = node.publisher(ClientUpdate)
        self.stop_sub = node.subscriber(Stop)
        self.request_pub = node.publisher(ModelRequest)
        self.train_step = load_train_step(cfg.train_step)  # already checked with the config
        self.storage = share_storage(model, cfg.sends_buffers)  # a round's delta is made in the model's own vector
        self.replica = ModelReplica(self.storage.size)
        self.requested_after: int | None = None  # the controller round after which the whole model was asked for
        self.decode_s = 0.0  # ModelBlob decoding since the last row
        self._codec_key: tuple | None = None  # the codec and parameters of the last command
        self._held: tuple[int, Compression] | None = None  # its compression, built once, and whose it is
        run_dir = Path(cfg.results_dir) / cfg.run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        self.clients = [HostedClient(i, client_name(i), parts[i], CsvTable(run_dir / f"clients-{i}.csv", COLUMNS["clients"]))
                        for i in cfg.hosted()]
        # A host of many keeps each client's memory in a file, holding one at a time.
        self.memory = ClientMemory(None if cfg.procs is None else run_dir / "client-memory" / cfg.name)
        self._row_start = node.stats.snapshot()
        # Per-client bits and uplink rate (docs/adaptive.md), and the emulated compute speed.
        self.adaptive = ClientSide(cfg.name, cfg.link_profile, cfg.dds.interface, cfg.speed_factor, log,
                                   cfg.dds.send_window_bytes)
        # The updates of the last round this process uploaded, by client: a command for that round
        # again (the controller lost them, or a restarted one asks) gets the same bytes, not a new
        # training run whose compression memory has moved on.
        self.sent_round: int | None = None
        self.sent: dict[str, ClientUpdate] = {}
        self.controller_returns = 0  # times the controller came back after it was lost, as seen here
        self.secagg = SecAggSender(node, cfg.name, cfg.run_id, [client_name(i) for i in range(cfg.num_clients)], run_dir)

    def run(self) -> None:
        # Announces this client (its readers exist now) and waits for the controller to appear.
        self.node.barrier({CONTROLLER}, self.cfg.idle_timeout_s)
        # Idle means nothing arrived at all: chunks of a model still coming over a slow link count.
        progress = Progress(self.node.stats)
        while True:
            self._greet_returned_controller()
            self._apply_blobs(0.0)
            cmd = self.cmd_sub.receive(POLL_S)
            if cmd is None:
                # Only with no command waiting: every TrainCmd published before the Stop is run.
                if self._stopped():
                    self.memory.discard()  # the run is over: no round will be run again
                    return
                if (why := self.node.announcer.directory.departed(CONTROLLER, self.cfg.controller_return_s)) is not None:
                    raise PeerGone(f"{self.cfg.name}: the controller {why}, and no Stop came: the run is over here")
                if progress.idle_s() > self.cfg.idle_timeout_s:
                    raise ClientIdle(f"{self.cfg.name}: no TrainCmd from the controller, and nothing else arrived, "
                                     f"for {self.cfg.idle_timeout_s:.0f}s")
                continue
            if not self._accepts(cmd):
                continue
            self.run_round(cmd)
            progress = Progress(self.node.stats)

    def _accepts(self, cmd: TrainCmd) -> bool:
        """False, with one log line, for a command of another run, an invalid one, or one that does
        not name this client (sampled out; silent for fedbuff, which sends one per dispatch)."""
        if cmd.run_id != self.cfg.run_id:  # another run sharing the DDS domain: not ours to obey
            self.log(f"ignoring TrainCmd of run {cmd.run_id!r} (this is run {self.cfg.run_id!r})")
            return False
        if (problem := cmd.problem()) is not None:
            self.log(f"rejected TrainCmd for round {cmd.round}: {problem}")
            return False
        if not any(cmd.names(c.name) for c in self.clients):  # sampled out; fedbuff's many small commands pass silently
            if not cmd.newer_base_ok:
                self.log(f"round {cmd.round}: not selected, waiting for the next command")
            return False
        return True

    def _greet_returned_controller(self) -> None:
        """Once the controller is back after it was lost (its lease expired), tell it which model
        this client holds (a ModelRequest): it sends the whole model if that is not its own, and the
        round's command again if this client has yet to answer it."""
        returns = self.node.announcer.returns(CONTROLLER)
        if returns == self.controller_returns:
            return
        self.controller_returns = returns
        self.log(f"the controller is back: telling it this client holds {self.replica.digest or 'no model'}")
        self._send_request(rejoined=True)

    def _stopped(self) -> bool:
        """True once a Stop of this run arrived (a Stop of another run on the domain is ignored)."""
        while (stop := self.stop_sub.receive(0.0)) is not None:
            if stop.run_id == self.cfg.run_id:
                self._await_final_model(stop.last_round)
                self.log(f"stopped on the Stop message: run over after round {stop.last_round} ({stop.reason}), "
                         f"replica {self.replica.digest or 'empty'}")
                return True
            self.log(f"ignoring Stop of run {stop.run_id!r} (this is run {self.cfg.run_id!r})")
        return False

    def _await_final_model(self, last_round: int) -> None:
        """The last ModelBlob can arrive after the (small) Stop: take it, so every client ends with
        the run's final model, within the idle timeout (a client that misses it says so)."""
        end = time.monotonic() + self.cfg.idle_timeout_s
        while self.replica.round is not None and self.replica.round < last_round and time.monotonic() < end:
            self._apply_blobs(POLL_S)
            if CONTROLLER not in self.node.announcer.directory.alive():
                self._apply_blobs(0.0)  # it leaves once all it sent was acknowledged: nothing more is coming
                break
        if self.replica.round is not None and self.replica.round != last_round:
            self.log(f"the final model (round {last_round}) did not arrive; replica at round {self.replica.round}")

    def _apply_blobs(self, timeout_s: float) -> None:
        """Apply every ModelBlob waiting, in order; one this replica cannot take (a delta for
        another replica, or a corrupt one) is dropped with one line, and the whole model asked for."""
        while (blob := self.blob_sub.receive(timeout_s)) is not None:
            timeout_s = 0.0
            if blob.run_id != self.cfg.run_id:
                self.log(f"ignoring ModelBlob of run {blob.run_id!r} (this is run {self.cfg.run_id!r})")
                continue
            start = time.perf_counter()
            with self.watch.phase("decode"):
                problem, need_full = self.replica.apply(blob)
            self.decode_s += time.perf_counter() - start
            if problem is not None:
                self.log(f"dropped ModelBlob of round {blob.round} ({blob.kind}): {problem}")
            if need_full:
                self._request_model(blob.round)

    def _request_model(self, controller_round: int) -> None:
        """Ask for the whole model, once per controller round: a delta that does not apply and a
        command this replica cannot serve in the same round are one event, answered by one broadcast."""
        if self.requested_after == controller_round:
            return
        self.requested_after = controller_round
        self.log(f"replica {self.replica.digest or 'empty'} is out of sync: asking for the whole model")
        self._send_request(rejoined=False)

    def _send_request(self, rejoined: bool) -> None:
        try:
            self.request_pub.publish(ModelRequest(run_id=self.cfg.run_id, client_id=self.cfg.name,
                                                  have=self.replica.digest, rejoined=rejoined))
        except DdsError as e:  # controller gone: a restarted one sends the whole model anyway
            self.log(f"model request not delivered ({e})")

    def _wait_for_model(self, rnd: int, deadline_s: float) -> float | None:
        """Block until the model of round rnd-1 is here (ModelBlob and TrainCmd are separate topics,
        so the command can overtake the larger blob); returns the time waited on the network, or
        None when the replica has moved past round rnd-1 (this round is over for this client)."""
        start = time.perf_counter()
        progress = Progress(self.node.stats)  # the deadline counts from the last chunk that arrived
        while self.replica.round != rnd - 1:
            self._greet_returned_controller()
            if self.replica.round is not None and self.replica.round >= rnd:
                self.log(f"round {rnd}: skipped, the model of round {rnd - 1} never came (now at {self.replica.round})")
                return None
            if progress.idle_s() > deadline_s:
                raise ClientIdle(f"{self.cfg.name}: TrainCmd for round {rnd} but no model of round {rnd - 1} "
                                 f"after {time.perf_counter() - start:.0f}s, nothing arrived for the last "
                                 f"{deadline_s:.0f}s (have {self.replica.round})")
            self._apply_blobs(POLL_S)
        return time.perf_counter() - start

    def _compression_for(self, cmd: TrainCmd, client: HostedClient) -> Compression:
        """The compressor the command names (at this client's qsgd bits when the command allocates
        them), resolved once and kept while the command's codec stays the same: the clients'
        memories (error feedback, DGC's accumulation) go on across rounds. A host of many clients
        builds each client's in turn (seeded by the client, SeedTree.codec) and ClientMemory swaps its state in."""
        params = self.adaptive.codec_params(cmd)
        key = (cmd.codec, tuple(sorted(params.items())))
        if key != self._codec_key:
            self._codec_key, self._held = key, None
            self.memory.reset()  # another codec: every client starts afresh
        if self._held is None or self._held[0] != client.index:
            self._held = (client.index, build_compression(cmd.codec, params, layout_of(self.model, self.cfg.sends_buffers),
                                                                 seed=self.seeds.codec(client.index),
                                                                 run_seed=self.seeds.codec_shared))
        return self._held[1]

    def _already_sent(self, cmd: TrainCmd) -> list[HostedClient]:
        """The clients `cmd` names that still have to train: a command for the round this process
        last uploaded gets those updates again (DDS delivers a writer's samples in order, so a
        second command for a round is a deliberate one, never a late copy of the first)."""
        named = [c for c in self.clients if cmd.names(c.name)]
        if cmd.newer_base_ok or cmd.round != self.sent_round:
            return named
        for client in [c for c in named if c.name in self.sent]:
            self.log(f"round {cmd.round}: the controller asks again: sending {client.name}'s update again")
            self._upload(client, self.sent[client.name])
        return [c for c in named if c.name not in self.sent]

    def _upload(self, client: HostedClient, update: ClientUpdate) -> bool:
        who = "" if self.cfg.procs is None else f"{client.name} "
        try:
            with self.watch.phase("send"):
                self.update_pub.publish(update, to={CONTROLLER})
            return True
        except DdsError as e:  # controller gone: keep listening; it asks again once it is back
            self.log(f"{who}round {update.round}: update not delivered ({e}); waiting for the controller")
            return False

    def run_round(self, cmd: TrainCmd) -> None:
        rnd = cmd.round
        todo = self._already_sent(cmd)
        if not todo:
            return
        if self.replica.weights is None and rnd > cmd.first_round:
            # Started after the controller's whole-model broadcast (a restart): no delta can apply.
            self._request_model(rnd - 1)
        if cmd.newer_base_ok and self.replica.round is not None:
            # fedbuff: a replica already past round-1 is a fresher start, not a reason to skip; the
            # update's round then names the version it was trained from (+ 1).
            rnd = max(rnd, self.replica.round + 1)
        comm_s = self._wait_for_model(rnd, max(cmd.deadline_s, 1.0))
        if comm_s is None and cmd.newer_base_ok:  # the replica moved on while waiting: start from there
            rnd = self.replica.round + 1
            comm_s = self._wait_for_model(rnd, max(cmd.deadline_s, 1.0))
        if comm_s is None:
            return
        fit = FitIns(round=rnd, epochs=cmd.epochs, lr=cmd.lr, batch_size=cmd.batch_size,
                     subset_size=cmd.subset_size)
        for client in todo:
            self._train(client, cmd, rnd, fit, comm_s)
            comm_s = 0.0  # the model was waited for once, before the first

    def _train(self, client: HostedClient, cmd: TrainCmd, rnd: int, fit: FitIns, comm_s: float) -> None:
        """Train one client from the replica, encode through its memory, upload, one table row."""
        who = "" if self.cfg.procs is None else f"{client.name} "
        seeds = self.seeds.local(client.index, rnd)
        indices = round_subset(client.part, fit, seeds)
        self.log(f"{who}round {rnd}: training on {len(indices)} samples from model {self.replica.digest} "
                 f"(round {self.replica.round})")
        start = time.perf_counter()
        with self.watch.phase("train"):
            delta, loss = local_update(self.model, self.replica.weights, self.data, indices, fit, seeds,
                                       momentum=self.cfg.optimizer.momentum, weight_decay=self.cfg.optimizer.weight_decay,
                                       buffers=self.cfg.sends_buffers, step=self.train_step, storage=self.storage)
        train_s = time.perf_counter() - start
        stretch_s = self.adaptive.stretch(train_s)
        if self.cfg.attack is not None:  # test only (config `attack`): a forged update under a valid identity
            delta = self.cfg.attack.apply(delta)
        waited = self.node.stats.wait_s
        if cmd.secagg:
            sent, encode_s = self._secagg_send(cmd, rnd, client, delta), 0.0
        else:
            sent, encode_s = self._encode_upload(client, cmd, rnd, delta, len(indices), train_s + stretch_s)
        if sent is None:
            return
        comm_s += self.node.stats.wait_s - waited
        comm = self.node.stats.since(self._row_start)
        self._row_start = self.node.stats.snapshot()
        client.table.append({"round": rnd, "client_id": client.name, "num_samples": len(indices),
                             "bytes_up": int(comm["bytes_sent"]), "bytes_down": int(comm["bytes_received"]),
                             "comm_time_s": round(comm_s, 4), "train_time_s": round(train_s, 4),
                             "encode_time_s": round(encode_s, 4), "decode_time_s": round(self.decode_s, 4),
                             **self.adaptive.row(stretch_s)})
        self.decode_s = 0.0
        self.log(f"{who}round {rnd}: sent {sent} B update, loss {loss:.4f}, train {train_s:.1f}s, "
                 f"encode {encode_s:.3f}s")

    def _encode_upload(self, client: HostedClient, cmd: TrainCmd, rnd: int, delta: np.ndarray, samples: int,
                       compute_s: float) -> tuple[int | None, float]:
        """Encode through the client's memory and upload: (payload bytes or None if the codec refused, encode s)."""
        who = "" if self.cfg.procs is None else f"{client.name} "
        try:
            compression = self._compression_for(cmd, client)
            start = time.perf_counter()  # a host's encode time includes swapping the client's memory in and out
            with self.watch.phase("encode"):
                payload = self.memory.encode(client.index, rnd, delta, compression)
            sizes = self.adaptive.size_report(compression.codec, delta, len(payload))
        except CodecError as e:  # e.g. a diverged update the codec cannot represent: the round goes on without it
            self._held = None  # a refused encode may have moved its state: the next round rebuilds it
            self.log(f"{who}round {rnd}: no update sent, the codec refused it: {e}")
            return None, 0.0
        encode_s = time.perf_counter() - start
        halt_at("before_upload", rnd)
        self.adaptive.before_upload(cmd)
        upload_start = time.perf_counter()
        update = update_identity.sign(self.node.settings.keyring, ClientUpdate(
            round=rnd, client_id=client.name, num_samples=samples, payload=payload, frame_bytes_by_bits=sizes,
            **self.adaptive.report(compute_s)))
        if self.sent_round != rnd:
            self.sent_round, self.sent = rnd, {}
        self.sent[client.name] = update
        if self._upload(client, update):
            self.adaptive.after_upload(cmd, len(payload), upload_start, self.update_pub, cmd.deadline_s)
        return len(payload), encode_s

    def _secagg_send(self, cmd: TrainCmd, rnd: int, client: HostedClient, delta: np.ndarray) -> int | None:
        """The round's SecAgg+ steps (fl.secagg_client); payload bytes sent, None if it went on without this client."""
        try:
            # Whether the model of round `rnd` (or later) arrived: that round is over.
            moved_past = lambda: self._apply_blobs(0.0) or (self.replica.round is not None and self.replica.round >= rnd)  # noqa: E731
            return self.secagg.run(cmd, rnd, delta, self.seeds.codec(client.index), moved_past)
        except (SecAggAborted, ValueError) as e:
            self.log(f"round {rnd}: left out of the secure aggregation: {e}")
            return None
