"""dgc: the frame of Deep Gradient Compression (Lin et al., ICLR 2018).

Per large tensor, the coordinates whose magnitude passes a threshold estimated from a random
sample (section 3.1: exact top-k over millions of values each step is the expensive part), about
`density` of them, travel as fp16 values; tensors with <= 1 dimension or fewer than
`min_sparse_numel` elements travel whole in fp32 (a tiny share of the bytes, and sparsifying
biases hurts accuracy; the reference does the same). Momentum correction, accumulation, masking
and local clipping are DGC's memory (memory.DgcMemory); the density warm-up is its schedule
(DensityWarmup); Dgc.build makes both, with the defaults of the node's setting (NODE_PARAMS).

Wire (params: two index sections over the flat vector, coded as fp32_sparse codes its indices):
    params   sparse count, index mode, index bytes, value dtype (1 fp16, 2 fp32) |
             dense count, index mode, index bytes
    payload  sparse indices, sparse values, dense indices, dense values (fp32)
The receiver needs nothing but the frame; the model layout only decides, at the sender, what
goes where.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from commlab.codecs import indices
from commlab.codecs.base import Context, Layout, RandomCodec, register
from commlab.codecs.errors import CodecError
from commlab.codecs.memory import DgcMemory
from commlab.codecs.schedule import PAPER_STAGES, Warmup
from commlab.codecs.topk import split_sparse

FP16_MAX = float(np.finfo(np.float16).max)
VALUE_DTYPES = {1: np.dtype("<f2"), 2: np.dtype("<f4")}
MASKING = ("after_warmup", "always", "never")
# DGC's memory and schedule parameters (the rest of its parameters are the codec's), with their
# defaults per setting. FL encodes once a round, about one local epoch, so the paper's 4 warm-up
# epochs are rounds 1-4. DDP warms up over its first epoch and clips each rank's gradient locally.
# momentum_masking "after_warmup": masking starts at the final density (during warm-up coordinates
# are resent within a few steps and masking would discard most of their momentum: DDP 95.1 % vs
# 97.4 % after epoch 0, docs/ddp.md); "always" is the paper.
NODE_PARAMS = {
    "fl": {"warmup_length": 4.0, "warmup_unit": "epochs", "warmup_stages": PAPER_STAGES,
           "momentum_masking": "after_warmup", "clip_norm": None},
    "ddp": {"warmup_length": 1.0, "warmup_unit": "epochs", "warmup_stages": PAPER_STAGES,
            "momentum_masking": "after_warmup", "clip_norm": 10.0},
}


def target_count(numel: int, density: float) -> int:
    return max(1, min(numel, math.ceil(numel * density)))


def sampled_topk(x: np.ndarray, density: float, sample_ratio: float, rng: np.random.Generator,
                 lower: float = 0.8, upper: float = 1.3, max_iters: int = 10) -> np.ndarray:
    """Sorted int64 positions of roughly the `density` largest |x|: a threshold from a sample,
    lowered until at least lower*k pass; an exact top-k among the candidates caps it at k."""
    importance = np.abs(x)
    numel = importance.size
    k = target_count(numel, density)
    if k == numel:
        return np.arange(numel, dtype=np.int64)
    # At least 2/density samples, so the sample holds >= 2 "selected" values on average.
    num_samples = max(math.ceil(numel * sample_ratio), math.ceil(2 / density))
    if num_samples >= numel:
        idx = np.argpartition(importance, numel - k)[numel - k:]
        return np.sort(idx).astype(np.int64)
    samples = importance[rng.integers(0, numel, num_samples)]
    kept = target_count(num_samples, density)
    threshold = np.partition(samples, num_samples - kept)[num_samples - kept]
    idx = np.flatnonzero(importance >= threshold)
    for _ in range(max_iters):
        if idx.size > upper * k:
            break
        if idx.size >= lower * k:
            return idx
        threshold *= lower
        idx = np.flatnonzero(importance >= threshold)
    if idx.size > k:  # too many (or adaptation did not converge): exact top-k among the candidates
        idx = np.sort(idx[np.argpartition(importance[idx], idx.size - k)[idx.size - k:]])
    return idx


def sparse_mask(layout: Layout, min_sparse_numel: int) -> np.ndarray:
    """True where the flat vector belongs to a tensor DGC sparsifies (>= 2-dim and large enough)."""
    parts = [np.full(math.prod(shape), len(shape) > 1 and math.prod(shape) >= min_sparse_numel)
             for _, shape in layout]
    return np.concatenate(parts) if parts else np.zeros(0, bool)


@register
class Dgc(RandomCodec):
    name = "dgc"
    codec_id = 10
    lossy = True
    sized_by_content = True
    params_struct = struct.Struct("<QBQBQBQ")
    needs_layout = True
    node_params = NODE_PARAMS

    def __init__(self, layout: Layout | None = None, density: float = 0.001, sample_ratio: float = 0.01,
                 min_sparse_numel: int = 256, fp16_values: bool = True, seed: int = 0, **kw) -> None:
        super().__init__(**kw)
        if not 0 < density <= 1 or not 0 < sample_ratio <= 1:
            raise CodecError(f"dgc: density and sample_ratio must be in (0, 1], got {density}, {sample_ratio}")
        if not isinstance(fp16_values, bool):
            raise CodecError(f"dgc: fp16_values must be true or false, got {fp16_values!r}")
        self.density, self.sample_ratio, self.fp16_values = density, sample_ratio, fp16_values
        self.rng = np.random.default_rng(seed)
        # Per sparsified tensor its [start, end) in the flat vector (each gets its own threshold);
        # every other position travels dense.
        self.segments: list[tuple[int, int]] = []
        self.dense_idx = np.zeros(0, np.int64)
        self.numel: int | None = None
        self.maskable = np.zeros(0, bool)  # where the sparsified tensors lie (DGC's memory masks there)
        if layout is not None:
            mask = self.maskable = sparse_mask(layout, min_sparse_numel)
            ends = np.cumsum([math.prod(shape) for _, shape in layout], dtype=np.int64)
            starts = ends - [math.prod(shape) for _, shape in layout]
            self.segments = [(int(a), int(b)) for a, b in zip(starts, ends) if b > a and mask[a]]
            self.numel, self.dense_idx = mask.size, np.flatnonzero(~mask)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        if self.numel is None:
            raise CodecError("dgc: encoding needs the model layout (get_codec('dgc', layout=...))")
        if vec.size != self.numel:
            raise CodecError(f"dgc: vector has {vec.size} elements, the layout {self.numel}")
        picked = [s + sampled_topk(vec[s:e], self.density, self.sample_ratio, self.rng) for s, e in self.segments]
        sparse = np.concatenate(picked) if picked else np.zeros(0, np.int64)
        code = 1 if self.fp16_values else 2
        values = vec[sparse]
        if self.fp16_values:
            values = np.clip(values, -FP16_MAX, FP16_MAX)
        s_mode, s_bytes = indices.encode(sparse, vec.size)
        d_mode, d_bytes = indices.encode(self.dense_idx, vec.size)
        params = (sparse.size, s_mode, s_bytes.size, code, self.dense_idx.size, d_mode, d_bytes.size)
        return params, [s_bytes, values.astype(VALUE_DTYPES[code]), d_bytes, vec[self.dense_idx]]

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        s_count, s_mode, s_len, code, d_count, d_mode, d_len = params
        if code not in VALUE_DTYPES:
            raise CodecError(f"dgc: unknown value dtype code {code}")
        dtype = VALUE_DTYPES[code]
        s_idx, rest = split_sparse(payload, numel, s_count, s_mode, s_len, self.name)
        if len(rest) < s_count * dtype.itemsize:
            raise CodecError(f"dgc: {len(rest)} bytes left for {s_count} sparse values")
        s_values, rest = rest[:s_count * dtype.itemsize], rest[s_count * dtype.itemsize:]
        d_idx, rest = split_sparse(rest, numel, d_count, d_mode, d_len, self.name)
        if len(rest) != 4 * d_count:
            raise CodecError(f"dgc: {len(rest)} dense value bytes for {d_count} float32 values")
        out = np.zeros(numel, np.float32)
        out[s_idx] = np.frombuffer(s_values, dtype)
        out[d_idx] = np.frombuffer(rest, "<f4")
        return out

    @classmethod
    def build(cls, params: dict[str, Any], context: Context) -> tuple[Dgc, DgcMemory, DensityWarmup]:
        """DGC as a node runs it: the codec seeded by the node, DgcMemory with the node's momentum
        and world, and the density warm-up; memory and schedule parameters (NODE_PARAMS) default
        by the node's setting."""
        node = {k: params.get(k, default) for k, default in cls.node_params[context.setting].items()}
        codec = cls.create({"seed": context.seed, **{k: v for k, v in params.items() if k not in node}},
                           context.layout)
        if node["momentum_masking"] not in MASKING:
            raise CodecError(f"dgc: momentum_masking must be one of {', '.join(MASKING)}, "
                             f"got {node['momentum_masking']!r}")
        clip = node["clip_norm"]
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0):
            raise CodecError(f"dgc: clip_norm must be a positive number or null, got {clip!r}")
        try:
            warmup = Warmup(codec.density, tuple(node["warmup_stages"]), node["warmup_length"], node["warmup_unit"])
        except (TypeError, ValueError) as e:
            raise CodecError(f"dgc: {e}") from None
        memory = DgcMemory(codec.maskable, context.momentum, context.nesterov, masking=node["momentum_masking"] == "always",
                           clip_norm=clip, world=context.world)
        return codec, memory, DensityWarmup(warmup, codec, memory, node["momentum_masking"] == "after_warmup")

    def sent_share(self, decoded: np.ndarray) -> float:
        """Of the sparsified tensors only: the dense ones always travel whole."""
        if self.maskable.any():
            return float(np.count_nonzero(decoded[self.maskable])) / int(self.maskable.sum())
        return super().sent_share(decoded)

    def payload_size(self, numel: int) -> int:
        """Upper bound: the sampled threshold may keep up to 1.3x the target count per tensor."""
        value = VALUE_DTYPES[1 if self.fp16_values else 2].itemsize
        k = sum(min(e - s, math.ceil(1.3 * target_count(e - s, self.density))) for s, e in self.segments)
        d = self.dense_idx.size
        return indices.bound(numel, k) + value * k + indices.bound(numel, d) + 4 * d



@dataclass
class DensityWarmup:
    """DGC's schedule: the codec's density by the warm-up and, with momentum masking
    "after_warmup", masking from the first step at the final density on."""
    warmup: Warmup
    codec: Dgc
    memory: DgcMemory
    masking_after_warmup: bool

    def at_step(self, step: int, steps_per_epoch: int) -> None:
        self.codec.density = self.warmup.density(step, steps_per_epoch)
        if self.masking_after_warmup:
            self.memory.masking = self.warmup.done(step, steps_per_epoch)

    def steady_from(self, steps_per_epoch: int) -> int:
        return self.warmup.first_final_step(steps_per_epoch)
