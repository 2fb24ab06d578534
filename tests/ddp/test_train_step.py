"""The local training step chosen by config (`train_step: "module:function"`, commlab.models.train_step):
the default is the plain cross-entropy, a step from a file outside the library is loaded by path,
bad specs are one ConfigError line naming `train_step`, and a real 2-rank DDP run records it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from torch.nn import functional as F

from commlab.config.schema import ConfigError, from_dict
from commlab.ddp.config import load_worker_config
from commlab.fl.config import ClientConfig, load_client_config, load_controller_config
from commlab.fl.local_training import local_update
from commlab.fl.strategy import FitIns
from commlab.models import build_model, flatten_params
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, load_train_step
from commlab.models.train_step import batch_loss, cross_entropy_step
from commlab.runs.seeds import SeedTree

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "label_smoothing_step.py"
SMOOTHING = f"{FIXTURE}:step"


@pytest.fixture(scope="module")
def batch():
    """A fixed batch and a freshly initialised model (same weights every time)."""
    g = torch.Generator().manual_seed(3)
    x = torch.rand(16, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    return build_model("mnist_cnn", seed=0), x, y


def test_default_step_is_todays_loss(batch):
    model, x, y = batch
    step = load_train_step(DEFAULT_TRAIN_STEP)
    assert step is cross_entropy_step
    assert torch.equal(step(model, x, y), F.cross_entropy(model(x), y))


def test_step_from_a_file_outside_the_library_gives_another_loss(batch, monkeypatch):
    model, x, y = batch
    step = load_train_step(SMOOTHING)
    loss = step(model, x, y)
    assert torch.equal(loss, F.cross_entropy(model(x), y, label_smoothing=0.1))
    assert not torch.isclose(loss, cross_entropy_step(model, x, y), rtol=0, atol=1e-6)
    monkeypatch.chdir(ROOT)  # relative paths start at the working directory; loaded once per process
    assert load_train_step("tests/fixtures/label_smoothing_step.py:step") is step


@pytest.mark.parametrize("spec, message", [
    ("commlab.models.train_step", "train_step: expected 'package.module:function' or 'path/to/file.py:function', "
                           "got 'commlab.models.train_step'"),
    ("commlab.models.train_step:", "train_step: expected 'package.module:function'"),
    ("no_such_module_xyz:step", "train_step: module not found: no_such_module_xyz"),
    ("commlab.no_such_module:step", "train_step: module not found: commlab.no_such_module"),
    ("tests/fixtures/no_such_step.py:step", "train_step: file not found: "),
    ("/no/such/dir/step.py:step", "train_step: file not found: /no/such/dir/step.py"),
    ("commlab.models.train_step:no_such_function", "train_step: commlab.models.train_step has no function 'no_such_function'"),
    (f"{FIXTURE}:no_such_function", f"train_step: {FIXTURE} has no function 'no_such_function'"),
    (f"{FIXTURE}:NOT_A_FUNCTION", f"train_step: {FIXTURE}:NOT_A_FUNCTION is not callable: it is int 3"),
    ("commlab.config.train_step_spec:DEFAULT_TRAIN_STEP",
     "train_step: commlab.config.train_step_spec:DEFAULT_TRAIN_STEP is not callable"),
    ("commlab.models.train_step:batch_loss", "train_step: commlab.models.train_step:batch_loss must take (model, x, y)"),
    ("my-steps:step", "train_step: 'my-steps' is neither a module name nor a .py file"),
])
def test_bad_specs_are_one_config_error_line(spec, message):
    with pytest.raises(ConfigError) as e:
        load_train_step(spec)
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_a_file_that_fails_to_load_is_one_line(tmp_path):
    broken = tmp_path / "broken_step.py"
    broken.write_text("import no_such_module_xyz\n\ndef step(model, x, y):\n    return 0\n")
    with pytest.raises(ConfigError, match=r"^train_step: loading .*broken_step\.py failed: "
                                          r"ModuleNotFoundError: No module named 'no_such_module_xyz'$"):
        load_train_step(f"{broken}:step")


def test_a_step_must_return_the_scalar_loss(batch):
    model, x, y = batch
    with pytest.raises(TypeError, match="returned a tensor of shape \\(16,\\), expected the scalar loss"):
        batch_loss(lambda m, xb, yb: F.cross_entropy(m(xb), yb, reduction="none"), model, x, y)
    with pytest.raises(TypeError, match="returned float"):
        batch_loss(lambda m, xb, yb: 1.0, model, x, y)


def client_dict(**changes) -> dict:
    return {"run_id": "r", "results_dir": "x", "dds": {"domain_id": 1}, "client_id": 0, "num_clients": 2,
            **changes}


def test_configs_default_to_todays_step_and_accept_a_file_step():
    assert from_dict(ClientConfig, client_dict()).train_step == DEFAULT_TRAIN_STEP
    assert from_dict(ClientConfig, client_dict(train_step=SMOOTHING)).train_step == SMOOTHING
    assert load_worker_config(ROOT / "experiments" / "worker.conf.json").train_step == DEFAULT_TRAIN_STEP
    assert load_controller_config(ROOT / "experiments" / "controller.conf.json").train_step == DEFAULT_TRAIN_STEP


@pytest.mark.parametrize("load, example", [
    (load_client_config, "client.conf.json"),
    (load_controller_config, "controller.conf.json"),
    (load_worker_config, "worker.conf.json"),
])
def test_config_file_with_a_bad_train_step_names_the_key(tmp_path, load, example):
    cfg = json.loads((ROOT / "experiments" / example).read_text())
    for bad, message in [("no_such_module_xyz:step", "train_step: module not found: no_such_module_xyz"),
                         (3, "train_step: expected str, got int 3")]:
        cfg["train_step"] = bad
        path = tmp_path / example
        path.write_text(json.dumps(cfg))
        with pytest.raises(ConfigError) as e:
            load(path)
        assert str(e.value) == f"{path}: {message}"


def test_launchers_pass_the_step_absolute_and_refuse_a_bad_one(tmp_path, monkeypatch):
    from commlab.ddp.run import build_config, parse_args as ddp_args
    from commlab.fl.run import build_configs, parse_args as fl_args
    monkeypatch.chdir(ROOT)
    common = ["--results-dir", str(tmp_path), "--run-id", "t", "--domain-id", "5"]
    relative = ["--train-step", "tests/fixtures/label_smoothing_step.py:step"]
    controller, clients = build_configs(fl_args(common + relative))
    assert controller["train_step"] == SMOOTHING and [c["train_step"] for c in clients] == [SMOOTHING] * 2
    assert build_config(ddp_args(common + relative))["train_step"] == SMOOTHING
    assert build_config(ddp_args(common))["train_step"] == DEFAULT_TRAIN_STEP
    for build, args in [(lambda a: build_configs(fl_args(a)), common), (lambda a: build_config(ddp_args(a)), common)]:
        with pytest.raises(ConfigError, match="^train_step: module not found: no_such_module_xyz$"):
            build(args + ["--train-step", "no_such_module_xyz:step"])
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_client_node_exits_2_with_one_line_naming_train_step(tmp_path):
    path = tmp_path / "client.json"
    path.write_text(json.dumps(client_dict(results_dir=str(tmp_path / "results"),
                                           train_step=f"{FIXTURE}:no_such_function")))
    out = subprocess.run([sys.executable, str(ROOT / "nodes" / "client.py"), str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"client: config error: {path}: train_step: {FIXTURE} has no function " \
                                 "'no_such_function'", out.stderr
    assert not (tmp_path / "results").exists()


def test_fl_local_update_uses_the_step():
    rng = np.random.default_rng(0)
    data = SimpleNamespace(train_x=rng.random((64, 1, 28, 28), dtype=np.float32),
                           train_y=rng.integers(0, 10, 64).astype(np.int64))
    fit = FitIns(round=1, epochs=1, lr=0.05, batch_size=16, subset_size=64)
    model = build_model("mnist_cnn", seed=0)
    weights = flatten_params(model)

    def update(**step):
        return local_update(model, weights, data, np.arange(64), fit, SeedTree().local(0, 1), momentum=0.9, weight_decay=0.0, **step)

    default_delta, default_loss = update()
    same_delta, same_loss = update(step=load_train_step(DEFAULT_TRAIN_STEP))
    smooth_delta, smooth_loss = update(step=load_train_step(SMOOTHING))
    assert np.array_equal(default_delta, same_delta) and default_loss == same_loss
    assert not np.allclose(default_delta, smooth_delta) and smooth_loss != default_loss


@pytest.mark.slow
def test_ddp_run_with_a_step_from_a_file_records_and_uses_it(tmp_path, domain):
    """2 ranks, 10 steps of dense DDP with the label-smoothing step: the run completes, the manifest
    records the step, and the first step's loss is the label-smoothed loss of rank 0's first batch."""
    r = subprocess.run([sys.executable, "-m", "commlab.ddp.run", "--method", "dense", "--world", "2",
                        "--epochs", "1", "--train-subset", "640", "--test-subset", "200", "--domain-id", str(domain),
                        "--train-step", "tests/fixtures/label_smoothing_step.py:step",
                        "--results-dir", str(tmp_path), "--run-id", "smooth"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = tmp_path / "smooth"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["config"]["train_step"] == SMOOTHING
    assert json.loads((run / "configs" / "worker.json").read_text())["train_step"] == SMOOTHING

    # Rank 0's first batch, as ddp/train.py draws it, through the initial model.
    from commlab.config.builders import build_dataset
    from commlab.config.schema import DatasetSection
    from commlab.data import partition
    seeds = SeedTree(0)
    data = build_dataset(DatasetSection(train_subset=640, test_subset=200), seeds.subset)
    shard = partition(data.train_y, 2, "iid", seed=seeds.partition)[0]
    first = np.random.default_rng(seeds.batches(0, 0)).permutation(shard)[:32]
    model = build_model("mnist_cnn", seed=seeds.model_init)
    x, y = torch.from_numpy(data.train_x[first]), torch.from_numpy(data.train_y[first])
    smoothed, plain = F.cross_entropy(model(x), y, label_smoothing=0.1).item(), F.cross_entropy(model(x), y).item()
    logged = pd.read_csv(run / "steps-rank0.csv")["train_loss"].iloc[0]
    assert abs(logged - smoothed) < 1e-5 < 1e-4 < abs(logged - plain)
