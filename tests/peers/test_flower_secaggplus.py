"""The Flower peer's SecAgg+ option (bench-secagg's Flower rows): refused where Flower's
SecAggPlusWorkflow cannot run, and the app project it writes names the ClientApp with Flower's
secaggplus_mod. The runs themselves are the benchmark's (benchmarks/bench_secagg.py)."""
from __future__ import annotations

import json

import pytest

from commlab.config.schema import ConfigError, from_dict
from commlab.peers.flower import FlowerConfig
from commlab.peers.flower_run import write_app

BASE = {"run_id": "r", "results_dir": "/tmp", "transport": "deployment", "clients": 4, "secaggplus": True}


def test_secaggplus_needs_the_deployment_runtime_and_three_clients():
    assert from_dict(FlowerConfig, BASE).secaggplus_shares == (4, 3)
    for change in ({"transport": "grpc-bidi"}, {"clients": 2}):
        with pytest.raises(ConfigError, match="secaggplus: needs transport deployment .* and at least 3 clients"):
            from_dict(FlowerConfig, {**BASE, **change})


@pytest.mark.parametrize("secaggplus, component", [(True, "secaggplus_client_app"), (False, "client_app")])
def test_the_app_project_names_the_secaggplus_client_app(tmp_path, secaggplus, component):
    config = tmp_path / "flower.json"
    config.write_text(json.dumps({**BASE, "secaggplus": secaggplus}))
    app = write_app(tmp_path, config, "127.0.0.1:9")
    assert f'clientapp = "commlab.peers.flower_app:{component}"' in (app / "pyproject.toml").read_text().splitlines()
