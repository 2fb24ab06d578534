"""Checkpoints: bit-identical round trip, atomic replacement, only the newest kept; damaged files
(empty, truncated, altered, no hash, wrong size) are one ConfigError line naming the file."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from commlab.config.schema import ConfigError
from commlab.fl import checkpoint as ck
from commlab.fl.run import build_configs, parse_args
from commlab.output.checksummed import seal

ROOT = Path(__file__).resolve().parents[2]


def make(rnd: int, seed: int = 0) -> ck.Checkpoint:
    w = np.random.default_rng(seed).standard_normal(1000).astype(np.float32)
    return ck.Checkpoint(rnd, w, {"momentum": w * 0.5}, {"rounds": 10, "codec": {"name": "int8"}})


def test_round_trip_is_bit_identical(tmp_path):
    saved = make(3)
    loaded = ck.load_checkpoint(ck.save_checkpoint(tmp_path, saved))
    assert loaded.round == 3 and loaded.config == saved.config
    assert loaded.weights.tobytes() == saved.weights.tobytes()
    assert loaded.strategy_state["momentum"].tobytes() == saved.strategy_state["momentum"].tobytes()


def test_early_stop_progress_survives_a_resume(tmp_path):
    """The summed round times and last accuracy (config `stop`) go on from the checkpoint; an older
    checkpoint without them starts counting at 0; a forged value is refused naming the file."""
    saved = make(3)
    saved.progress = {"round_time_sum_s": 31.5, "last_accuracy": 0.91}
    assert ck.load_checkpoint(ck.save_checkpoint(tmp_path / "a", saved)).progress == saved.progress
    assert ck.load_checkpoint(ck.save_checkpoint(tmp_path / "b", make(3))).progress == {}
    for forged in ({"round_time_sum_s": float("nan")}, {"round_time_sum_s": -1.0}, {"last_accuracy": "high"},
                   {"elapsed": 1.0}, [1.0]):
        saved.progress = forged
        path = ck.save_checkpoint(tmp_path / "c", saved)
        with pytest.raises(ConfigError, match="round-000003.npz: not a readable checkpoint .*progress"):
            ck.load_checkpoint(path)


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
    with pytest.raises(ConfigError, match="round-000004.npz: no SHA-256 header"):
        ck.load_checkpoint(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no round-NNNNNN.npz"):
        ck.load_checkpoint(tmp_path / "empty")


def damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(raw[:len(raw) // 2])
    elif how == "truncated header":
        path.write_bytes(raw[:30])
    elif how == "flipped byte":
        path.write_bytes(raw[:-100] + bytes([raw[-100] ^ 0x01]) + raw[-99:])
    elif how == "missing hash":  # a plain .npz, as written before checksums
        path.write_bytes(raw[raw.index(b"\n") + 1:])
    elif how == "trailing bytes":
        path.write_bytes(raw + b"x")


@pytest.mark.parametrize("how, problem", [
    ("empty", "empty file (0 bytes)"),
    ("truncated", "truncated: "),
    ("truncated header", "truncated or damaged SHA-256 header"),
    ("flipped byte", "corrupt: SHA-256 of the content is"),
    ("missing hash", "no SHA-256 header"),
    ("trailing bytes", "1 unexpected bytes after the content"),
])
def test_damaged_checkpoint_is_one_line_naming_the_file(tmp_path, how, problem):
    path = ck.save_checkpoint(tmp_path, make(1))
    damage(path, how)
    with pytest.raises(ConfigError) as e:
        ck.load_checkpoint(path)
    assert str(e.value).startswith(f"{path}: {problem}") and "\n" not in str(e.value)


def test_a_hash_matching_file_that_is_no_archive_is_refused(tmp_path):
    path = tmp_path / "round-000001.npz"
    path.write_bytes(seal(b"not a zip"))
    with pytest.raises(ConfigError, match="round-000001.npz: not a readable checkpoint"):
        ck.load_checkpoint(path)


def test_wrong_model_size_names_the_file(tmp_path):
    path = ck.save_checkpoint(tmp_path, make(1))
    with pytest.raises(ConfigError, match=f"^{path}: holds 1000 weights, the model has 999$"):
        ck.load_checkpoint(path, weights_size=999)
    assert ck.load_checkpoint(path, weights_size=1000).round == 1


def test_newest_damaged_in_a_directory_is_refused_naming_the_previous(tmp_path):
    for rnd in (1, 2):
        ck.save_checkpoint(tmp_path, make(rnd, seed=rnd), keep=2)
    damage(tmp_path / "round-000002.npz", "flipped byte")
    with pytest.raises(ConfigError) as e:
        ck.load_checkpoint(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'round-000002.npz'}: corrupt")
    assert "previous checkpoint round-000001.npz is kept" in str(e.value)
    assert ck.load_checkpoint(tmp_path / "round-000001.npz").weights.tobytes() == make(1, seed=1).weights.tobytes()


def test_failed_write_keeps_every_previous_checkpoint(tmp_path, monkeypatch):
    """The write fails after the new file is complete (e.g. the read-back): nothing is deleted."""
    ck.save_checkpoint(tmp_path, make(1))

    def fail(path):
        raise ConfigError(f"{path}: corrupt")
    monkeypatch.setattr(ck, "check_checksummed", fail)
    with pytest.raises(ConfigError, match="corrupt"):
        ck.save_checkpoint(tmp_path, make(2))
    monkeypatch.undo()
    assert ck.load_checkpoint(tmp_path / "round-000001.npz").weights.tobytes() == make(1).weights.tobytes()


@pytest.mark.slow
def test_controller_with_an_empty_checkpoint_exits_2_with_one_line(tmp_path):
    cfg, _ = build_configs(parse_args(["--results-dir", str(tmp_path / "results"), "--run-id", "t",
                                       "--domain-id", "5"]))
    empty = tmp_path / "round-000003.npz"
    empty.touch()
    cfg["init_path"] = str(empty)
    conf = tmp_path / "controller.json"
    conf.write_text(json.dumps(cfg))
    out = subprocess.run([sys.executable, str(ROOT / "nodes" / "controller.py"), str(conf)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"controller: config error: init_path: {empty}: empty file (0 bytes)"
    assert not (tmp_path / "results").exists()


def test_the_check_in_blocks_finds_what_the_whole_read_finds(tmp_path):
    """save_checkpoint checks what it wrote block by block (no copy of the model in memory): a
    flipped byte and a cut file are refused with the whole read's one line."""
    from commlab.output.checksummed import check_checksummed, read_checksummed
    path = ck.save_checkpoint(tmp_path, make(1))
    check_checksummed(path)
    raw = bytearray(path.read_bytes())
    assert raw.startswith(b"commlab-sha256 ") and raw.index(b"\n") + 1 == 96  # the size padded to 15 digits
    raw[-10] ^= 1
    path.write_bytes(bytes(raw))
    for check in (check_checksummed, read_checksummed):
        with pytest.raises(ConfigError, match="corrupt: SHA-256 of the content is"):
            check(path)
    path.write_bytes(bytes(raw[:-10]))
    for check in (check_checksummed, read_checksummed):
        with pytest.raises(ConfigError, match=r"truncated: \d+ of \d+ content bytes"):
            check(path)
