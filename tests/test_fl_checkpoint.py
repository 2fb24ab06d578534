"""Checkpoints: bit-identical round trip, atomic replacement, only the newest kept."""
import numpy as np
import pytest

from commlab.fl import checkpoint as ck


def make(rnd: int, seed: int = 0) -> ck.Checkpoint:
    w = np.random.default_rng(seed).standard_normal(1000).astype(np.float32)
    return ck.Checkpoint(rnd, w, {"momentum": w * 0.5}, {"rounds": 10, "codec": {"name": "int8"}})


def test_round_trip_is_bit_identical(tmp_path):
    saved = make(3)
    loaded = ck.load_checkpoint(ck.save_checkpoint(tmp_path, saved))
    assert loaded.round == 3 and loaded.config == saved.config
    assert loaded.weights.tobytes() == saved.weights.tobytes()
    assert loaded.strategy_state["momentum"].tobytes() == saved.strategy_state["momentum"].tobytes()


def test_directory_resumes_from_newest_and_keeps_latest(tmp_path):
    for rnd in (1, 2, 3):
        ck.save_checkpoint(tmp_path, make(rnd, seed=rnd), keep=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["round-000002.npz", "round-000003.npz"]
    assert ck.load_checkpoint(tmp_path).round == 3


def test_crash_while_writing_leaves_previous_checkpoint(tmp_path, monkeypatch):
    ck.save_checkpoint(tmp_path, make(1))

    def crash(f, **arrays):
        f.write(b"PK\x03\x04half a zip")
        raise OSError("disk full")
    monkeypatch.setattr(ck.np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(tmp_path, make(2))
    monkeypatch.undo()
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["round-000001.npz"]
    assert ck.load_checkpoint(tmp_path).weights.tobytes() == make(1).weights.tobytes()


def test_unreadable_checkpoint_names_the_file(tmp_path):
    bad = tmp_path / "round-000004.npz"
    bad.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="round-000004.npz: not a readable checkpoint"):
        ck.load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="no round-NNNNNN.npz"):
        ck.load_checkpoint(tmp_path / "empty") if (tmp_path / "empty").mkdir() is None else None
