"""The controller's side of a SecAgg+ round in an FL run (docs/privacy.md): the TrainCmd carries the
round's parameters; then four steps, each the clients' SecAggUp messages collected and the
controller's relay (SecAggDown) sent: keys to everyone, each client's encrypted shares to it, the
survivors and the dropped to everyone, and from the unmask replies the sum of the survivors'
levels (commlab.privacy.secagg_server). The controller never holds one client's update.

A step ends once every client still in the round answered, or those missing are gone (their
process is no longer alive), or after the round deadline. A client that drops after sharing its
keys is left out of the sum, one that drops after its masked input stays in it; fewer answers
than the threshold fail the round (RoundFailed). Every message is checked: its run, round and
step, the node that sent it (the node of the client it names), and its payload's format.
"""
from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commlab.dds.endpoints import Publisher, Subscriber
from commlab.fl import secagg_wire as wire
from commlab.fl.collect import RoundFailed
from commlab.fl.messages import SecAggDown, SecAggUp, TrainCmd
from commlab.fl.secagg_client import LEVELS_DIR
from commlab.privacy.secagg import decode_masked
from commlab.privacy.secagg_config import SecAggSection
from commlab.privacy.secagg_server import SecAggServer


@dataclass
class SecAggOutcome:
    mean: np.ndarray                 # the survivors' (clipped, quantized, noised) sum over the survivors (DP: the asked)
    survivors: list[str]
    failures: list[tuple[str, str]] = field(default_factory=list)  # (client, reason)
    rejected: int = 0                # messages refused (bad payload, wrong sender)
    aggregate_s: float = 0.0         # unmasking and decoding the sum


@dataclass
class SecAggCoordinator:
    """Runs the SecAgg+ rounds of a controller over its DDS endpoints."""
    section: SecAggSection
    run_id: str
    up: Subscriber
    down: Publisher
    node_of: Callable[[str], str | None]
    alive: Callable[[], set[str]]
    deadline_s: float
    run_dir: Path
    log: Callable[[str], None]
    noise_multiplier: float | None = None  # DP under secure aggregation: the clients' noise on the sum (z)

    def command_fields(self, sample: list[str]) -> dict[str, Any]:
        """TrainCmd.secagg for a round of `sample`; a fresh graph seed each round."""
        neighbours, threshold = self.section.for_round(len(sample))
        return wire.round_params(threshold, neighbours, self.section.clip, secrets.randbits(32),
                                 self.section.record_levels, self.noise_multiplier or 0.0)

    def run(self, cmd: TrainCmd, sample: list[str], length: int, started: float) -> SecAggOutcome:
        try:
            grid = wire.grid_of(cmd.secagg, sample, cmd.codec, length)
            params = wire.params_of(cmd.secagg, sample, cmd.codec, length)
        except ValueError as e:
            raise RoundFailed(f"round {cmd.round}: no secure aggregation of {len(sample)} clients: {e}") from None
        server, names, rnd = SecAggServer(params), set(params.clients), cmd.round
        out = SecAggOutcome(np.zeros(0), [])
        try:
            got = self._collect(rnd, "keys", names, started, out)
            keys = self._decoded(rnd, "keys", got, lambda c, p: wire.decode_own_keys(p, c), out)
            relayed = server.broadcast_keys(keys)
            self.down.publish(SecAggDown(self.run_id, rnd, "keys", payload=wire.encode_keys(relayed)))
            got = self._collect(rnd, "shares", set(relayed), time.perf_counter(), out)
            for client, shares in server.route_shares(self._decoded(rnd, "shares", got, lambda c, p: wire.decode_shares(p, names), out)).items():
                self.down.publish(SecAggDown(self.run_id, rnd, "shares", client, wire.encode_shares(shares)),
                                  to={self.node_of(client) or client})
            got = self._collect(rnd, "masked", server.sharers, time.perf_counter(), out)
            survivors, dropped = server.receive_masked(self._decoded(
                rnd, "masked", got, lambda c, p: decode_masked(p, params.quantizer.bits, params.length), out))
            self.down.publish(SecAggDown(self.run_id, rnd, "unmask", payload=wire.encode_unmask_request(survivors, dropped)))
            got = self._collect(rnd, "unmask", set(survivors), time.perf_counter(), out)
            replies = self._decoded(rnd, "unmask", got, lambda c, p: wire.decode_unmask_reply(p, c, names), out)
            start = time.perf_counter()
            total, count = server.aggregate(replies)
        except ValueError as e:  # too few clients left at a step, or shares that rebuild no secret
            raise RoundFailed(f"round {rnd}: secure aggregation failed: {e}") from None
        # DP: divided by the clients asked, as DPFedAvg, so the scale does not depend on who answered.
        divisor = count if self.noise_multiplier is None else len(sample)
        out.mean = (grid.decode_sum(total, count) / divisor).astype(np.float32)
        out.aggregate_s, out.survivors = time.perf_counter() - start, survivors
        out.failures += [(c, "dropped after sharing its keys: left out of the sum") for c in dropped]
        if self.section.record_levels:
            (self.run_dir / LEVELS_DIR).mkdir(parents=True, exist_ok=True)
            np.save(self.run_dir / LEVELS_DIR / f"r{rnd}-sum.npy", total)
            (self.run_dir / LEVELS_DIR / f"r{rnd}-sum.json").write_text(json.dumps(
                {"survivors": survivors, "dropped": dropped, "modulus": params.quantizer.modulus}))
        return out

    def _collect(self, rnd: int, step: str, expected: set[str], started: float, out: SecAggOutcome) -> dict[str, bytes]:
        """The payloads of `step` from `expected`, until all answered, the missing are gone, or the deadline."""
        got: dict[str, bytes] = {}
        while set(got) < expected and time.perf_counter() - started < self.deadline_s:
            if not (expected - set(got)) & self.alive():
                break
            msg = self.up.receive(0.5)
            if msg is None or msg.run_id != self.run_id or msg.round != rnd or msg.step != step:
                continue  # nothing, or a late message of another step or round
            if msg.client_id not in expected or msg.client_id in got:
                reason = "not expected at this step, or a second answer"
            elif self.up.last_sender != self.node_of(msg.client_id):
                reason = f"sent by {self.up.last_sender!r}, not by the node of the client it names"
            else:
                got[msg.client_id] = msg.payload
                continue
            self._reject(rnd, step, str(msg.client_id), reason, out)
        for client in sorted(expected - set(got)):
            self.log(f"round {rnd}: no secagg {step} from {client}")
        return got

    def _decoded(self, rnd: int, step: str, got: dict[str, bytes], decode: Callable[[str, bytes], Any],
                 out: SecAggOutcome) -> dict[str, Any]:
        decoded = {}
        for client, payload in sorted(got.items()):
            try:
                decoded[client] = decode(client, payload)
            except ValueError as e:
                self._reject(rnd, step, client, str(e), out)
        return decoded

    def _reject(self, rnd: int, step: str, client: str, reason: str, out: SecAggOutcome) -> None:
        out.rejected += 1
        out.failures.append((client, reason))
        self.log(f"round {rnd}: rejected secagg {step} from {client!r}: {reason}")
