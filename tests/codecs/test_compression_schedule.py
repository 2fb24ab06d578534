"""DGC's warm-up in FL: Compression.encode (the FL client's one call per round) advances the
schedule by one epoch per round, so the default follows the paper in rounds."""
from __future__ import annotations

import copy

import numpy as np

from commlab.codecs import decode_any
from commlab.codecs.compression import build_compression

LAYOUT = [("w", (200, 100)), ("b", (100,))]


def delta(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(20_100).astype(np.float32)


def test_fl_rounds_follow_the_paper_warmup():
    comp = build_compression("dgc", {}, LAYOUT)
    densities, kept = [], []
    for rnd in range(6):
        frame = comp.encode(delta(rnd))
        densities.append(comp.codec.density)
        kept.append(np.count_nonzero(decode_any(frame)[:20_000]))
    assert densities == [0.25, 0.0625, 0.015625, 0.004, 0.001, 0.001]
    assert kept[0] > 0.8 * 0.25 * 20_000 and kept[-1] <= 1.3 * 20 and comp.rounds == 6
    assert comp.memory.masking  # DGC's masking starts with the final density (default after_warmup)


def test_a_rerun_round_restores_the_schedule_with_the_memory():
    comp = build_compression("dgc", {}, LAYOUT)
    comp.encode(delta(0))
    before = copy.deepcopy(comp.state_dict())
    first = comp.encode(delta(1))
    comp.load_state_dict(copy.deepcopy(before))  # what the FL client does when a round is rerun
    assert comp.rounds == 1 and comp.encode(delta(1)) == first and comp.codec.density == 0.0625


def test_no_warmup_when_asked_and_ddp_steps_stay_explicit():
    comp = build_compression("dgc", {"warmup_length": 0}, LAYOUT)
    comp.encode(delta(0))
    assert comp.codec.density == 0.001
    ddp = build_compression("dgc", {"warmup_length": 1.0, "warmup_unit": "epochs"}, LAYOUT, momentum=0.9)
    ddp.at_step(5, 10)  # half way through the first epoch: third of four stages
    frame, sent = ddp.compress(delta(0))
    ddp.remember(sent, decode_any(frame))
    assert ddp.codec.density == 0.015625 and ddp.rounds == 0


def test_codecs_without_a_schedule_count_rounds_too():
    comp = build_compression("signsgd", {}, LAYOUT)
    comp.encode(delta(0))
    assert comp.rounds == 1 and comp.state_dict()["rounds"] == 1
