"""benchmarks/bench_privacy.py, the parts that start no run: the SecAgg+ cost row of a codec and
the bits column (no FL runs)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("bench_privacy", Path(__file__).parents[2] / "benchmarks" / "bench_privacy.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_secagg_row_is_exact_and_sizes_the_masked_frame():
    row = bench.secagg_round("qsgd4", 1000, seed=0)
    assert row["exact"] and row["bits"] == 7  # 10 clients x 8 steps = 80 < 2**7
    assert row["masked_bytes"] == 9 + -(-1000 * 7 // 8)
    assert row["masked_x_codec"] == row["masked_bytes"] / row["codec_bytes"]


def test_bits_column_names_codecs_that_cannot_be_combined():
    assert bench.secagg_bits("int8") == "12"
    assert bench.secagg_bits("topk") == "not combinable (sparsity)"
    assert bench.secagg_bits("fp32") == "not combinable (not a quantizer)"
