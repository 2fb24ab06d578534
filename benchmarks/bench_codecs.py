"""Codec benchmark: wire size, encode/decode throughput against a memcpy of the same vector
measured in the same run, and reconstruction error, for the MNIST CNN parameter vector, an MNIST
CNN update (what an FL client uploads) and a 10M-element vector (a 10,000 x 1,000 matrix to the
compressors that take the model's layout: DGC, PowerSGD). Prints a table and writes
results/bench/codecs.{csv,md} (with each frame's bytes). One encode and one decode of each case
run before its timing: they compile the codecs' loops (or load them from numba's cache).

    python benchmarks/bench_codecs.py [--reps 5] [--budget 2.0] [--codecs fp32,int8,...] [--vectors mnist_cnn_update]
"""
from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd
import torch

from commlab.bench import BenchParser, BenchRun
from commlab.codecs import decode_any, get_codec
from commlab.codecs.base import Layout
from commlab.codecs.scratch import retain_freed_memory
from commlab.models import build_model, flatten_params, layout_of

CODECS = ["fp32", "int8", "fp32_sparse", "int8_sparse", "minmax8", "minmax4", "minmax2", "qsgd16", "qsgd4",
          "qsgdz3", "signsgd", "terngrad", "randomk", "dgc", "powersgd2"]
FIELDS = ["vector", "numel", "codec", "wire_bytes", "wire_x_of_fp32", "encode_ms", "decode_ms", "encode_MBps",
          "decode_MBps", "encode_x_memcpy", "decode_x_memcpy", "roundtrip_x_memcpy", "max_abs_err", "mean_abs_err", "memcpy_MBps"]


def mnist_cnn_update() -> np.ndarray:
    """What an FL client uploads: the change of the seed-0 MNIST CNN after 2 local epochs (SGD, lr
    0.05, momentum 0.9, batch 32) on the first 1,000 training samples. Unlike the weights, most of
    its values are small against their neighbours', which entropy-coded frames (qsgdz) exploit."""
    from commlab.data.dataset import load_dataset
    from commlab.models import train_epoch
    data, model = load_dataset("mnist"), build_model("mnist_cnn", seed=0)
    start = flatten_params(model).copy()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(2):
        train_epoch(model, data.train_x, data.train_y, np.arange(1000), batch_size=32, lr=0.05, seed=epoch,
                    optimizer=opt)
    return flatten_params(model) - start


VECTORS = {"mnist_cnn": lambda: flatten_params(build_model("mnist_cnn")),
           "mnist_cnn_update": mnist_cnn_update,
           "random_10M": lambda: np.random.default_rng(0).standard_normal(10_000_000).astype(np.float32)}


def layout(name: str) -> Layout:
    """What DGC and PowerSGD are told of the vector's tensors: the model's, or one matrix."""
    return [("matrix", (10_000, 1_000))] if name == "random_10M" else layout_of(build_model("mnist_cnn"))


def best_times(fns: dict, reps: int, budget_s: float) -> dict[str, float]:
    """Round-robin repetitions, minimum per function of the thread's CPU time (user and system:
    page faults count). Every function runs on this one thread (the compiled loops and
    PowerSGD's one BLAS thread), and on a shared machine wall time counts the waits for a core:
    with more runnable processes than cores, a call longer than a time slice was never measured
    undisturbed. Interleaving gives memcpy and the codec the same cache and memory contention.
    Fast codecs get more repetitions (up to 10x ``reps``) within ``budget_s`` of wall time."""
    best = dict.fromkeys(fns, float("inf"))
    start_all, done = time.perf_counter(), 0
    while done < reps or (done < 10 * reps and time.perf_counter() - start_all < budget_s):
        for key, fn in fns.items():
            start = time.thread_time()
            fn()
            best[key] = min(best[key], time.thread_time() - start)
        done += 1
    return best


