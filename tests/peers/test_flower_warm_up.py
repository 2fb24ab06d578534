"""Flower's client sets itself up as the DDS client does: one step of local training on a copy of
its model (fl.local_training.warm_up, the DDS client's), with its data, optimizer settings and
train step, so neither peer loads torch's training code in its first round."""
from __future__ import annotations

from commlab.config.schema import from_dict
from commlab.fl import local_training
from commlab.peers.flower import ClientTrainer, FlowerConfig


def test_the_flower_client_takes_the_dds_clients_warm_up_step(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(local_training, "warm_up", lambda model, data, **kw: calls.append((model, data, kw)))
    cfg = from_dict(FlowerConfig, {"run_id": "r", "results_dir": str(tmp_path), "clients": 2,
                                   "dataset": {"train_subset": 200, "test_subset": 100},
                                   "optimizer": {"momentum": 0.5, "weight_decay": 0.001}})
    (tmp_path / "r").mkdir()  # the run folder: the controller makes it in a run
    trainer = ClientTrainer(cfg, 0)
    trainer.table.close()
    assert len(calls) == 1
    model, data, kw = calls[0]
    assert model is trainer.model and data is trainer.data
    assert kw == {"momentum": 0.5, "weight_decay": 0.001, "step": trainer.step}
