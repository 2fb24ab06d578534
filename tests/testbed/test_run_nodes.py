"""commlab.testbed.backend.run_nodes: which way a run's nodes start, and how failures are reported."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlab.links.netns import NetnsError
from commlab.runs.roster import ddp_roster, fl_roster
from commlab.testbed import backend
from commlab.testbed.backend import RunFailed, run_nodes


def _never() -> Path:
    raise AssertionError("this backend must not be used")


def _manifest(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": run_dir.name, "backend": "local"}))
    return run_dir / "manifest.json"


def test_docker_failure_is_one_line_naming_the_container(tmp_path, capsys):
    def docker() -> Path:
        raise RunFailed("run r1: containers exited with errors {'client-1': 1} (log: x)\nlog tail line")
    code = run_nodes("commlab.fl.run", "docker", "lan", tmp_path, ["controller", "client-1"],
                     local=lambda: 0, netns=_never, docker=docker)
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "client-1" in err and "Traceback" not in err


def test_lan_runs_plain_local_processes(tmp_path):
    assert run_nodes("p", "local", "lan", tmp_path, ["worker-0"], local=lambda: 3, netns=_never, docker=_never) == 3


def test_shaped_profile_without_root_runs_unshaped_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(backend.os, "geteuid", lambda: 1000)
    manifest = _manifest(tmp_path / "r2")
    code = run_nodes("p", "local", "10mbit", tmp_path / "r2", ["worker-0", "worker-1"],
                     local=lambda: 0, netns=_never, docker=_never)
    assert code == 0 and "10mbit NOT applied" in capsys.readouterr().out
    links = json.loads(manifest.read_text())["link_applied"]
    assert set(links) == {"worker-0", "worker-1"}
    assert links["worker-0"]["applied"] == {} and "root" in links["worker-0"]["not_applied"]["reason"]


@pytest.mark.parametrize("netns_error, expected", [(None, 0), (NetnsError("ip netns add: denied"), 5)])
def test_shaped_profile_as_root_uses_namespaces_else_falls_back(tmp_path, monkeypatch, netns_error, expected):
    monkeypatch.setattr(backend.os, "geteuid", lambda: 0)
    _manifest(tmp_path / "r3")

    def netns() -> Path:
        if netns_error:
            raise netns_error
        return tmp_path / "r3"
    assert run_nodes("p", "local", "10mbit", tmp_path / "r3", ["controller"],
                     local=lambda: 5, netns=netns, docker=_never) == expected


def test_roster_names_programs_and_environment():
    assert [(n.name, n.script, n.env) for n in fl_roster(2)] == [
        ("controller", "controller.py", ()), ("client-0", "client.py", ()), ("client-1", "client.py", ())]
    assert [(n.name, n.script, dict(n.env)) for n in ddp_roster(2)] == [
        ("worker-0", "worker.py", {"RANK": "0", "WORLD": "2"}), ("worker-1", "worker.py", {"RANK": "1", "WORLD": "2"})]
