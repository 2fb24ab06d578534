"""The model broadcast, both ends: the controller's ModelSender and each client's ModelReplica.

With a lossless downlink (fp32) every ModelBlob is the whole model, as a plain FL controller sends
it: a lossless difference is no smaller. With any lossy compressor the controller sends, each
round, the compressed difference between its global model and the replica every client holds,
and adds what it sent (the decoded frame) to its own copy of that replica. What the codec drops
stays in `weights - replica` and travels in a later round: server-side error feedback without a
separate memory (the difference *is* the residual). Clients train from the replica, so uploads
are deltas against it.

Every blob names the replica digest it produces (and, for a delta, the one it applies to): a client
whose replica differs (restarted, joined late, lost a blob) asks for the whole model once instead
of training from a wrong model.
"""
from __future__ import annotations

import time

import numpy as np

from commlab.codecs import Codec, CodecError, codec_of, decode_any
from commlab.codecs.fp32 import Fp32
from commlab.fl.messages import ModelBlob
from commlab.models import weights_digest


class ModelSender:
    def __init__(self, codec: Codec, run_id: str):
        """`codec`: the downlink compressor, built for the model; a lossless one sends whole models."""
        self.full_codec = Fp32()
        self.delta_codec: Codec | None = codec if codec.lossy else None
        self.run_id = run_id
        self.replica: np.ndarray | None = None
        self.round = -1
        self.digest = ""
        self.encode_s = 0.0  # encoding time since the caller last reset it

    def full(self, rnd: int, weights: np.ndarray | None = None) -> ModelBlob:
        """The whole model: `weights` (which become every client's replica), or the current replica."""
        if weights is not None:
            self.replica, self.round = np.array(weights, dtype=np.float32), rnd
            self.digest = weights_digest(self.replica)
        return ModelBlob(round=self.round, kind="full", digest=self.digest, run_id=self.run_id,
                         payload=self.full_codec.encode(self.replica))

    def next(self, rnd: int, weights: np.ndarray) -> ModelBlob:
        """The blob that brings every in-sync replica to (an approximation of) `weights`."""
        if self.delta_codec is None:
            return self.full(rnd, weights)
        start = time.perf_counter()
        frame = self.delta_codec.encode(weights - self.replica)  # the difference is gone once encoded
        base = self.digest
        # The addition every client makes (float32, same operands: digests agree), decoded straight
        # into the replica, this sender's own copy (full() copies what it is given): a sparse frame
        # adds its kept values where they go, with no decoded model.
        self.delta_codec.add_decoded(frame, self.replica, 1.0)
        self.encode_s += time.perf_counter() - start
        self.round, self.digest = rnd, weights_digest(self.replica)
        return ModelBlob(round=rnd, kind="delta", digest=self.digest, base_digest=base, run_id=self.run_id,
                         payload=frame)


class ModelReplica:
    """A client's copy of the broadcast model; `apply` accepts only blobs that lead to the digest
    they name."""

    def __init__(self, numel: int):
        self.numel = numel
        self.weights: np.ndarray | None = None
        self.round: int | None = None
        self.digest = ""

    def apply(self, blob: ModelBlob) -> tuple[str | None, bool]:
        """(problem or None, whether the whole model is needed to go on)."""
        if (problem := blob.problem()) is not None:
            return problem, False
        if blob.digest == self.digest:
            return None, False  # already here (e.g. a resync another client asked for)
        if blob.kind == "delta" and blob.base_digest != self.digest:
            return f"delta for replica {blob.base_digest}, this replica is {self.digest or 'empty'}", True
        if blob.kind == "full":
            try:
                weights = decode_any(blob.payload, numel=self.numel)
            except CodecError as e:
                return str(e), True
        else:
            # Decoded straight into the replica: a sparse frame adds its kept values where they go,
            # with no decoded model (a frame that does not decode leaves the replica as it was).
            try:
                codec_of(blob.payload).add_decoded(blob.payload, self.weights, 1.0)
            except CodecError as e:
                return str(e), True
            weights = self.weights
        problem = "holds NaN or Inf" if not np.isfinite(weights).all() else None
        if problem is None and weights_digest(weights) != blob.digest:
            problem = f"applied, it gives model {weights_digest(weights)}, the blob names {blob.digest}"
        if problem is not None:
            if weights is self.weights:  # the replica took the delta: it is no model any more
                self.weights, self.round, self.digest = None, None, ""
            return problem, True
        self.weights, self.round, self.digest = weights, blob.round, blob.digest
        return None, False
