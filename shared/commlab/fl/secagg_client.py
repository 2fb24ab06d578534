"""A client's side of a SecAgg+ round in an FL run (docs/privacy.md): its clipped update on the
round's grid (privacy.update_grid), then the four steps of commlab.privacy.secagg, each answered by the
controller's relay (SecAggDown) before the next. The update itself never leaves the client: only
its masked levels do.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from commlab.dds import DdsError
from commlab.fl import secagg_wire as wire
from commlab.fl.messages import SecAggDown, SecAggUp, TrainCmd
from commlab.privacy.secagg import SecAggClient, encode_masked
from commlab.runs.fault_points import halt_at
from commlab.runs.roster import CONTROLLER

POLL_S = 0.1
LEVELS_DIR = "secagg-levels"  # record: each party's own view (a client its levels, the controller the sum)


class SecAggAborted(RuntimeError):
    """The round went on without this client (its step's relay did not come, or the round is over)."""


class SecAggSender:
    """Runs SecAgg+ rounds for the one client of this process."""

    def __init__(self, node: Any, name: str, run_id: str, all_clients: list[str], run_dir: Path):
        self.name, self.run_id, self.all_clients, self.run_dir = name, run_id, all_clients, run_dir
        self.ack_timeout_s = 60.0  # each round: its command's deadline
        self.up = node.publisher(SecAggUp)
        self.down = node.subscriber(SecAggDown)

    def run(self, cmd: TrainCmd, rnd: int, delta: np.ndarray, rounding_seed: int,
            round_over: Callable[[], bool]) -> int:
        """Take part in round `rnd` with `delta`; the bytes of the payloads sent. SecAggAborted when
        the round went on without this client; ValueError for parameters or relays that are wrong."""
        clients = cmd.selected() or self.all_clients
        params = wire.params_of(cmd.secagg, clients, cmd.codec, delta.size)
        q = params.quantizer
        levels = wire.grid_of(cmd.secagg, clients, cmd.codec, delta.size).encode(
            delta, np.random.default_rng([rounding_seed, rnd]))
        if q.noise_std:  # DP: this client's share of the noise, from OS entropy the controller cannot know
            levels = q.add_noise(levels, np.random.default_rng())
        if cmd.secagg.get("record"):
            (self.run_dir / LEVELS_DIR).mkdir(parents=True, exist_ok=True)
            np.save(self.run_dir / LEVELS_DIR / f"r{rnd}-{self.name}.npy", levels)
        party, names = SecAggClient(self.name, params), set(params.clients)
        self.ack_timeout_s = cmd.deadline_s
        sent = self._send(rnd, "keys", wire.encode_keys({self.name: party.advertise()}))
        keys = wire.decode_keys(self._await(rnd, "keys", cmd.deadline_s, round_over), names)
        sent += self._send(rnd, "shares", wire.encode_shares(party.share_keys(keys)))
        halt_at("secagg_before_masked", rnd)
        routed = wire.decode_shares(self._await(rnd, "shares", cmd.deadline_s, round_over), names)
        sent += self._send(rnd, "masked", encode_masked(party.masked_input(routed, levels), q.bits))
        halt_at("secagg_after_masked", rnd)
        survivors, dropped = wire.decode_unmask_request(self._await(rnd, "unmask", cmd.deadline_s, round_over), names)
        return sent + self._send(rnd, "unmask", wire.encode_unmask_reply(party.unmask(survivors, dropped)))

    def _send(self, rnd: int, step: str, payload: bytes) -> int:
        try:
            self.up.publish(SecAggUp(self.run_id, rnd, self.name, step, payload), to={CONTROLLER})
        except DdsError as e:
            raise SecAggAborted(f"step {step} not delivered ({e})") from None
        # The controller holds this step's message before the client goes on (or drops out).
        if not self.up.wait_for_acks(self.ack_timeout_s):
            raise SecAggAborted(f"step {step} not acknowledged by the controller within {self.ack_timeout_s:.0f}s")
        return len(payload)

    def _await(self, rnd: int, step: str, timeout_s: float, round_over: Callable[[], bool]) -> bytes:
        """The controller's relay of `step` for this client; relays of other rounds are dropped."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            msg = self.down.receive(POLL_S)
            if msg is None:
                if round_over():
                    raise SecAggAborted(f"the round closed before the controller's {step} relay")
                continue
            if msg.run_id == self.run_id and msg.round == rnd and msg.step == step and msg.to in ("", self.name):
                return msg.payload
        raise SecAggAborted(f"no {step} relay from the controller within {timeout_s:.0f}s")