def bench(name: str, vec: np.ndarray, codec_name: str, reps: int, budget_s: float) -> dict:
    params = {"seed": 0} if codec_name.startswith("qsgd") else {}
    codec = get_codec(codec_name, layout(name), **params)
    dst = np.empty_like(vec)
    frame = codec.encode(vec)
    out = decode_any(frame)
    t = best_times({"copy": lambda: np.copyto(dst, vec), "enc": lambda: codec.encode(vec),
                    "dec": lambda: codec.decode(frame)}, reps, budget_s)
    t_copy, t_enc, t_dec = t["copy"], t["enc"], t["dec"]
    mb = vec.nbytes / 1e6
    err = np.abs(out - vec)
    return {
        "vector": name, "numel": vec.size, "codec": codec_name,
        "wire_bytes": len(frame), "wire_x_of_fp32": len(frame) / vec.nbytes,
        "encode_ms": 1e3 * t_enc, "decode_ms": 1e3 * t_dec,
        "encode_MBps": mb / t_enc, "decode_MBps": mb / t_dec,
        "encode_x_memcpy": t_copy / t_enc, "decode_x_memcpy": t_copy / t_dec,
        "roundtrip_x_memcpy": t_copy / (t_enc + t_dec),
        "max_abs_err": float(err.max()), "mean_abs_err": float(err.mean(dtype=np.float64)),
        "memcpy_MBps": mb / t_copy,
    }


def fmt(row: dict) -> str:
    return (f"| {row['vector']} | {row['codec']} | {row['wire_x_of_fp32']:.4f} | {row['encode_ms']:.2f} | "
            f"{row['decode_ms']:.2f} | {row['encode_x_memcpy']:.3f} | {row['decode_x_memcpy']:.3f} | "
            f"{row['roundtrip_x_memcpy']:.3f} | {row['max_abs_err']:.3g} | {row['mean_abs_err']:.3g} |")


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__, "codecs", {"reps": 1, "budget": 0.2, "vectors": "mnist_cnn"})
    parser.add_argument("--reps", type=int, default=5, help="minimum repetitions per codec")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per codec for extra repetitions")
    parser.add_argument("--codecs", default=",".join(CODECS))
    parser.add_argument("--vectors", default=",".join(VECTORS), help=f"some of {', '.join(VECTORS)}")
    args = parser.parse_args(argv)
    retained = retain_freed_memory()  # as the node programs run the codecs
    unknown = set(args.vectors.split(",")) - set(VECTORS)
    if unknown:
        parser.error(f"unknown vector(s) {', '.join(sorted(unknown))}; known: {', '.join(VECTORS)}")
    print("| vector | codec | x of fp32 | enc ms | dec ms | enc x memcpy | dec x memcpy | "
          "enc+dec x memcpy | max abs err | mean abs err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    vectors = {name: VECTORS[name]() for name in args.vectors.split(",")}
    cases = [(name, vec, codec_name) for name, vec in vectors.items() for codec_name in args.codecs.split(",")]
    with BenchRun(args, len(cases), "case") as s:
        for name, vec, codec_name in cases:
            rows.append(bench(name, vec, codec_name, args.reps, args.budget))
            s.progress.log(fmt(rows[-1]))
            s.step(f"{name} {codec_name}")
        first = {r["vector"]: r for r in reversed(rows)}
        memcpy = ", ".join(f"{v} {r['memcpy_MBps']:.0f} (beside {r['codec']})" for v, r in first.items())
        s.write(pd.DataFrame(rows, columns=FIELDS), None, "Codecs: wire bytes, encode/decode speed against memcpy, "
                "reconstruction error", after=[f"memcpy MB/s: {memcpy}; x memcpy = time(memcpy) / time(codec), "
                                               "same vector, same run; times: the thread's CPU time, best of "
                                               "the repetitions",
                                               f"threads: torch intra-op {torch.get_num_threads()} (its default), "
                                               "numpy's BLAS its default, the compiled codec loops 1; compiled "
                                               "before timing",
                                               "allocator: freed memory kept for the next frames (the node programs' "
                                               "policy, commlab.codecs.scratch.retain_freed_memory)" if retained else
                                               "allocator: the C library's default (not glibc)"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
