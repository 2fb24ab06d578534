"""RunWriter: manifest and CSV tables that survive a crash, and the applied link records."""
import csv
import json

import pytest

from commlab.output.run_folder import RunWriter, peak_memory_line, write_atomic, write_transport_totals


def test_rows_are_on_disk_before_close_and_manifest_records_links(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMLAB_GIT_COMMIT", "0123abc")  # as a container is told its commit
    run = RunWriter(tmp_path, "run-1", {"kind": "fl", "link_profile": "10mbit"})
    table = run.table("rounds", ["round", "bytes_up"])
    table.append({"round": 1, "bytes_up": 123})
    # A reader (or a crash) between rows sees every finished row.
    with open(run.dir / "rounds.csv") as f:
        assert list(csv.DictReader(f)) == [{"round": "1", "bytes_up": "123"}]
    (run.dir / "link-client-0.json").write_text(json.dumps({"applied": {"rate": "10mbit"}}))
    (run.dir / "link-client-1.json").write_text("{truncated")
    run.close()
    manifest = json.loads((run.dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["kind"] == "fl" and manifest["git_commit"] == "0123abc"
    assert manifest["link_applied"]["client-0"] == {"applied": {"rate": "10mbit"}}
    assert "unreadable link-client-1.json" in manifest["link_applied"]["client-1"]["error"]


def test_loopback_run_has_no_link_record_and_rows_need_every_column(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMLAB_GIT_COMMIT", "0123abc")
    run = RunWriter(tmp_path, "run-2", {"kind": "ddp"})
    table = run.table("steps", ["step", "bytes_sent"])
    with pytest.raises(KeyError, match="bytes_sent"):
        table.append({"step": 1})
    run.close(status="failed: PeerLost")
    manifest = json.loads((run.dir / "manifest.json").read_text())
    assert "link_applied" not in manifest and manifest["status"] == "failed: PeerLost"


def test_write_atomic_replaces_whole_or_not_at_all(tmp_path):
    path = tmp_path / "state.bin"
    write_atomic(path, b"old")
    write_atomic(path, lambda f: f.write(b"new, through a writer"), mode=0o640)
    assert path.read_bytes() == b"new, through a writer" and path.stat().st_mode & 0o777 == 0o640

    def crash(f):
        f.write(b"half")
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, crash)
    assert path.read_bytes() == b"new, through a writer"
    assert [p.name for p in tmp_path.iterdir()] == ["state.bin"]  # no temporary file left behind


def test_every_node_records_its_peak_memory_and_the_launcher_sums_them(tmp_path):
    import resource
    (tmp_path / "r1").mkdir()
    write_transport_totals(tmp_path, "r1", "controller", {"bytes_sent": 5})
    doc = json.loads((tmp_path / "r1" / "transport-controller.json").read_text())
    assert doc["bytes_sent"] == 5
    assert doc["peak_rss_bytes"] == pytest.approx(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, rel=0.5)
    (tmp_path / "r1" / "transport-client-0.json").write_text(json.dumps({"peak_rss_bytes": 3 * 2**30}))
    (tmp_path / "r1" / "transport-client-1.json").write_text("{}")  # from before the field: left out
    line = peak_memory_line(tmp_path / "r1")
    assert line.startswith("peak memory (max RSS): client-0 3072 MiB, controller ")
    assert line.endswith(f"all 2 nodes together at most {(3 * 2**30 + doc['peak_rss_bytes']) / 2**30:.2f} GiB")
    assert peak_memory_line(tmp_path) is None
