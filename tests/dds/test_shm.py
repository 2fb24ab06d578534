"""Shared-memory slots for ring blocks (commlab.dds.shm): a block read where the writer left it,
slots freed for the next, inline when none is free; every place from a message checked before a
byte is read; who shares /dev/shm; files of dead processes swept."""
from __future__ import annotations

import os

import numpy as np
import pytest

from commlab.dds.shm import (DATA_OFFSET, HEADER, MAGIC, SHM_DIR, Probe, ShmError, SlotReader, SlotWriter,
                             shares_memory, sweep_dead_files)

pytestmark = pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm on this machine")


@pytest.fixture
def slots():
    writer, reader = SlotWriter(slot_bytes=4096, slots=3), SlotReader()
    yield writer, reader
    reader.close()
    writer.close()


def test_a_block_is_read_where_it_was_written_and_its_slot_serves_again_once_freed(slots):
    writer, reader = slots
    data = np.arange(1000, dtype=np.float32).tobytes()
    place = writer.put(data)
    assert place is not None and place[1:] == (0, len(data))
    block = reader.take(list(place))
    assert bytes(block.view) == data
    assert writer.put(b"x" * 10)[1] == 1  # slot 0 still lent
    block.release()
    block.release()  # a second release frees nothing more
    assert writer.put(b"y" * 10)[1] == 0
    assert oct(os.stat(writer.path).st_mode & 0o777) == "0o600"


def test_with_every_slot_lent_or_a_block_too_big_the_block_goes_inline(slots):
    writer, reader = slots
    assert writer.put(bytes(4097)) is None
    lent = [reader.take(list(writer.put(bytes([i]) * 100))) for i in range(3)]
    assert writer.put(b"z") is None
    lent[1].release()
    assert writer.put(b"z")[1] == 1


@pytest.mark.parametrize("place, problem", [
    ("commlab-shm-1-" + "0" * 32, "is not \\[file, slot, length\\]"),
    (["commlab-shm-1-" + "0" * 32, 0], "is not \\[file, slot, length\\]"),
    (["commlab-shm-1-" + "0" * 32, True, 1], "is not \\[file, slot, length\\]"),
    (["../../etc/passwd", 0, 1], "is no segment name"),
    (["commlab-shm-1-" + "0" * 32, 0, 1], "No such file"),
])
def test_a_place_that_names_no_usable_segment_is_refused(place, problem):
    with pytest.raises(ShmError, match=problem):
        SlotReader().take(place)


def test_a_slot_or_length_outside_the_segment_is_refused(slots):
    writer, reader = slots
    with pytest.raises(ShmError, match="slot 3 of 3"):
        reader.take([writer.name, 3, 1])
    with pytest.raises(ShmError, match="slot -1 of 3"):
        reader.take([writer.name, -1, 1])
    with pytest.raises(ShmError, match="a block of 4097 bytes in slots of 4096"):
        reader.take([writer.name, 0, 4097])


def test_a_file_that_is_no_segment_is_refused():
    name = f"commlab-shm-{os.getpid()}-{'ab' * 16}"
    path = SHM_DIR / name
    try:
        path.write_bytes(HEADER.pack(MAGIC, 2, 4096))  # says two slots of 4096, holds none
        with pytest.raises(ShmError, match="not a segment"):
            SlotReader().take([name, 0, 1])
        path.write_bytes(HEADER.pack(b"NOTSHM\0\0", 1, 1).ljust(DATA_OFFSET + 1, b"\0"))
        with pytest.raises(ShmError, match="not a segment"):
            SlotReader().take([name, 0, 1])
    finally:
        path.unlink(missing_ok=True)


def test_a_peer_shares_memory_when_its_probe_holds_the_announced_nonce():
    probe = Probe()
    try:
        info = probe.info()
        assert shares_memory(info)
        assert not shares_memory({**info, "nonce": "0" * 32})
        assert not shares_memory({**info, "probe": f"commlab-probe-1-{'0' * 32}"})  # not on this host
        assert not shares_memory({"probe": "../x", "nonce": info["nonce"]})
        assert not shares_memory(None) and not shares_memory("probe")
    finally:
        probe.close()
    assert not (SHM_DIR / info["probe"]).exists()


def _unused_pid() -> int:
    """A pid no process has now (from the top of the range, where pids are rarely handed out)."""
    pid = int(open("/proc/sys/kernel/pid_max").read()) - 1
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_files_of_a_process_that_died_are_swept_and_a_live_ones_kept():
    dead = _unused_pid()
    stale = [SHM_DIR / f"commlab-probe-{dead}-{'cd' * 16}", SHM_DIR / f"commlab-shm-{dead}-{'ef' * 16}"]
    for path in stale:
        path.write_bytes(b"left by a killed node")
    live = SlotWriter(slot_bytes=64, slots=1)
    try:
        sweep_dead_files()
        assert not any(p.exists() for p in stale)
        assert live.path.exists()
    finally:
        live.close()
        for path in stale:
            path.unlink(missing_ok=True)


def test_a_slot_whose_pages_dev_shm_cannot_give_is_no_slot(slots, monkeypatch):
    """Writing through the mapping to a page a full /dev/shm cannot give would kill the process:
    the pages are taken first, and a slot that gets none leaves its block inline."""
    writer, reader = slots

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("commlab.dds.shm.os.posix_fallocate", full)
    assert writer.put(b"block") is None
    monkeypatch.undo()
    place = writer.put(b"block")
    assert place is not None and bytes(reader.take(list(place)).view) == b"block"
