"""The FL controller: match barrier, then per round TrainCmd -> collect updates -> aggregate ->
ModelBlob -> evaluate -> checkpoint -> one rounds.csv row; after the last round, Stop. With
fedbuff, a round is one server model version: work goes to idle clients as they return, and the
version ends when the buffer is full (run_version).

Transport-facing code only; the round logic is the Strategy, validation of updates the
UpdateCollector, persistence the checkpoint module.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from commlab.codecs import Codec
from commlab.config.schema import to_dict
from commlab.data import Dataset
from commlab.dds import DdsError
from commlab.dds.stats import Progress, delta
from commlab.fl import update_identity
from commlab.fl.adaptive.planner import Planner
from commlab.fl.broadcast import ModelSender
from commlab.fl.checkpoint import Checkpoint, save_checkpoint
from commlab.fl.collect import OpenRound, RoundFailed, RoundReplies, UpdateCollector
from commlab.fl.config import ControllerConfig
from commlab.fl.evaluation import GlobalEvaluation
from commlab.fl.fedbuff import Dispatch
from commlab.fl.messages import ClientUpdate, ModelBlob, ModelRequest, SecAggDown, SecAggUp, Stop, TrainCmd
from commlab.fl.secagg_round import SecAggCoordinator
from commlab.fl.sampling import select_round
from commlab.fl.strategy import FedBuff, Strategy
from commlab.models import weights_digest
from commlab.links.trace import RATES_FILE, LinkRates
from commlab.output.memory_watch import MemoryWatch
from commlab.output.run_folder import RunWriter
from commlab.output.tables import COLUMNS
from commlab.runs.fault_points import halt_at


class Controller:
    def __init__(self, cfg: ControllerConfig, node: Any, strategy: Strategy, start_round: int,
                 model: torch.nn.Module, data: Dataset, writer: RunWriter, uplink: Codec, downlink: Codec,
                 log: Callable[[str], None] = print, progress: dict[str, float] | None = None,
                 watch: MemoryWatch | None = None):
        """`uplink`, `downlink`: the codecs of the config's codec and downlink sections (controller_node.run_controller)."""
        self.cfg, self.node, self.strategy, self.start_round = cfg, node, strategy, start_round
        self.watch = watch or MemoryWatch()  # resident memory: idle, evaluating, the exchange
        self.writer, self.log = writer, log
        # Decoders read every parameter from the frame: the uplink codec decodes any client's.
        self.codec = uplink
        self.sender = ModelSender(downlink, cfg.run_id)
        self.evaluate = GlobalEvaluation(cfg, model, data)
        self.resyncs = 0  # whole models sent on request since the last row
        self.row_end: dict[str, float] = {}  # transport counters when the last row was taken
        self.t0 = time.perf_counter()  # training start (run() resets it): rounds.csv wall_time_s counts from here
        self.link_rates = LinkRates(Path(cfg.results_dir) / cfg.run_id / RATES_FILE)  # written by the testbed
        # For the early stop (cfg.stop); a resumed run goes on from its checkpoint's counts.
        progress = progress or {}
        self.last_accuracy = progress.get("last_accuracy", 0.0)
        self.round_time_sum_s = progress.get("round_time_sum_s", 0.0)
        self.cmd_pub = node.publisher(TrainCmd)
        self.blob_pub = node.publisher(ModelBlob)
        self.stop_pub = node.publisher(Stop)
        self.update_sub = node.subscriber(ClientUpdate)
        self.request_sub = node.subscriber(ModelRequest)
        self.rounds_table = writer.table("rounds", COLUMNS["rounds"])
        # Per-client qsgd bits and uplink rates from the clients' reports (docs/adaptive.md).
        self.planner = None if cfg.adaptive is None else Planner(
            cfg.adaptive, cfg.client_ids(), strategy.weights.size, cfg.codec.params.get("bucket", 512), log,
            uplink.family)
        # Who trains (docs/scale.md): a seeded sample of the available clients each round, or for
        # fedbuff up to per_round clients at a time, each from the newest model version.
        self.per_round, self.availability = cfg.per_round(), cfg.availability_trace()
        self.dispatch = None if not isinstance(strategy, FedBuff) else Dispatch(
            cfg.client_ids(), self.per_round, cfg.seeds.tree, self.availability)
        self.open_round: OpenRound | None = None  # the synchronous round being collected
        self.secagg = None if cfg.secagg is None else SecAggCoordinator(
            cfg.secagg, cfg.run_id, node.subscriber(SecAggUp), node.publisher(SecAggDown), cfg.node_of, self.alive,
            cfg.round_deadline_s, Path(cfg.results_dir) / cfg.run_id, log,
            None if cfg.privacy is None else cfg.privacy.noise_multiplier)

    def run(self) -> None:
        cfg = self.cfg
        hosts = "" if cfg.procs is None else f" in {cfg.procs} process(es)"
        self.log(f"waiting for {cfg.expected_clients} client(s){hosts} (timeout {cfg.match_timeout_s:.0f}s)")
        self.node.barrier(set(cfg.node_names()), cfg.match_timeout_s)
        # Clients need the model of round r-1 for TrainCmd r, also after a controller restart. Sent
        # before round 1 is timed, and recorded on its own, so every round's row is that round's traffic.
        before = self.node.stats.snapshot()
        with self.watch.phase("encode"):
            blob = self.sender.full(self.start_round - 1, self.strategy.weights)
        with self.watch.phase("send"):
            self.blob_pub.publish(blob)
        del blob  # the whole model, encoded: not to be held for the rest of the run
        initial = self.node.stats.since(before)
        self.writer.update_manifest(initial_model_bytes=int(initial["bytes_sent"]))
        self.log(f"sent the model of round {self.start_round - 1} ({initial['bytes_sent'] / 1e6:.2f} MB on the wire)")
        before = self.node.stats.snapshot()
        self.t0 = time.perf_counter()
        step = self.run_version if self.dispatch is not None else self.run_round
        last, reason = cfg.rounds, "completed"
        for rnd in range(self.start_round, cfg.rounds + 1):
            step(rnd, before)
            before = self.row_end if self.dispatch is not None else self.node.stats.snapshot()
            early = cfg.stop.reason(self.last_accuracy, self.round_time_sum_s)
            if early is not None and rnd < cfg.rounds:
                last, reason = rnd, early
                self.writer.update_manifest(stopped_after_round=rnd, stop_reason=early)
                self.log(f"stopping after round {rnd}: {early}")
                break
        try:
            self.stop_pub.publish(Stop(run_id=cfg.run_id, last_round=last, reason=reason))
        except DdsError as e:  # every round is done and saved; clients that miss this time out
            self.log(f"could not tell every client that the run is over: {e}")
        for pub in (self.blob_pub, self.stop_pub):  # the final model and the Stop reach every client
            if not pub.wait_for_acks(cfg.round_deadline_s):
                self.log("not every client acknowledged the final model and Stop; leaving anyway")
        self.log(f"finished after round {last}; final model {weights_digest(self.strategy.weights)}")

    def command(self, rnd: int, clients: list[str], newer_base_ok: bool = False) -> TrainCmd:
        """TrainCmd for `clients` (named only when they are not every client of the run)."""
        fit = self.strategy.configure_round(rnd)
        bits, rates = ({}, {}) if self.planner is None else self.planner.plan(rnd, fit.subset_size)
        named = "" if sorted(clients) == sorted(self.cfg.client_ids()) else ";".join(clients)
        return TrainCmd(client_bits=bits, client_rates_Bps=rates, round=rnd, epochs=fit.epochs, lr=fit.lr,
                        subset_size=fit.subset_size, codec=self.cfg.codec.name, codec_params=dict(self.cfg.codec.params),
                        deadline_s=self.cfg.round_deadline_s, batch_size=fit.batch_size, run_id=self.cfg.run_id,
                        first_round=self.start_round, clients=named, newer_base_ok=newer_base_ok)

    def receive_update(self, timeout_s: float) -> ClientUpdate | None:
        """The next update, serving requests for the whole model and re-sending the round's command
        to clients that came back while waiting for it."""
        self.serve_model_requests()
        self.resend_to_returned()
        msg = self.update_sub.receive(timeout_s)
        if msg is not None and self.planner is not None:
            self.planner.offer(msg)  # its report counts once the collector accepted the update
        return msg

    def serve_model_requests(self) -> None:
        """One whole-model broadcast for every client of this run whose replica is out of sync."""
        wanted = []
        while (req := self.request_sub.receive(0.0)) is not None:
            if req.run_id != self.cfg.run_id or req.client_id not in self.cfg.node_names():
                continue
            if self.open_round is not None and req.rejoined:  # it may have missed the round's command
                self.open_round.asked.add(req.client_id)
            if req.have != self.sender.digest:
                wanted.append(req.client_id)
        if wanted:
            self.log(f"sending the whole model (round {self.sender.round}) to resync {', '.join(sorted(set(wanted)))}")
            self.blob_pub.publish(self.sender.full(self.sender.round))
            self.resyncs += 1

    def resend_to_returned(self) -> None:
        """The round's command again, to each node with clients yet to answer that came back after
        it was lost (its DDS lease expired: paused, starved, cut off) or said it rejoined since the
        command went out: either may have missed the command, or the controller its update. A
        client that already uploaded this round sends the same update again (fl.client)."""
        r = self.open_round
        if r is None:
            return
        for node, clients in r.unanswered_by_node(self.cfg.node_of).items():
            returns = self.node.announcer.returns(node)
            if returns == r.returns.get(node, 0) and node not in r.asked:
                continue
            r.returns[node] = returns
            r.asked.discard(node)
            self.log(f"round {r.cmd.round}: sending the command again to {node} ({', '.join(clients)} yet to answer)")
            try:
                self.cmd_pub.publish(replace(r.cmd, clients=";".join(clients)), to={node})
            except DdsError as e:  # gone again: the next return or request tries once more
                self.log(f"round {r.cmd.round}: command not delivered to {node} ({e})")

    def alive(self) -> set[str]:
        """The clients whose process is alive."""
        peers = self.node.announcer.directory.peers  # updated by the reader thread: copied under the GIL
        nodes = {name for name, p in list(peers.items()) if p.alive}
        return {c for c in self.cfg.client_ids() if self.cfg.node_of(c) in nodes}

    def run_round(self, rnd: int, before: dict[str, float]) -> None:
        cfg = self.cfg
        started = time.perf_counter()
        self.serve_model_requests()
        sample = select_round(rnd, cfg.client_ids(), self.per_round, cfg.seeds.tree, self.availability,
                              cfg.min_clients, self.log)
        if not sample:  # nobody may train: the model stays, every replica still moves to round rnd
            self.finish_round(rnd, started, before, self.strategy.weights, RoundReplies(), 0.0)
            return
        cmd = self.command(rnd, sample)
        if self.secagg is not None:
            self.run_secagg_round(cmd, sample, started, before)
            return
        collector = UpdateCollector(rnd, sample, self.codec, self.strategy.weights.size, self.log, self.cfg.node_of,
                                    self.unsigned, self.watch.phase)
        self.open_round = OpenRound(cmd, collector, {n: self.node.announcer.returns(n) for n in cfg.node_names()})
        self.cmd_pub.publish(cmd)
        try:
            replies = collector.collect(self.receive_update, started, cfg.round_deadline_s, cfg.round_hard_limit_s,
                                        min(cfg.min_clients, len(sample)), idle_s=Progress(self.node.stats).idle_s,
                                        alive=self.alive, lost_grace_s=cfg.lost_client_grace_s,
                                        sender=lambda: self.update_sub.last_sender)
        finally:
            self.open_round = None
        if self.planner is not None:
            self.planner.observe(rnd, replies.participants())
        agg_start = time.perf_counter()
        # In client order, not arrival order: float sums depend on order, and a run must not.
        results = sorted(replies.results, key=lambda r: r.client_id)
        with self.watch.phase("aggregate"):
            weights = self.strategy.aggregate(rnd, results, replies.failures)
        self.finish_round(rnd, started, before, weights, replies, time.perf_counter() - agg_start)

    def run_secagg_round(self, cmd: TrainCmd, sample: list[str], started: float, before: dict[str, float]) -> None:
        """Round cmd.round as SecAgg+ (fl.secagg_round): the FedAvg server step on the survivors' mean."""
        cmd = replace(cmd, secagg=self.secagg.command_fields(sample))
        self.cmd_pub.publish(cmd)
        out = self.secagg.run(cmd, sample, self.strategy.weights.size, started)
        if len(out.survivors) < min(self.cfg.min_clients, len(sample)):
            raise RoundFailed(f"round {cmd.round}: {len(out.survivors)} clients in the secure sum, min_clients is "
                              f"{self.cfg.min_clients}")
        replies = RoundReplies(failures=out.failures, rejected=out.rejected)
        self.finish_round(cmd.round, started, before, self.strategy.step(out.mean), replies, out.aggregate_s,
                          out.survivors)

    def run_version(self, rnd: int, before: dict[str, float]) -> None:
        """fedbuff: server model version rnd = version rnd-1 plus one buffer of updates. Idle
        clients get work on the current version whenever they return; the version ends once
        buffer_size updates are in (or, when nobody is left training, with what the buffer holds)."""
        cfg, version, dispatch = self.cfg, rnd - 1, self.dispatch
        strategy: FedBuff = self.strategy  # type: ignore[assignment]  # run() calls this for fedbuff only
        started, replies, lost_since = time.perf_counter(), RoundReplies(), None
        progress = Progress(self.node.stats)
        while not strategy.full():
            self.serve_model_requests()
            alive = self.alive()
            if gone := dispatch.lost(alive):
                self.log(f"round {rnd}: {', '.join(gone)} gone while training; their places are free")
            if chosen := dispatch.assign(version, alive):
                self.cmd_pub.publish(self.command(rnd, chosen, newer_base_ok=True))
            if dispatch.busy:
                lost_since = None
                if progress.idle_s() >= cfg.round_hard_limit_s:
                    raise RoundFailed(f"round {rnd}: nothing arrived for {cfg.round_hard_limit_s:.0f}s while "
                                      f"{', '.join(sorted(dispatch.busy))} were training")
            elif strategy.buffer:
                self.log(f"round {rnd}: nobody left to train; applying the {len(strategy.buffer)} buffered "
                         f"update(s) of buffer_size {strategy.buffer_size}")
                break
            elif not (absent := dispatch.candidates(version)):
                self.log(f"round {rnd}: no client can train from version {version} (availability); the model stays")
                break
            elif lost_since is None:
                lost_since = time.perf_counter()
            elif time.perf_counter() - lost_since >= cfg.lost_client_grace_s:
                raise RoundFailed(f"round {rnd}: every client that could train is gone ({', '.join(absent)}) "
                                  f"for {cfg.lost_client_grace_s:.0f}s")
            msg = self.receive_update(0.5)
            if msg is not None:
                self.buffer_update(msg, version, replies)
        results, stale = strategy.take()
        replies.results, replies.failures = results, replies.failures + stale
        agg_start = time.perf_counter()
        with self.watch.phase("aggregate"):
            weights = strategy.aggregate(rnd, results, replies.failures) if results else strategy.weights
        self.finish_round(rnd, started, before, weights, replies, time.perf_counter() - agg_start)

    def unsigned(self, msg: ClientUpdate) -> str | None:
        """Why `msg` is not signed by the client it names (None: it is, or the run is not authenticated)."""
        return update_identity.problem(self.node.settings.keyring, msg)

    def buffer_update(self, msg: ClientUpdate, version: int, replies: RoundReplies) -> None:
        """Check, decode and buffer one fedbuff update; a refusal is counted in `replies` and logged."""
        sender = self.update_sub.last_sender
        # Before the dispatch sees it: a forged update frees no place.
        if sender != self.cfg.node_of(msg.client_id):
            reason: str | None = f"sent by {sender!r}, not by the node of the client it names"
        else:
            reason = self.unsigned(msg) or self.dispatch.returned(msg.client_id, msg.round, version)
        if reason is None:
            one = UpdateCollector(msg.round, [msg.client_id], self.codec, self.strategy.weights.size, self.log,
                                  self.cfg.node_of, self.unsigned, self.watch.phase)
            one.offer(msg, sender)  # logs its own rejections
            replies.decode_s += one.replies.decode_s
            replies.rejected += one.replies.rejected
            replies.failures += one.replies.failures
            if one.replies.results:
                reason = self.strategy.offer(one.replies.results[0], version, msg.round - 1)  # type: ignore[attr-defined]
                if reason is not None:
                    replies.rejected += 1  # the failure itself comes with strategy.take()
        else:
            replies.rejected += 1
            replies.failures.append((str(msg.client_id), reason))
        if reason is not None:
            self.log(f"round {version + 1}: rejected update from {msg.client_id!r} (round {msg.round}): {reason}")

    def finish_round(self, rnd: int, started: float, before: dict[str, float], weights: np.ndarray,
                     replies: RoundReplies, aggregate_s: float, secure: list[str] | None = None) -> None:
        """Broadcast, evaluate and checkpoint the model of round rnd; one rounds.csv row and log line.
        `secure`: the clients in a securely aggregated sum (their updates are not in `replies`)."""
        cfg = self.cfg
        # fedbuff: a client may appear twice
        participants = sorted(r.client_id for r in replies.results) if secure is None else secure
        rates = {c: self.link_rates.rate_of(c) for c in participants}
        broadcast_start = time.perf_counter()
        with self.watch.phase("encode"):
            blob = self.sender.next(rnd, weights)
        with self.watch.phase("send"):
            self.blob_pub.publish(blob)
        broadcast_end = time.perf_counter()
        broadcast_s, round_time = broadcast_end - broadcast_start, broadcast_end - started
        # fedbuff's next row counts from here: its uploads keep arriving while this one is evaluated.
        self.row_end = self.node.stats.snapshot()
        comm = delta(before, self.row_end)
        with self.watch.phase("evaluate"):
            accuracy, loss = self.evaluate(weights)
        self.last_accuracy, self.round_time_sum_s = accuracy, self.round_time_sum_s + round_time
        progress = {"round_time_sum_s": self.round_time_sum_s, "last_accuracy": accuracy}
        with self.watch.phase("checkpoint"):
            save_checkpoint(Path(cfg.checkpoint_dir), Checkpoint(rnd, weights, self.strategy.state_dict(), to_dict(cfg),
                                                                 progress), cfg.keep_checkpoints)
        spent = self.strategy.epsilon()
        self.rounds_table.append({
            "round": rnd, "round_time_s": round(round_time, 4), "participants": ";".join(participants),
            "n_participants": len(participants), "bytes_up": int(comm["bytes_received"]),
            "bytes_down": int(comm["bytes_sent"]), "aggregate_time_s": round(aggregate_s, 4),
            "decode_time_s": round(replies.decode_s, 4), "test_accuracy": accuracy, "test_loss": loss,
            "rejected_updates": replies.rejected, "broadcast_time_s": round(broadcast_s, 4),
            "downlink_encode_time_s": round(self.sender.encode_s, 4), "bytes_down_multicast": int(comm["multicast_bytes_sent"]),
            "iface_bytes_up": comm.get("iface_bytes_received"), "iface_bytes_down": comm.get("iface_bytes_sent"),
            "resyncs": self.resyncs, "wall_time_s": round(broadcast_end - self.t0, 4), "epsilon": spent,
            "client_rates_bps": ";".join(f"{c}={r:.0f}" for c, r in rates.items() if r is not None)})
        self.sender.encode_s, self.resyncs = 0.0, 0
        self.log(f"round {rnd}/{cfg.rounds} acc {accuracy:.4f} loss {loss:.4f}{'' if spent is None else f' epsilon {spent:.3f}'} "
                 f"up {comm['bytes_received'] / 1e6:.2f}MB down {comm['bytes_sent'] / 1e6:.2f}MB "
                 f"time {round_time:.1f}s participants {';'.join(participants)} rejected {replies.rejected} "
                 f"model {weights_digest(weights)} replica {self.sender.digest}")
        halt_at("after_round", rnd)
