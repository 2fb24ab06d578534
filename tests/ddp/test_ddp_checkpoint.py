"""DDP checkpoints: hash checked before torch.load, the previous checkpoint kept across a failed
write, a wrong model named, and the ranks' agreement on the step they resume from."""
from __future__ import annotations

import pytest
import torch

from commlab.config.schema import ConfigError
from commlab.ddp import checkpoint as ck
from commlab.output import run_folder


class Exchange:
    """Stands in for DenseAllreduce & co.: only the state round trip matters here."""

    def __init__(self):
        self.state = None

    def load_state_dict(self, state: dict) -> None:
        self.state = state


def model(inputs: int = 4) -> torch.nn.Module:
    torch.manual_seed(inputs)
    return torch.nn.Linear(inputs, 2)


def save(path, epoch: int, m: torch.nn.Module | None = None) -> None:
    ck.save_checkpoint(path, epoch, 10 * (epoch + 1), m or model(), {"optimizer": {"epoch": epoch}})


def test_round_trip_and_previous_kept(tmp_path):
    path = tmp_path / "checkpoint-rank0.pt"
    save(path, 0)
    assert not ck.previous_path(path).exists()
    save(path, 1)
    assert ck.previous_path(path).name == "checkpoint-rank0.prev.pt"
    assert (ck.load_checkpoint(path)["epoch"], ck.load_checkpoint(ck.previous_path(path))["epoch"]) == (1, 0)
    m, ex = model(), Exchange()
    with torch.no_grad():
        m.weight.zero_()
    assert ck.restore_checkpoint(path, m, ex) == (1, 20)
    assert torch.equal(m.weight, model().weight) and ex.state == {"optimizer": {"epoch": 1}}


def damage(path, how: str) -> None:
    raw = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": raw[:len(raw) // 2],
                      "flipped byte": raw[:-50] + bytes([raw[-50] ^ 0x80]) + raw[-49:],
                      "missing hash": raw[raw.index(b"\n") + 1:]}[how])


@pytest.mark.parametrize("how, problem", [
    ("empty", "empty file (0 bytes)"),
    ("truncated", "truncated: "),
    ("flipped byte", "corrupt: SHA-256 of the content is"),
    ("missing hash", "no SHA-256 header"),
])
def test_damaged_checkpoint_is_refused_before_torch_load(tmp_path, monkeypatch, how, problem):
    path = tmp_path / "checkpoint-rank1.pt"
    save(path, 0)
    damage(path, how)

    def must_not_unpickle(*args, **kwargs):
        raise AssertionError("torch.load reached with an unverified file")
    monkeypatch.setattr(ck.torch, "load", must_not_unpickle)
    with pytest.raises(ConfigError) as e:
        ck.load_checkpoint(path)
    assert str(e.value).startswith(f"{path}: {problem}") and "\n" not in str(e.value)


def test_missing_checkpoint_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'checkpoint-rank0.pt'}: not found$"):
        ck.load_checkpoint(tmp_path / "checkpoint-rank0.pt")


def test_wrong_model_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "checkpoint-rank0.pt"
    save(path, 0)
    with pytest.raises(ConfigError) as e:
        ck.restore_checkpoint(path, model(5), Exchange())
    text = str(e.value)
    assert text.startswith(f"{path}: does not fit this run (RuntimeError: Error(s) in loading state_dict")
    assert "\n" not in text and len(text) < 400


def test_damaged_checkpoint_names_the_previous_one(tmp_path):
    path = tmp_path / "checkpoint-rank0.pt"
    save(path, 0)
    save(path, 1)
    damage(path, "flipped byte")
    with pytest.raises(ConfigError) as e:
        ck.restore_checkpoint(path, model(), Exchange())
    assert str(e.value).startswith(f"{path}: corrupt: ")
    assert str(e.value).endswith("; the previous checkpoint is kept in checkpoint-rank0.prev.pt (rename it to "
                                 "checkpoint-rank0.pt to resume from it)")
    ck.previous_path(path).replace(path)
    assert ck.restore_checkpoint(path, model(), Exchange()) == (0, 10)


# Where the write of epoch 2 fails -> the epoch then in checkpoint-rank0.prev.pt. Each write_atomic
# fsyncs its file, then the folder: 1st fsync = the .prev copy, 3rd = the new checkpoint.
@pytest.mark.parametrize("where, previous", [("serialising", 1), ("fsync 1", 0), ("fsync 3", 1)])
def test_failed_write_keeps_the_previous_checkpoints(tmp_path, monkeypatch, where, previous):
    path = tmp_path / "checkpoint-rank0.pt"
    save(path, 0)
    save(path, 1)
    real_fsync, calls = run_folder.os.fsync, []

    def half_then_fail(obj, f):
        f.write(b"PK\x03\x04half")
        raise OSError("disk full")

    def fsync(fd):
        calls.append(fd)
        if len(calls) == int(where.split()[-1]):
            raise OSError("disk full")
        real_fsync(fd)
    if where == "serialising":
        monkeypatch.setattr(ck.torch, "save", half_then_fail)
    else:
        monkeypatch.setattr(run_folder.os, "fsync", fsync)
    with pytest.raises(OSError, match="disk full"):
        save(path, 2)
    monkeypatch.undo()
    assert ck.load_checkpoint(path)["epoch"] == 1
    assert ck.load_checkpoint(ck.previous_path(path))["epoch"] == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-rank0.prev.pt", "checkpoint-rank0.pt"]


def test_damaged_current_is_not_copied_over_the_previous(tmp_path):
    path = tmp_path / "checkpoint-rank0.pt"
    save(path, 0)
    save(path, 1)
    damage(path, "flipped byte")
    save(path, 2)
    assert ck.load_checkpoint(ck.previous_path(path))["epoch"] == 0
    assert ck.load_checkpoint(path)["epoch"] == 2


def test_ranks_must_agree_on_the_resume_point():
    ck.check_resume_points([(1, 20), (1, 20), (1, 20)])
    ck.check_resume_points([ck.NO_RESUME, ck.NO_RESUME])
    with pytest.raises(ConfigError, match="^ranks disagree on where to resume: rank 0 epoch 1 step 20, "
                                          "rank 1 epoch 0 step 10$"):
        ck.check_resume_points([(1, 20), (0, 10)])
    with pytest.raises(ConfigError, match="rank 0 no checkpoint, rank 1 epoch 0 step 10"):
        ck.check_resume_points([ck.NO_RESUME, (0, 10)])
    with pytest.raises(ConfigError, match="rank 0 unusable checkpoint, rank 1 unusable checkpoint"):
        ck.check_resume_points([ck.UNUSABLE, ck.UNUSABLE])


class Group:
    """Group.allgather as every rank would see it: the packed points of all ranks."""

    def __init__(self, points):
        self.points, self.keys = points, []

    def allgather(self, key: str, data: bytes) -> list[bytes]:
        self.keys.append(key)
        return [ck._POINT.pack(*p) for p in self.points]


def test_agreement_goes_through_one_allgather_and_raises_own_problem_first():
    group = Group([(0, 10), (0, 10)])
    ck.agree_on_resume_point(group, (0, 10))
    assert group.keys == ["resume-point"]
    with pytest.raises(ConfigError, match="rank 1 epoch 1 step 20"):
        ck.agree_on_resume_point(Group([(0, 10), (1, 20)]), (0, 10))
    own = ConfigError("checkpoint-rank1.pt: empty file (0 bytes)")
    with pytest.raises(ConfigError, match="empty file"):
        ck.agree_on_resume_point(Group([(0, 10), ck.UNUSABLE]), ck.UNUSABLE, own)
