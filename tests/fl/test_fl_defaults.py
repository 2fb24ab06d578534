"""The FL launcher's per-dataset training defaults (commlab.fl.defaults): a dataset's entry reaches
the node configs, flags given win, every other dataset trains with the config's own defaults."""
from __future__ import annotations

from pathlib import Path

from commlab.fl.config import TrainingSection
from commlab.fl.defaults import BASE, BY_DATASET, dataset_defaults
from commlab.fl.run import build_configs, parse_args


def configs(tmp_path: Path, *flags: str) -> tuple[dict, list[dict]]:
    return build_configs(parse_args(["--results-dir", str(tmp_path), "--run-id", "t", "--domain-id", "5", *flags]))


def trained_with(controller: dict, client: dict) -> dict:
    t, s = controller["training"], controller["strategy"]
    return {"epochs": t["local_epochs"], "batch_size": t["batch_size"], "lr": t["lr"], "lr_decay": t["lr_decay"],
            "samples_per_round": t["samples_per_round"], "momentum": client["optimizer"]["momentum"],
            "server_lr": s["server_lr"], "server_momentum": s["server_momentum"]}


def test_a_dataset_without_an_entry_trains_with_the_config_defaults(tmp_path):
    controller, clients = configs(tmp_path, "--dataset", "mnist")
    assert "mnist" not in BY_DATASET
    assert trained_with(controller, clients[0]) == BASE
    assert BASE["lr"] == TrainingSection().lr and BASE["lr_decay"] == 1.0 and BASE["server_momentum"] == 0.0


def test_fashion_mnist_gets_its_entry_and_keeps_the_rest(tmp_path):
    controller, clients = configs(tmp_path, "--dataset", "fashion_mnist")
    entry = BY_DATASET["fashion_mnist"]
    assert trained_with(controller, clients[0]) == {**BASE, **entry} == dataset_defaults("fashion_mnist")
    assert entry and all(BASE[k] != v for k, v in entry.items())  # the entry changes what it names


def test_flags_given_win_over_the_dataset_defaults(tmp_path):
    controller, clients = configs(tmp_path, "--dataset", "fashion_mnist", "--server-momentum", "0", "--lr-decay", "1",
                                  "--epochs", "3", "--momentum", "0.5")
    got = trained_with(controller, clients[0])
    assert (got["server_momentum"], got["lr_decay"], got["epochs"], got["momentum"]) == (0.0, 1.0, 3, 0.5)


def test_an_unknown_key_in_an_entry_is_not_a_launcher_flag():
    # fill_defaults sets argparse dests: every entry may only name BASE's keys.
    assert all(set(entry) <= set(BASE) for entry in BY_DATASET.values())

