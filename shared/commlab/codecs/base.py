"""Codec interface and the name/id registry.

A codec turns a flat float32 vector into one complete wire frame (see wire.py) and back.
Decoders read every parameter they need from the frame itself, so ``decode_any`` can decode a
frame without knowing how the sender configured its codec.
"""
from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from commlab.codecs import wire
from commlab.codecs.errors import CodecError

# Lossy encoders refuse values beyond this so that no decoded value can overflow float32
# (float32 max is about 2**128); decoders reject frames whose scales would exceed it.
MAX_MAGNITUDE = 2.0**126

_BY_NAME: dict[str, type[Codec]] = {}
_BY_ID: dict[int, type[Codec]] = {}


class Codec(ABC):
    name: str
    codec_id: ClassVar[int]
    lossy: ClassVar[bool]
    params_struct: ClassVar[struct.Struct]
    # Codecs named with a numeric suffix ("minmax4", "qsgd16") take it as this constructor argument.
    suffix_param: ClassVar[str | None] = None
    # Codecs that treat tensors differently (DGC: small tensors dense; PowerSGD: matrices) get the
    # model's layout, [(name, shape)] in flat-vector order, when built to encode; never per call.
    needs_layout: ClassVar[bool] = False
    # Unbiased stochastic quantizers (QSGD, TernGrad) run without error feedback: their error can
    # exceed the vector itself (they are not contractive), and feeding it back makes the residual
    # grow round after round (measured: qsgd4 and terngrad diverged in FL within 5 rounds).
    unbiased: ClassVar[bool] = False

    def __init__(self, max_numel: int = wire.MAX_NUMEL) -> None:
        self.max_numel = max_numel

    def encode(self, vec: np.ndarray) -> bytes:
        """Flat float32 vector -> one complete frame."""
        arr = np.asarray(vec)
        if arr.ndim != 1:
            raise CodecError(f"{self.name}: expected a flat vector, got shape {arr.shape}")
        if arr.size > self.max_numel:
            raise CodecError(f"{self.name}: {arr.size} elements exceed the cap of {self.max_numel}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        params, parts = self._encode(arr)
        return wire.build(self.codec_id, arr.size, self.params_struct.pack(*params), parts)

    def decode(self, frame: bytes | bytearray | memoryview, numel: int | None = None) -> np.ndarray:
        """Validate an untrusted frame and return the float32 vector; raises CodecError.

        Pass ``numel`` when the receiver knows the vector length (e.g. the model size): a frame
        of any other length is then rejected before anything is allocated.
        """
        f = wire.parse(frame, self.max_numel)
        if f.codec_id != self.codec_id:
            raise CodecError(f"{self.name}: frame carries codec id {f.codec_id}, expected {self.codec_id}")
        if numel is not None and f.numel != numel:
            raise CodecError(f"{self.name}: frame has {f.numel} elements, expected {numel}")
        if len(f.params) != self.params_struct.size:
            raise CodecError(
                f"{self.name}: {len(f.params)} parameter bytes, expected {self.params_struct.size}"
            )
        return self._decode(f.numel, self.params_struct.unpack(f.params), f.payload)

    @abstractmethod
    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        """Return (frame parameters, payload parts) for a contiguous float32 vector."""

    @abstractmethod
    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        """Decode a payload whose header was already validated; must validate the payload."""

    @abstractmethod
    def payload_size(self, numel: int) -> int:
        """Exact (or, for data-dependent index coding, upper bound) payload bytes."""

    def at_step(self, step: int) -> None:
        """Set what changes over time for the frame of `step` (FL: the round); most codecs have nothing."""

    def wire_size(self, numel: int) -> int:
        """Frame bytes for a vector of ``numel`` elements (upper bound for sparse index coding)."""
        return wire.overhead(self.params_struct.size) + self.payload_size(numel)

    def __repr__(self) -> str:
        return f"<codec {self.name}>"


class RandomCodec(Codec):
    """A codec that draws from its own Generator (`self.rng`): its state is the generator's, so a
    codec rebuilt from it (a resumed run, a host swapping its logical clients) draws on where the
    old one stopped instead of repeating its draws."""
    rng: np.random.Generator
    # Seeded by the node (build_compression's `seed`: the FL client index, the DDP rank) unless its
    # params name a seed. qsgd: otherwise unseeded, so two runs of one seed drew differently.
    # terngrad and randomk keep their seed 0 on every node, as the compressor matrix measured them.
    seeded_by_node: ClassVar[bool] = False

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def register(cls: type[Codec]) -> type[Codec]:
    """Class decorator adding a codec to the registry under its name and id."""
    assert cls.codec_id not in _BY_ID, f"duplicate codec id {cls.codec_id}"
    _BY_NAME[cls.name] = cls
    _BY_ID[cls.codec_id] = cls
    return cls


def codec_class(name: str) -> tuple[type[Codec], dict[str, int]]:
    """The registered class a name resolves to, with the parameter its suffix sets (e.g.
    "minmax4" -> (MinMax, {"bits": 4})); CodecError for an unknown name."""
    cls = _BY_NAME.get(name)
    if cls is not None:
        return cls, {}
    for candidate in _BY_NAME.values():
        suffix = name[len(candidate.name) :]
        if candidate.suffix_param and name.startswith(candidate.name) and suffix.isdigit():
            return candidate, {candidate.suffix_param: int(suffix)}
    raise CodecError(f"unknown codec {name!r}; known: {', '.join(names())}")


def get_codec(name: str, layout: Any = None, **params: Any) -> Codec:
    """Build a codec by registry name, e.g. "int8", "fp32_sparse", "minmax4", "qsgd16", "dgc";
    `layout` (the model's [(name, shape)]) goes to the codecs that need it and is ignored by others."""
    cls, suffix_params = codec_class(name)
    params = {**suffix_params, **params}
    if cls.needs_layout:
        params = {**params, "layout": layout}
    try:
        return cls(**params)
    except TypeError as exc:
        raise CodecError(f"codec {name!r}: bad parameters {sorted(params)}: {exc}") from exc


def names() -> list[str]:
    """Registered names; suffixed families are shown with their argument, e.g. "minmax<bits>"."""
    return [n + (f"<{c.suffix_param}>" if c.suffix_param else "") for n, c in _BY_NAME.items()]


def decode_any(
    frame: bytes | bytearray | memoryview, numel: int | None = None, max_numel: int = wire.MAX_NUMEL
) -> np.ndarray:
    """Decode a frame with whichever codec its header names."""
    codec_id = wire.parse(frame, max_numel).codec_id
    cls = _BY_ID.get(codec_id)
    if cls is None:
        raise CodecError(f"unknown codec id {codec_id}; known: {sorted(_BY_ID)}")
    codec = cls(max_numel=max_numel)
    return codec.decode(frame, numel)
