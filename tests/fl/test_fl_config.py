"""FL config validation: one clear message naming the bad key or file, exit code 2, no output."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commlab.config.schema import ConfigError, DdsSection, from_dict, to_dict
from commlab.fl.config import ClientConfig, ControllerConfig, load_client_config, load_controller_config
from commlab.fl.run import build_configs, parse_args

ROOT = Path(__file__).resolve().parents[2]


def controller_dict(tmp_path: Path) -> dict:
    cfg, _ = build_configs(parse_args(["--results-dir", str(tmp_path / "results"), "--run-id", "t", "--domain-id", "5"]))
    return cfg


def test_example_configs_are_valid():
    c = load_controller_config(ROOT / "experiments" / "controller.conf.json")
    k = load_client_config(ROOT / "experiments" / "client.conf.json")
    assert c.training.samples_per_round == 6000 and c.min_clients == 1
    assert k.partition.scheme == "dirichlet" and k.partition.alpha == 0.5


def test_memory_phases_is_off_unless_asked_for_and_then_on_for_every_node(tmp_path):
    base = ["--results-dir", str(tmp_path / "results"), "--run-id", "t", "--domain-id", "5"]
    for argv, expected in ((base, False), (base + ["--memory-phases"], True)):
        ctl, clients = build_configs(parse_args(argv))
        assert ctl["memory_phases"] is expected and all(c["memory_phases"] is expected for c in clients)


def test_built_configs_round_trip(tmp_path):
    cfg = controller_dict(tmp_path)
    assert to_dict(from_dict(ControllerConfig, cfg)) == cfg


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(roundz=3), "unknown key roundz"),
    (lambda c: c["training"].update(learning_rate=0.1), "unknown key training.learning_rate"),
    (lambda c: c.update(rounds="10"), "rounds: expected int, got str"),
    (lambda c: c.update(rounds=True), "rounds: expected int, got bool"),
    (lambda c: c["dds"].update(peers="127.0.0.1"), "dds.peers: expected a list"),
    (lambda c: c["training"].update(lr=-1.0), "training.lr: must be > 0"),
    (lambda c: c["training"].update(lr_decay=0.0), "training.lr_decay: must be in (0, 1], got 0.0"),
    (lambda c: c["training"].update(lr_decay=1.5), "training.lr_decay: must be in (0, 1], got 1.5"),
    (lambda c: c.pop("expected_clients"), "missing key expected_clients"),
    (lambda c: c.update(min_clients=3, expected_clients=2), "min_clients: 3 > expected_clients 2"),
    (lambda c: c.update(init_path="/no/such/checkpoint.npz"), "init_path: file not found: /no/such/checkpoint.npz"),
    (lambda c: c["partition"].update(scheme="zipf"), "partition.scheme: unknown partition scheme 'zipf'"),
    (lambda c: c["training"].update(lr=float("nan")), "training.lr: must be a finite number, got nan"),
    (lambda c: c["training"].update(lr=float("inf")), "training.lr: must be a finite number, got inf"),
    (lambda c: c["training"].update(lr=float("-inf")), "training.lr: must be a finite number, got -inf"),
    (lambda c: c.update(round_deadline_s=float("nan")), "round_deadline_s: must be a finite number"),
    (lambda c: c["dds"].update(lease_s=float("inf")), "dds.lease_s: must be a finite number"),  # float | None
    (lambda c: c["stop"].update(accuracy=97), "stop.accuracy: must be in (0, 1], got 97"),
    (lambda c: c["stop"].update(round_time_budget_s=0), "stop.round_time_budget_s: must be > 0"),
    (lambda c: c["codec"].update(params={"ratio": [0.1, float("nan")]}),
     "codec.params.ratio[1]: must be a finite number"),
])
def test_controller_config_errors_name_the_key(tmp_path, mutate, message):
    cfg = controller_dict(tmp_path)
    mutate(cfg)
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        from_dict(ControllerConfig, cfg)


def test_client_id_must_be_in_range():
    with pytest.raises(ConfigError, match="client_id: must be in 0..1, got 2"):
        from_dict(ClientConfig, {"run_id": "r", "results_dir": "x", "dds": {"domain_id": 1},
                                 "client_id": 2, "num_clients": 2})


def test_nan_in_json_is_refused_naming_the_key(tmp_path):
    """Python's json reads NaN, Infinity and 1e999 (= inf): each is one line naming the key."""
    cfg = json.dumps(controller_dict(tmp_path))
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        path = tmp_path / "c.json"
        path.write_text(cfg.replace('"lr": 0.05', f'"lr": {literal}'))
        with pytest.raises(ConfigError, match=f"^{path}: training.lr: must be a finite number, got -?(nan|inf)$"):
            load_controller_config(path)


def test_missing_interface_is_named_at_node_start():
    """Not at load (a launcher on the host parses configs for containers whose eth0 it lacks)."""
    section = from_dict(ControllerConfig, {"run_id": "r", "results_dir": "x", "checkpoint_dir": "y",
                                           "dds": {"domain_id": 1, "interface": "eth9"}, "rounds": 1,
                                           "expected_clients": 1}).dds
    with pytest.raises(ConfigError, match=r"^dds\.interface: no interface 'eth9' on this machine \(have: lo\b"):
        section.check_host()
    DdsSection(domain_id=1, interface="lo").check_host()


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_controller_config(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json: invalid JSON"):
        load_client_config(bad)


@pytest.mark.slow
@pytest.mark.parametrize("node, mutate, message", [
    ("controller.py", lambda c: c.update(round_deadline=3), "unknown key round_deadline"),
    ("controller.py", lambda c: c["codec"].update(name="gzip"), "codec: unknown codec 'gzip'"),
    ("client.py", lambda c: c["dataset"].update(root="/no/such/dir"), "dataset.root: file not found: /no/such/dir"),
    ("client.py", lambda c: c["dds"].update(interface="eth9"), "dds.interface: no interface 'eth9' on this machine"),
])
def test_node_exits_2_before_writing_anything(tmp_path, node, mutate, message):
    ctl, clients = build_configs(parse_args(["--results-dir", str(tmp_path / "results"), "--run-id", "t",
                                             "--domain-id", "5"]))
    cfg = ctl if node == "controller.py" else clients[0]
    mutate(cfg)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    out = subprocess.run([sys.executable, str(ROOT / "nodes" / node), str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "results").exists()
