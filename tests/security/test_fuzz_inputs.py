"""Fuzz the inputs a node reads from disk: config files and checkpoints. Whatever the bytes, the
result is the parsed object or a ConfigError (one line naming the file and the problem), never
another exception. COMMLAB_FUZZ_CASES sets the cases per surface (`make fuzz`: 10,000)."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlab.config.schema import ConfigError
from commlab.config.schema import load_config
from commlab.ddp import checkpoint as ddp_checkpoint
from commlab.ddp.config import WorkerConfig
from commlab.fl.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from commlab.fl.config import load_client_config, load_controller_config
from commlab.fl.run import build_configs, parse_args

CASES = int(os.environ.get("COMMLAB_FUZZ_CASES", "1000"))  # make fuzz: 10,000
FUZZ = settings(max_examples=CASES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CONTROLLER, (CLIENT, *_) = build_configs(parse_args(["--run-id", "fuzz", "--domain-id", "5"]))
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                           | st.text(max_size=12), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


def paths(cfg: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for k, v in cfg.items():
        out.append(prefix + (k,))
        if isinstance(v, dict):
            out += paths(v, prefix + (k,))
    return out


def mutate(cfg: dict, data) -> dict:
    cfg = json.loads(json.dumps(cfg))
    for path in data.draw(st.lists(st.sampled_from(paths(cfg)), min_size=1, max_size=3)):
        node = cfg
        for k in path[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict):
            if data.draw(st.booleans()):
                node.pop(path[-1], None)
            else:
                node[path[-1]] = data.draw(JSON_VALUES)
    return cfg


@pytest.mark.parametrize("base, load", [(CONTROLLER, load_controller_config), (CLIENT, load_client_config)],
                         ids=["controller", "client"])
@FUZZ
@given(data=st.data())
def test_any_config_is_parsed_or_one_config_error(tmp_path, base, load, data):
    path = tmp_path / "node.json"
    path.write_text(json.dumps(mutate(base, data)))
    try:
        load(path)
    except ConfigError as e:
        assert "\n" not in str(e)


@FUZZ
@given(raw=st.binary(max_size=300))
def test_config_file_bytes(tmp_path, raw):
    path = tmp_path / "worker.json"
    path.write_bytes(raw)
    with pytest.raises(ConfigError):
        load_config(WorkerConfig, path)


@pytest.fixture(scope="module")
def fl_file(tmp_path_factory) -> bytes:
    d = tmp_path_factory.mktemp("fl")
    path = save_checkpoint(d, Checkpoint(3, np.arange(50, dtype=np.float32), {"momentum": np.zeros(50, np.float32)},
                                         {"run_id": "x"}))
    return path.read_bytes()


@pytest.fixture(scope="module")
def ddp_file(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("ddp") / "checkpoint-rank0.pt"
    ddp_checkpoint.save_checkpoint(path, 1, 10, torch.nn.Linear(3, 2), {"optimizer": {}})
    return path.read_bytes()


def edits():
    return st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4)


def mutated(raw: bytes, changes, cut: int | None) -> bytes:
    out = bytearray(raw if cut is None else raw[:cut % (len(raw) + 1)])
    for pos, value in changes:
        if out:
            out[pos % len(out)] = value
    return bytes(out)


@FUZZ
@given(changes=edits(), cut=st.none() | st.integers(0, 10**6))
def test_fl_checkpoint_bytes(tmp_path, fl_file, changes, cut):
    path = tmp_path / "round-000003.npz"
    raw = mutated(fl_file, changes, cut)
    path.write_bytes(raw)
    try:
        ckpt = load_checkpoint(path, 50)
    except ConfigError as e:
        assert "\n" not in str(e) and path.name in str(e)
        return
    assert raw == fl_file or np.array_equal(ckpt.weights, np.arange(50, dtype=np.float32))


@FUZZ
@given(changes=edits(), cut=st.none() | st.integers(0, 10**6))
def test_ddp_checkpoint_bytes(tmp_path, ddp_file, changes, cut):
    path = tmp_path / "checkpoint-rank0.pt"
    raw = mutated(ddp_file, changes, cut)
    path.write_bytes(raw)
    try:
        state = ddp_checkpoint.load_checkpoint(path)
    except ConfigError as e:
        assert path.name in str(e)
        return
    assert state["step"] == 10


def chunk_heads():
    """Chunk heads as a sender (or an attacker) could write them: any ids, indices, counts, sizes."""
    from commlab.dds.chunk import Chunk
    return st.builds(Chunk, sender=st.sampled_from(["a", "b", "controller"]), incarnation=st.integers(0, 3),
                     msg_id=st.integers(0, 5), index=st.integers(0, 6), count=st.integers(0, 6),
                     total_bytes=st.integers(0, 2**40), meta=st.text(max_size=20), payload=st.binary(max_size=64))


@FUZZ
@given(chunks=st.lists(chunk_heads(), max_size=30), authenticated=st.booleans())
def test_reassembly_of_any_chunk_sequence(chunks, authenticated):
    """Whatever arrives: no exception, nothing held beyond the caps, only whole messages delivered."""
    from commlab.dds.auth import make_keyrings
    from commlab.dds.opener import Opener
    from commlab.dds.chunk import decode_head, encode
    from commlab.dds.errors import MessageError
    from commlab.dds.reassembly import Reassembler
    from commlab.dds.stats import CommStats
    opener = Opener(make_keyrings("r", ["a", "b", "controller"], {"controller"})["controller"]) if authenticated else None
    r = Reassembler("t", CommStats(), timeout_s=60, sender_bytes=4096, total_bytes=8192, opener=opener)
    for c in chunks:
        data = encode(c)
        try:
            head = decode_head(data, len(data))
        except MessageError:
            continue
        payload = bytes(c.payload)[:head.payload_len]
        done = r.add(head, payload)
        assert r.held_bytes() <= 8192 and all(r.held_bytes(s) <= 4096 for s in ("a", "b", "controller"))
        if done is not None:
            assert not authenticated  # nothing here carries a valid envelope
            assert len(done.payload) == head.total_bytes
