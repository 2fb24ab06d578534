"""A node's announcement is updated by several threads at once (each reader thread announces the
writers its reader matched); its writer keeps only the last sample written, so that sample must
carry the newest info, whatever the interleaving."""
import json
import threading

from commlab.dds.announce import Announcer

HANG_GUARD_S = 60.0


class WatchedLock:
    """A lock that says (sets `contended`) when a thread has to wait for it."""

    def __init__(self, contended: threading.Event):
        self._lock, self.contended = threading.Lock(), contended

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()

    def __exit__(self, *exc) -> None:
        self._lock.release()


class RecordingWriter:
    """Records the announcements written. While the first is being written, another thread
    announces a second match and is let through as far as the announcer lets it."""

    def __init__(self, announcer: Announcer, progress: threading.Event):
        self.announcer, self.progress = announcer, progress
        self.written: list[dict] = []
        self.second: threading.Thread | None = None

    def write(self, sample) -> None:
        if self.second is None:
            self.second = threading.Thread(target=self._second_match)
            self.second.start()
            assert self.progress.wait(HANG_GUARD_S), "the second update neither ran nor waited"
        self.written.append(json.loads(sample.info))

    def _second_match(self) -> None:
        self.announcer.set_matched_writers("coll_ddp_ring1", {"P-worker-1"})
        self.progress.set()


def test_the_announcement_written_last_carries_every_match():
    """Before: the first update was sealed under the lock and written after it, so the second
    update's sample could be written first and the stale one last; peers then waited for a match
    it lacked until their barrier timed out (both DDP ranks: the one missing the match in its
    first phase, the other in its second, for a barrier message never sent)."""
    progress = threading.Event()
    announcer = object.__new__(Announcer)  # its publishing alone: no DDS participant
    announcer.name, announcer.participant_id, announcer.incarnation, announcer.sealer = "worker-0", "P-worker-0", 1, None
    announcer.info = {"subscribes": [], "groups": {"ddp": 0}, "matched": {}, "returned": {}, "done": []}
    announcer.announced, announcer._lock = True, WatchedLock(progress)
    announcer._writer = writer = RecordingWriter(announcer, progress)
    announcer.set_matched_writers("coll_ddp", {"P-worker-1"})
    writer.second.join(HANG_GUARD_S)
    assert not writer.second.is_alive()
    assert writer.written[-1]["matched"] == {"coll_ddp": ["P-worker-1"], "coll_ddp_ring1": ["P-worker-1"]}
