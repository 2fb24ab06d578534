"""Codec interface, the hook that builds a compressor for a node, and the name/id registry.

A codec turns a flat float32 vector into one complete wire frame (see wire.py) and back.
Decoders read every parameter they need from the frame itself, so ``decode_any`` can decode a
frame without knowing how the sender configured its codec.

A compressor is one file: a registered Codec subclass that declares how a DDP step exchanges it
(``exchange``) and, through one hook (``Codec.build``), the memory and schedule a node runs it
with. Nothing outside the compressor's file branches on its name or class (docs/codecs.md).
"""
from __future__ import annotations

import inspect
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from commlab.codecs import wire
from commlab.codecs.errors import CodecError
from commlab.codecs.memory import ErrorFeedback, Memory, NoMemory
from commlab.codecs.schedule import Schedule

# Lossy encoders refuse values beyond this so that no decoded value can overflow float32
# (float32 max is about 2**128); decoders reject frames whose scales would exceed it.
MAX_MAGNITUDE = 2.0**126

# How a DDP step exchanges a compressor's output (Codec.exchange; ddp/train.py picks by it):
ALLREDUCE = "allreduce"  # values that can be summed: the collectives carry the codec's frames of
                         # partial sums round the ring (fp32, the dense reference; fp16; bf16)
ALLGATHER = "allgather"  # any frame: every rank's frame reaches every rank, which decodes and averages
LOWRANK = "lowrank"      # PowerSGD: an allreduce of the Ps, then one of the Qs (the codec's lowrank_* methods)
EXCHANGES = (ALLREDUCE, ALLGATHER, LOWRANK)
SETTINGS = ("fl", "ddp")

Layout = Sequence[tuple[str, tuple[int, ...]]]  # (parameter name, shape) in flat-vector order

_BY_NAME: dict[str, type[Codec]] = {}
_BY_ID: dict[int, type[Codec]] = {}


@dataclass(frozen=True)
class Context:
    """What a node tells a compressor when it builds it (Codec.build); each takes what it needs."""
    layout: Layout = ()
    setting: str = "fl"       # "fl": one frame a round (an upload); "ddp": one exchange a step
    momentum: float = 0.0     # the optimizer's momentum (DGC's memory applies it instead)
    nesterov: bool = False
    world: int = 1            # ranks whose gradients are averaged (DGC's local clipping)
    seed: int = 0             # this node's own (SeedTree.codec of the FL client, the DDP rank)
    run_seed: int = 0         # the same on every node of the run (SeedTree.codec_shared: PowerSGD's first Qs must agree)

    def __post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise CodecError(f"setting must be one of {', '.join(SETTINGS)}, got {self.setting!r}")


