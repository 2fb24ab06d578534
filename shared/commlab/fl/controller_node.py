"""The controller node program (nodes/controller.py): its config read and checked, the dataset,
model, codecs, strategy (or a checkpoint to resume from) and run folder built, then its DDS
participant created and the Controller run. Every problem with the input is a ConfigError before
any side effect."""
from __future__ import annotations

from pathlib import Path

from commlab.config.builders import build_dataset, build_node_model, dds_settings
from commlab.config.schema import to_dict
from commlab.data.partition import client_summary
from commlab.dds import DdsNode
from commlab.fl.checkpoint import load_checkpoint
from commlab.fl.config import load_controller_config
from commlab.fl.controller import Controller
from commlab.fl.entry import as_config_error, build_codec, log_to, warm_up_codecs
from commlab.fl.strategy_config import build_strategy
from commlab.models import flatten_params, layout_of, weights_digest
from commlab.output.memory_watch import MemoryWatch
from commlab.output.run_folder import RunWriter, backend_name, write_transport_totals
from commlab.privacy.dp import DPFedAvg
from commlab.runs.roster import CONTROLLER


def run_controller(config_path: str) -> None:
    """Parse and check everything, then build the node and run; ConfigError before any side effect."""
    cfg = load_controller_config(config_path)
    cfg.dds.check_host()
    seeds = cfg.seeds.tree
    data = as_config_error("dataset", lambda: build_dataset(cfg.dataset, seeds.subset))
    parts = as_config_error("partition", lambda: cfg.partition.split(data, cfg.expected_clients, seeds.partition))
    model = as_config_error("model", lambda: build_node_model(cfg.model, seeds.model_init, cfg.threads, data))
    layout = layout_of(model, cfg.sends_buffers)
    uplink, downlink = build_codec(cfg.codec, layout), build_codec(cfg.downlink, layout, "downlink",
                                                                    seeds.controller_codec)
    weights, start_round, strategy_state, progress = flatten_params(model, cfg.sends_buffers), 1, None, {}
    if cfg.init_path is not None:
        ckpt = as_config_error("init_path", lambda: load_checkpoint(Path(cfg.init_path), weights.size))
        weights, start_round, strategy_state, progress = ckpt.weights, ckpt.round + 1, ckpt.strategy_state, ckpt.progress
    strategy = build_strategy(cfg, weights)
    if strategy_state is not None:
        as_config_error("init_path", lambda: strategy.load_state_dict(strategy_state))
    settings = as_config_error("dds", lambda: dds_settings(cfg.dds, weights.size, cfg.expected_clients))
    log = log_to(CONTROLLER)
    if start_round > 1:
        log(f"resuming at round {start_round} from {cfg.init_path}, model {weights_digest(strategy.weights)}")
    writer = RunWriter(cfg.results_dir, cfg.run_id, {
        "kind": "fl", "backend": backend_name(cfg.dds.interface), "model": cfg.model.name,
        "dataset": cfg.dataset.name, "codec": cfg.codec.name, "downlink_codec": cfg.downlink.name,
        "multicast": settings.multicast, "link_profile": cfg.link_profile,
        "clients": cfg.expected_clients, "rounds": cfg.rounds, "config": to_dict(cfg),
        "seeds": {**seeds.manifest(cfg.expected_clients, ("local_training", "codec")),
                  # DP noise: from the OS unless privacy.noise_seed names one (never from the run seed,
                  # which is no secret), recorded so the run can be replayed
                  **({"dp_noise": strategy.noise_seed} if isinstance(strategy, DPFedAvg) else {})},
        "client_data": dict(zip(cfg.client_ids(), client_summary(data, parts))),
        "start_round": start_round, "status": "running"})
    node = DdsNode(CONTROLLER, settings)
    warm_up_codecs([cfg.codec, cfg.downlink], layout)
    watch = MemoryWatch(4 * weights.size, cfg.memory_phases)  # the model's fp32 size: the unit of the exchange's memory target
    try:
        Controller(cfg, node, strategy, start_round, model, data, writer, uplink, downlink, log, progress, watch).run()
        writer.close("completed")
    except BaseException as e:
        writer.close(f"failed: {type(e).__name__}: {e}")
        raise
    finally:
        write_transport_totals(cfg.results_dir, cfg.run_id, CONTROLLER, node.stats.snapshot(), watch)
        node.close()
