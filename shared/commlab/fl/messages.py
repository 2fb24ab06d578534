"""The FL protocol between the controller and its clients. Each message is a plain dataclass the
DDS transport carries on the topic of its class name (commlab.dds.messages: the fields travel as
JSON meta, `payload` as chunked bytes). Controller and clients both import this module (and the
controller's node name from commlab.runs.roster), never each other.

Round r: TrainCmd(r) -> one ClientUpdate(r) per client -> ModelBlob(r), the aggregated model.
With secure aggregation, the ClientUpdate is replaced by SecAgg+'s steps: SecAggUp from each
client, SecAggDown from the controller, four times (commlab.fl.secagg_round).
With sampling, TrainCmd names the clients that train; with fedbuff, round r is server model
version r, commands go out to idle clients whenever they return, and ClientUpdate.round - 1 says
which version a client trained from (docs/scale.md).
After the last round the controller publishes Stop; a client ends on it.

A ModelBlob is the whole model (fp32) or, with a compressed downlink, a delta that moves every
client's replica from `base_digest` to `digest`. A client whose replica is not at `base_digest`
(restarted, joined late, missed a blob) asks with a ModelRequest and gets the whole model once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainCmd:
    """Train round `round` from the model of round-1; valid only with epochs >= 1."""
    round: int
    epochs: int
    lr: float
    subset_size: int
    codec: str
    codec_params: dict[str, Any] = field(default_factory=dict)
    deadline_s: float = 60.0
    batch_size: int = 32
    run_id: str = ""
    first_round: int = 1  # the controller's whole-model broadcast before this round reached every client then
    # adaptive (docs/adaptive.md), by client name: qsgd bits (s = 2^q - 1 levels) replacing `codec`,
    # and the uplink rate in payload bytes/s (a client missing from client_rates_Bps uses its own link).
    client_bits: dict[str, Any] = field(default_factory=dict)
    client_rates_Bps: dict[str, Any] = field(default_factory=dict)
    # Sampling (docs/scale.md): the names of the clients that run this command, ";"-joined ("": every
    # client); the others skip it and wait for the next one. A string, not a list: messages carry
    # JSON scalars, and one string field holds a few hundred names.
    clients: str = ""
    # fedbuff: a client whose replica is already past round-1 trains from that newer model (and
    # says so in ClientUpdate.round) instead of skipping the command.
    newer_base_ok: bool = False
    # Secure aggregation (docs/privacy.md): the round's SecAgg+ parameters (fl.secagg_wire.round_params),
    # {} for a plain round; the clients then send SecAggUp messages instead of a ClientUpdate.
    secagg: dict[str, Any] = field(default_factory=dict)

    def selected(self) -> list[str]:
        """The clients this command names ([] for every client)."""
        return self.clients.split(";") if self.clients else []

    def names(self, client: str) -> bool:
        return not self.clients or client in self.selected()

    def problem(self) -> str | None:
        """Why a client must not run this command, or None (types were checked on arrival)."""
        if self.epochs <= 0:
            return f"epochs must be >= 1, got {self.epochs} (a run ends with a Stop message)"
        for name, low, high in (("round", 1, 10**9), ("epochs", 1, 1000), ("subset_size", 1, 10**9),
                                ("batch_size", 1, 10**6), ("first_round", 1, 10**9)):
            if not low <= getattr(self, name) <= high:
                return f"{name} must be in {low}..{high}, got {getattr(self, name)}"
        if not 0 < self.lr <= 100 or not 0 < self.deadline_s <= 10**6:
            return f"lr {self.lr} and deadline_s {self.deadline_s} must be positive and sane"
        names = self.selected()
        if any(not n.strip() or n != n.strip() for n in names) or len(set(names)) != len(names):
            return f"clients must be distinct non-empty names joined by ';', got {self.clients[:60]!r}"
        return None


@dataclass
class ClientUpdate:
    round: int
    client_id: str
    num_samples: int
    payload: bytes = b""
    # adaptive's measured inputs: this round's local compute (training + emulated slowdown), and
    # the payload goodput of the previous upload, the link rate it was shaped to (0: not shaped)
    # and whether that was the client's own link rate (False also before its first upload).
    compute_s: float = 0.0
    prev_upload_Bps: float = 0.0
    prev_rate_Bps: float = 0.0
    prev_at_link_rate: bool = False
    # adaptive with entropy-coded qsgdz frames: this update's frame bytes at each bits ("1".."8").
    frame_bytes_by_bits: dict[str, Any] = field(default_factory=dict)
    # HMAC under the key of client_id (fl.update_identity) in an authenticated run: a process that
    # hosts several clients may speak for each of them, and for no other.
    identity_tag: str = ""


SECAGG_STEPS = ("keys", "shares", "masked", "unmask")


@dataclass
class SecAggUp:
    """A client's message of SecAgg+ step `step` of round `round` (payload: fl.secagg_wire)."""
    run_id: str
    round: int
    client_id: str
    step: str
    payload: bytes = b""


@dataclass
class SecAggDown:
    """The controller's relay for step `step` of round `round`: every advertised key ("keys"), the
    shares for client `to` ("shares"), or the survivors and the dropped ("unmask")."""
    run_id: str
    round: int
    step: str
    to: str = ""
    payload: bytes = b""


BLOB_KINDS = ("full", "delta")


@dataclass
class ModelBlob:
    """The model clients train round `round` + 1 from: kind "full" (payload: the fp32 weights) or
    "delta" (payload: any codec's frame of what to add to the replica at `base_digest`)."""
    round: int
    kind: str
    digest: str            # models.weights_digest of the replica once this blob is applied
    base_digest: str = ""  # delta only: the replica it applies to
    run_id: str = ""
    payload: bytes = b""

    def problem(self) -> str | None:
        if self.kind not in BLOB_KINDS:
            return f"unknown kind {self.kind!r}"
        if self.kind == "delta" and not self.base_digest:
            return "a delta without base_digest"
        return None


@dataclass
class ModelRequest:
    """A client asks for the whole model: its replica (digest `have`, "" for none) cannot take the
    deltas being broadcast. `rejoined`: it says so because it lost the controller for a while (the
    whole model only if `have` is not the controller's), and may have missed the round's command."""
    run_id: str
    client_id: str
    have: str = ""
    rejoined: bool = False


@dataclass
class Stop:
    """The run `run_id` is over after round `last_round`; clients leave."""
    run_id: str
    last_round: int
    reason: str = "completed"
