"""DDP workers on loopback: config errors, a 2-rank smoke run of each method, and a killed rank."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from commlab.config.schema import ConfigError
from commlab.ddp.checkpoint import load_checkpoint
from commlab.ddp.config import load_worker_config, world_and_rank
from commlab.runs.fault_points import HALT_ENV

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "nodes" / "worker.py"
EXAMPLE = ROOT / "experiments" / "worker.conf.json"


def write_config(tmp_path: Path, **changes) -> Path:
    cfg = json.loads(EXAMPLE.read_text())
    cfg.update(changes)
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(cfg))
    return path


def test_example_config_is_valid():
    assert load_worker_config(EXAMPLE).method == "dgc"


@pytest.mark.parametrize("change, message", [
    ({"bogus": 1}, "unknown key bogus"),
    ({"training": {"epochs": "two"}}, "training.epochs: expected int"),
    ({"method": "zipper"}, "method: neither dense nor a registered codec: unknown codec 'zipper'; known: .*dgc"),
    ({"method": "int8", "method_params": {"chunk": "big"}}, "method_params: int8 chunk must be an integer"),
    ({"method_params": {"warmup_unit": "rounds"}}, "method_params: dgc: warm-up unit must be 'steps' or 'epochs'"),
    ({"dgc": {"warmup_length": 1.0}}, "unknown key dgc"),  # DGC's parameters are method_params
    ({"training": {"lr": float("nan")}}, r"training\.lr: must be a finite number, got nan"),
    ({"training": {"momentum": float("inf")}}, r"training\.momentum: must be a finite number, got inf"),
    ({"method_params": {"warmup_stages": [0.25, float("-inf")]}},
     r"method_params\.warmup_stages\[1\]: must be a finite number"),
    ({"method": "int8", "method_params": {"scale": float("nan")}}, r"method_params\.scale: must be a finite"),
])
def test_bad_config_names_the_key(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_worker_config(write_config(tmp_path, **change))


def test_world_and_rank_from_env():
    assert world_and_rank({"WORLD": "3", "RANK": "2"}) == (3, 2)
    assert world_and_rank({"WORLD_SIZE": "4", "RANK": "0"}) == (4, 0)
    for env in ({}, {"WORLD": "2", "RANK": "2"}, {"WORLD": "x", "RANK": "0"}):
        with pytest.raises(ConfigError):
            world_and_rank(env)


def test_worker_exits_2_with_one_message(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("worker_node", WORKER)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    monkeypatch.setenv("WORLD", "1")
    monkeypatch.setenv("RANK", "0")
    for args, message in [([str(tmp_path / "missing.json")], "config file not found"),
                          ([str(write_config(tmp_path, method_params={"fp16_values": 1}))], "fp16_values"),
                          ([str(EXAMPLE), "extra"], "usage")]:
        assert worker.main(args) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    monkeypatch.delenv("RANK")
    assert worker.main([str(EXAMPLE)]) == 2
    assert "RANK" in capsys.readouterr().err


def run_ddp(tmp_path: Path, method: str, domain: int, *extra: str, run_id: str | None = None
            ) -> tuple[subprocess.CompletedProcess, Path]:
    run_id = run_id or method
    r = subprocess.run([sys.executable, "-m", "commlab.ddp.run", "--method", method, "--world", "2",
                        *(extra or ("--epochs", "1")), "--train-subset", "640", "--test-subset", "200", "--warmup", "4",
                        "--warmup-unit", "steps", "--summary-every", "5", "--domain-id", str(domain),
                        "--results-dir", str(tmp_path), "--run-id", run_id],
                       capture_output=True, text=True, timeout=120)
    return r, tmp_path / run_id


# Bytes a rank sends per step to its one peer, as a share of the dense vector, after warm-up.
SHARE_BELOW = {"dgc": 1 / 100, "powersgd2": 1 / 50, "int8": 0.26}


def check_two_rank_run(run: Path, method: str) -> None:
    """10 steps on 2 ranks; the same accuracy everywhere; a checkpoint after the last step;
    compressed methods send their share of the dense bytes once warmed up (the dense vector is 4
    bytes x 1,663,370 parameters per peer)."""
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["method"] == method and manifest["world"] == 2
    steps = [pd.read_csv(run / f"steps-rank{k}.csv") for k in (0, 1)]
    epochs = [pd.read_csv(run / f"epochs-rank{k}.csv") for k in (0, 1)]
    assert len(steps[0]) == len(steps[1]) == 10
    assert epochs[0]["test_accuracy"].iloc[0] == epochs[1]["test_accuracy"].iloc[0] > 0.15
    ckpt = load_checkpoint(run / "checkpoint-rank1.pt")
    assert (ckpt["epoch"], ckpt["step"]) == (0, 10)
    dense_bytes = 4 * 1_663_370
    sent = steps[0]["bytes_sent"].iloc[-3:].mean()
    assert (sent > dense_bytes) if method == "dense" else (sent < dense_bytes * SHARE_BELOW[method])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["dense", "dgc"])
def test_two_rank_smoke(tmp_path, method, domain):
    r, run = run_ddp(tmp_path, method, domain)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "comm wait" in r.stdout
    check_two_rank_run(run, method)
    if method == "dgc":  # the DGC memory is in the checkpoint and loads back (resume)
        ckpt = load_checkpoint(run / "checkpoint-rank1.pt")
        assert ckpt["exchange"]["compression"]["memory"]["velocities"].abs().sum() > 0
        r, resumed = run_ddp(tmp_path, method, domain, "--epochs", "2", "--resume-from", str(run), run_id="resumed")
        assert r.returncode == 0 and "resumed from" in r.stdout, r.stdout[-3000:]
        rows = pd.read_csv(resumed / "steps-rank0.csv")
        assert rows["step"].tolist() == list(range(10, 20)) and set(rows["epoch"]) == {1}
        assert pd.read_csv(resumed / "epochs-rank1.csv")["epoch"].tolist() == [1]
        # One flipped byte in rank 1's checkpoint: it names the file, rank 0 refuses to resume alone.
        raw = bytearray((run / "checkpoint-rank1.pt").read_bytes())
        raw[-100] ^= 1
        (run / "checkpoint-rank1.pt").write_bytes(raw)
        refused, _ = run_ddp(tmp_path, method, domain, "--epochs", "2", "--resume-from", str(run), run_id="refused")
        assert refused.returncode != 0 and "Traceback" not in refused.stdout, refused.stdout[-3000:]
        assert f"worker 1: config error: {run / 'checkpoint-rank1.pt'}: corrupt: SHA-256" in refused.stdout
        assert ("worker 0: config error: ranks disagree on where to resume: rank 0 epoch 0 step 10, "
                "rank 1 unusable checkpoint") in refused.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)  # the first test to ask for the session's peer benchmark smoke run makes it
@pytest.mark.parametrize("method", ["int8", "powersgd2"])
def test_two_rank_smoke_of_the_peer_benchmark(peers_ddp_smoke, method):
    """The same checks on the peer benchmark's 2-rank runs of these methods (the same settings:
    640 samples, 200 test samples, seed 0), made once a session (tests/peer_benches.py)."""
    check_two_rank_run(peers_ddp_smoke.run_dir(f"dds-{method}"), method)


@pytest.mark.slow
def test_killed_worker_makes_the_others_fail_naming_it(tmp_path, domain):
    # Rank 2 halts before backward of step 5 (commlab.runs.fault_points) and is killed there: the others
    # are in (or entering) that step's collective. The collective timeout is far above the 2 s
    # lease and the 10 s return window, so the death is reported as PeerLost ("not back within
    # 10s") however slowly the test reacts. Dense: the ring overlaps backward in a thread of its
    # own, whose PeerLost must still end the worker with its one line.
    cfg = write_config(tmp_path, results_dir=str(tmp_path), run_id="kill", summary_every=1000,
                       method="dense", method_params={},
                       dds={"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]},
                       dataset={"name": "mnist", "train_subset": 6000, "test_subset": 200},
                       collective_timeout_s=60.0, peer_return_s=10.0)
    logs = [tmp_path / f"rank{r}.log" for r in range(3)]
    env = {k: v for k, v in os.environ.items() if k != HALT_ENV}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(cfg)], text=True,
                              env={**env, "WORLD": "3", "RANK": str(r), "PYTHONUNBUFFERED": "1",
                                   **({HALT_ENV: "before_exchange@5"} if r == 2 else {})},
                              stdout=open(logs[r], "w"), stderr=subprocess.STDOUT) for r in range(3)]
    try:
        deadline = time.monotonic() + 120
        while "HALTED at before_exchange@5" not in logs[2].read_text():
            assert procs[2].poll() is None and time.monotonic() < deadline, logs[2].read_text()[-2000:]
            time.sleep(0.1)
        procs[2].send_signal(signal.SIGKILL)
        for p in procs[:2]:
            p.wait(timeout=90)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, log in zip(procs[:2], logs):
        out = log.read_text()
        assert p.returncode == 1, out[-2000:]
        assert "PeerLost: rank 2 lost" in out and "its node is gone" in out and "Traceback" not in out
    assert len(pd.read_csv(tmp_path / "kill" / "steps-rank0.csv")) == 5  # steps 0-4 done, step 5 never was
    assert json.loads((tmp_path / "kill" / "manifest.json").read_text())["status"] == "failed"
