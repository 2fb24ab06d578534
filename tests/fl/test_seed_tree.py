"""The run's seed tree (commlab.runs.seeds): one place derives every stream of an FL or DDP run from
`seed` and `data_seed`; the launchers' --seed / --data-seed reach it through the config."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from commlab.config.builders import build_node_model
from commlab.config.schema import ConfigError, ModelSection, from_dict
from commlab.data import Dataset
from commlab.ddp.config import WorkerConfig
from commlab.ddp.run import build_config as ddp_config, parse_args as ddp_args
from commlab.fl.config import ClientConfig, ControllerConfig
from commlab.fl.run import build_configs, parse_args
from commlab.models import flatten_params
from commlab.runs.seeds import STREAMS, SeedTree
from commlab.testbed.node_procs import start_fl

RUN_STREAMS = [name for name, (root, _) in STREAMS.items() if root == "seed"]
DATA_STREAMS = [name for name, (root, _) in STREAMS.items() if root == "data_seed"]


def fl_configs(*flags: str) -> tuple[ControllerConfig, list[ClientConfig]]:
    ctl, cls = build_configs(parse_args(["--clients", "3", "--results-dir", "/tmp/unused", "--run-id", "seeds",
                                         "--domain-id", "5", *flags]))
    return from_dict(ControllerConfig, ctl), [from_dict(ClientConfig, c) for c in cls]


def tiny_data() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((300, 1, 28, 28), dtype=np.float32)
    y = np.repeat(np.arange(10), 30)
    return Dataset(name="tiny", train_x=x, train_y=y, test_x=x[:10], test_y=y[:10], num_classes=10)


def test_the_same_seeds_give_the_same_tree_and_another_seed_another():
    assert SeedTree(3, 5).manifest(4, ("local_training", "codec")) == SeedTree(3, 5).manifest(4, ("local_training", "codec"))
    a, b = SeedTree(3), SeedTree(4)
    assert all(a.stream(name) != b.stream(name) for name in STREAMS)
    assert a.local(1, 2) == SeedTree(3).local(1, 2) and a.local(1, 2).shuffle(0) != b.local(1, 2).shuffle(0)


def test_every_stream_and_node_has_its_own_seed():
    tree = SeedTree(0)
    assert len({tree.stream(name) for name in STREAMS}) == len(STREAMS)
    assert len({tree.codec(node) for node in range(50)}) == 50
    per_round = [tree.local(client, rnd) for client in range(10) for rnd in range(1, 6)]
    assert len({s.subset for s in per_round} | {s.torch for s in per_round}) == 2 * len(per_round)
    assert len({tree.batches(rank, epoch) for rank in range(4) for epoch in range(3)}) == 12
    assert len({tree.sampling(rnd) for rnd in range(1, 100)}) == 99


def test_data_seed_defaults_to_the_run_seed_and_moves_only_the_data_streams():
    assert SeedTree(7).manifest(2, ("codec",)) == SeedTree(7, 7).manifest(2, ("codec",))
    same, other = SeedTree(7), SeedTree(7, 8)
    assert all(same.stream(name) == other.stream(name) for name in RUN_STREAMS)
    assert all(same.stream(name) != other.stream(name) for name in DATA_STREAMS)


def test_fl_launcher_data_seed_changes_the_partition_but_not_the_model_init():
    (ctl, clients), (moved, moved_clients) = fl_configs("--seed", "1"), fl_configs("--seed", "1", "--data-seed", "2")
    assert ctl.seeds.data is None and moved.seeds.data == 2 and moved.seeds.run == 1
    assert all(c.seeds == ctl.seeds for c in clients) and all(c.seeds == moved.seeds for c in moved_clients)
    data = tiny_data()
    parts = ctl.partition.split(data, 3, ctl.seeds.tree.partition)
    again = clients[0].partition.split(data, 3, clients[0].seeds.tree.partition)  # every node computes the same
    changed = moved.partition.split(data, 3, moved.seeds.tree.partition)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, changed))
    init = [flatten_params(build_node_model(ModelSection(), c.seeds.tree.model_init, 1, data)) for c in (ctl, moved)]
    assert np.array_equal(*init)
    assert not np.array_equal(init[0], flatten_params(build_node_model(ModelSection(), SeedTree(2).model_init, 1, data)))


def test_ddp_launcher_takes_data_seed_apart_from_seed():
    cfg = from_dict(WorkerConfig, ddp_config(ddp_args(["--method", "dense", "--seed", "3", "--data-seed", "9",
                                                       "--domain-id", "5", "--results-dir", "/tmp/unused"])))
    assert cfg.seeds.tree == SeedTree(3, 9)
    default = from_dict(WorkerConfig, ddp_config(ddp_args(["--method", "dense", "--seed", "3", "--domain-id", "5",
                                                           "--results-dir", "/tmp/unused"])))
    assert default.seeds.tree.partition == SeedTree(3, 3).partition != cfg.seeds.tree.partition
    assert default.seeds.tree.model_init == cfg.seeds.tree.model_init


@pytest.mark.parametrize("seeds, message", [({"run": -1}, "seeds.run: must be an integer >= 0, got -1"),
                                            ({"data": -3}, "seeds.data: must be an integer >= 0, got -3"),
                                            ({"data": True}, "seeds.data: expected int, got bool True")])
def test_a_bad_seed_is_one_line_naming_it(seeds, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        from_dict(ControllerConfig, {"run_id": "r", "results_dir": "x", "checkpoint_dir": "x", "rounds": 1,
                                     "expected_clients": 1, "dds": {"domain_id": 1}, "seeds": seeds})


def test_seed_streams_keep_their_keys():
    """A recorded run draws what it drew: stream keys never move, and the draws of a key are fixed."""
    assert SeedTree(0).stream("partition") == int(np.random.SeedSequence(0, spawn_key=(1, 1)).generate_state(1)[0])
    assert len({key for _, key in STREAMS.values() if _ == "seed"}) == len(RUN_STREAMS)
    assert len({key for _, key in STREAMS.values() if _ == "data_seed"}) == len(DATA_STREAMS)


def run_digests(out_dir, domain: int, *flags: str) -> tuple[list[str], dict]:
    """Per round the controller's model digest, and the manifest's seeds, of a 2-round FL run."""
    out_dir.mkdir()
    procs, _, run_dir = start_fl(out_dir, domain=domain, rounds=2, deadline=30.0, extra=flags)
    try:
        assert procs["controller"].finish() == 0, procs["controller"].text()[-3000:]
        assert all(procs[name].finish() == 0 for name in ("client-0", "client-1"))
    finally:
        for p in procs.values():
            p.stop()
    digests = re.findall(r"round (\d+)/2 .* model ([0-9a-f]{16})", procs["controller"].text())
    return [d for _, d in digests], json.loads((run_dir / "manifest.json").read_text())["seeds"]


@pytest.mark.slow
def test_two_runs_of_one_seed_train_the_same_models_and_record_their_seeds(tmp_path, domain):
    first, seeds = run_digests(tmp_path / "a", domain, "--seed", "3", "--data-seed", "4")
    second, again = run_digests(tmp_path / "b", domain, "--seed", "3", "--data-seed", "4")
    assert len(first) == 2 and first == second
    assert seeds == again == SeedTree(3, 4).manifest(2, ("local_training", "codec"))
