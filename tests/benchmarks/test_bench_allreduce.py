"""bench_allreduce --codecs: the codec list is checked, and each row's bytes and time are given
as x of the first codec's on the same link and schedule."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench_allreduce = pytest.importorskip("bench_allreduce")


def rank_result(bytes_by_codec: dict[str, int], seconds: float) -> dict:
    return {f"{c} {name}": {"runs": [(seconds * (0.5 if name == "fp16" else 1.0), sent, None)], "digest": name}
            for c in bench_allreduce.COLLECTIVES for name, sent in bytes_by_codec.items()}


def test_codecs_are_parsed_and_an_unknown_one_is_named():
    assert bench_allreduce.codec_list("raw, fp32,fp16,bf16") == ["raw", "fp32", "fp16", "bf16"]
    with pytest.raises(argparse.ArgumentTypeError, match="nosuch"):
        bench_allreduce.codec_list("raw,nosuch")
    with pytest.raises(argparse.ArgumentTypeError, match="at least one"):
        bench_allreduce.codec_list(" , ")


def test_rows_give_bytes_and_time_as_x_of_the_first_codec():
    ranks = [rank_result({"raw": 4000, "fp16": 2000}, 2.0), rank_result({"raw": 4200, "fp16": 2100}, 1.0)]
    table = bench_allreduce.rows("loopback", ranks, world=2, numel=1000, codecs=["raw", "fp16"])
    assert [(r["collective"], r["codec"]) for r in table] == [("naive", "raw"), ("naive", "fp16"),
                                                             ("ring", "raw"), ("ring", "fp16")]
    fp16 = table[1]
    assert fp16["bytes_x_raw"] == pytest.approx(0.5) and fp16["time_x_raw"] == pytest.approx(0.5)
    assert fp16["sent_x_payload"] == pytest.approx(2050 / 4000) and fp16["seconds"] == 1.0  # the slowest rank
    assert table[0]["bytes_x_raw"] == 1.0 and all(r["identical_on_all_ranks"] for r in table)