class Codec(ABC):
    name: str
    codec_id: ClassVar[int]
    lossy: ClassVar[bool]
    params_struct: ClassVar[struct.Struct]
    # Codecs named with a numeric suffix ("minmax4", "qsgd16") take it as this constructor argument.
    suffix_param: ClassVar[str | None] = None
    # Other names of the same codec ("dense": DDP's name for the fp32 allreduce reference).
    aliases: ClassVar[tuple[str, ...]] = ()
    # Codecs that treat tensors differently (DGC: small tensors dense; PowerSGD: matrices) get the
    # model's layout, [(name, shape)] in flat-vector order, when built to encode; never per call.
    needs_layout: ClassVar[bool] = False
    # Unbiased stochastic quantizers (QSGD, TernGrad) run without error feedback: their error can
    # exceed the vector itself (they are not contractive), and feeding it back makes the residual
    # grow round after round (measured: qsgd4 and terngrad diverged in FL within 5 rounds).
    unbiased: ClassVar[bool] = False
    # How a DDP step exchanges this codec's output: ALLGATHER, ALLREDUCE or LOWRANK (see above).
    exchange: ClassVar[str] = ALLGATHER
    # Parameters of the memory and schedule (not the codec's), with their defaults by setting
    # ("fl", "ddp"), for the build hooks that take any (DGC's warm-up, PowerSGD's FL residual).
    node_params: ClassVar[dict[str, dict[str, Any]]] = {}
    # The frame size depends on the values (index coding, entropy coding, a sampled threshold), not
    # on numel and the parameters alone: wire_size is then an upper bound, else the exact size.
    sized_by_content: ClassVar[bool] = False

    def __init__(self, max_numel: int = wire.MAX_NUMEL) -> None:
        self.max_numel = max_numel

    @classmethod
    def build(cls, params: dict[str, Any], context: Context) -> tuple[Codec, Memory, Schedule | None]:
        """The hook: this compressor as a node runs it, from its parameters (codec, memory and
        schedule ones in one dict) and the node's context: (codec, memory, schedule or None).
        build_compression (compression.py) is its only caller.

        Default: the codec built from `params`; error feedback for a biased lossy codec, no
        memory for a lossless or unbiased one, nor for one summed in transit (ALLREDUCE: no rank
        sees its own frame come back, as in torch's fp16 and bf16 hooks); nothing scheduled. A
        compressor with more (DGC's momentum memory and warm-up, PowerSGD's FL residual and whole
        first steps) overrides it in its own file.
        """
        codec = cls.create(params, context.layout)
        feedback = codec.lossy and not codec.unbiased and codec.exchange != ALLREDUCE
        return codec, ErrorFeedback() if feedback else NoMemory(), None

    @classmethod
    def create(cls, params: dict[str, Any], layout: Layout | None = None) -> Codec:
        """The codec alone, from constructor parameters (plus `layout` if it needs one)."""
        if cls.needs_layout:
            params = {**params, "layout": layout}
        unknown = sorted(set(params) - _keywords(cls))
        if unknown:
            raise CodecError(f"codec {cls.name!r}: bad parameters {unknown}: unknown parameters (its codec takes "
                             f"{', '.join(sorted(_keywords(cls) - {'layout', 'max_numel'})) or 'none'})")
        try:
            return cls(**params)
        except TypeError as exc:
            raise CodecError(f"codec {cls.name!r}: bad parameters {sorted(params)}: {exc}") from exc

    @classmethod
    def takes(cls, param: str) -> bool:
        """Whether the compressor takes parameter `param` (its codec's, its memory's or schedule's)."""
        return param in _keywords(cls) or any(param in defaults for defaults in cls.node_params.values())

    @property
    def family(self) -> str:
        """The registered name of this codec's class: "qsgd" for a "qsgd15" codec."""
        return type(self).name

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
        return self._decode(*self._parse(frame, numel))

    def add_decoded(self, frame: bytes | bytearray | memoryview, out: np.ndarray, weight: float) -> None:
        """out += weight * decode(frame) (float32), the frame validated as decode does; a codec
        whose frames are sparse adds its kept values where they go, with no decoded vector of
        out's size (an aggregate decoded into). On CodecError `out` is unchanged."""
        numel, params, payload = self._parse(frame, out.size)
        self._add_decoded(numel, params, payload, out, np.float32(weight))

    def _add_decoded(self, numel: int, params: tuple, payload: memoryview, out: np.ndarray,
                     weight: np.float32) -> None:
        decoded = self._decode(numel, params, payload)
        decoded *= weight
        out += decoded

    def _parse(self, frame: bytes | bytearray | memoryview, numel: int | None) -> tuple[int, tuple, memoryview]:
        """(numel, parameters, payload) of an untrusted frame whose header is this codec's."""
        f = wire.parse(frame, self.max_numel)
        if f.codec_id != self.codec_id:
            raise CodecError(f"{self.name}: frame carries codec id {f.codec_id}, expected {self.codec_id}")
        if numel is not None and f.numel != numel:
            raise CodecError(f"{self.name}: frame has {f.numel} elements, expected {numel}")
        if len(f.params) != self.params_struct.size:
            raise CodecError(
                f"{self.name}: {len(f.params)} parameter bytes, expected {self.params_struct.size}"
            )
        return f.numel, self.params_struct.unpack(f.params), f.payload

    @abstractmethod
    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        """Return (frame parameters, payload parts) for a contiguous float32 vector."""

    @abstractmethod
    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        """Decode a payload whose header was already validated; must validate the payload."""

    @abstractmethod
    def payload_size(self, numel: int) -> int:
        """Exact payload bytes (an upper bound where the codec is sized_by_content)."""

    def wire_size(self, numel: int) -> int:
        """Frame bytes for a vector of ``numel`` elements (an upper bound where sized_by_content)."""
        return wire.overhead(self.params_struct.size) + self.payload_size(numel)

    def sent_share(self, decoded: np.ndarray) -> float:
        """Share of the coordinates the codec may drop that a frame decoded to `decoded` carries."""
        return float(np.count_nonzero(decoded)) / max(decoded.size, 1)

    def state_dict(self) -> dict | None:
        """What the codec carries from frame to frame (a generator, a warm start); None: nothing."""
        return None

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`; a codec that carries nothing has nothing to load."""

    def __repr__(self) -> str:
        return f"<codec {self.name}>"


class RandomCodec(Codec):
    """A codec that draws from its own Generator (`self.rng`): its state is the generator's, so a
    codec rebuilt from it (a resumed run, a host swapping its logical clients) draws on where the
    old one stopped instead of repeating its draws."""
    rng: np.random.Generator
    @classmethod
    def build(cls, params: dict[str, Any], context: Context) -> tuple[Codec, Memory, Schedule | None]:
        """Seeded by the node (Context.seed, commlab.runs.seeds.SeedTree.codec) unless its params name a seed."""
        return super().build({"seed": context.seed, **params}, context)

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def _keywords(cls: type[Codec]) -> set[str]:
    """The keyword arguments a codec's constructor takes, down the classes its **kw passes them to."""
    taken: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        taken |= {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return taken


def register(cls: type[Codec]) -> type[Codec]:
    """Class decorator adding a codec to the registry under its name, aliases and id; a name or
    id already taken is a CodecError naming both classes (frames name codecs by id forever)."""
    if cls.exchange not in EXCHANGES:
        raise CodecError(f"{cls.__name__}: exchange must be one of {', '.join(EXCHANGES)}, got {cls.exchange!r}")
    taken = _BY_ID.get(cls.codec_id)
    if taken is not None and taken is not cls:
        raise CodecError(f"codec id {cls.codec_id} of {cls.__name__} is taken by {taken.__name__}")
    for name in (cls.name, *cls.aliases):
        if _BY_NAME.get(name, cls) is not cls:
            raise CodecError(f"codec name {name!r} of {cls.__name__} is taken by {_BY_NAME[name].__name__}")
    _BY_ID[cls.codec_id] = cls
    _BY_NAME.update((name, cls) for name in (cls.name, *cls.aliases))
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


def get_codec(name: str, layout: Layout | None = None, **params: Any) -> Codec:
    """Build a codec by registry name, e.g. "int8", "fp32_sparse", "minmax4", "qsgd16", "dgc";
    `layout` (the model's [(name, shape)]) goes to the codecs that need it and is ignored by others."""
    cls, suffix_params = codec_class(name)
    return cls.create({**suffix_params, **params}, layout)


def names() -> list[str]:
    """Registered names, one per codec (no aliases); suffixed families are shown with their
    argument, e.g. "minmax<bits>"."""
    return [c.name + (f"<{c.suffix_param}>" if c.suffix_param else "") for c in _BY_ID.values()]


def decode_any(
    frame: bytes | bytearray | memoryview, numel: int | None = None, max_numel: int = wire.MAX_NUMEL
) -> np.ndarray:
    """Decode a frame with whichever codec its header names."""
    return codec_of(frame, max_numel).decode(frame, numel)


def codec_of(frame: bytes | bytearray | memoryview, max_numel: int = wire.MAX_NUMEL) -> Codec:
    """A decoder for the codec the frame's header names (it reads its parameters from the frame)."""
    codec_id = wire.parse(frame, max_numel).codec_id
    cls = _BY_ID.get(codec_id)
    if cls is None:
        raise CodecError(f"unknown codec id {codec_id}; known: {sorted(_BY_ID)}")
    return cls(max_numel=max_numel)
