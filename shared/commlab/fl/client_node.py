"""The client node program (nodes/client.py): its config read and checked, the dataset, model and
partition built, then its DDS participant created and the Client run. Every problem with the
input is a ConfigError before any side effect."""
from __future__ import annotations

from commlab.config.builders import build_dataset, build_node_model, dds_settings
from commlab.data.partition import client_summary
from commlab.dds import DdsNode
from commlab.fl.client import Client
from commlab.fl.config import load_client_config
from commlab.fl.entry import as_config_error, log_to, warm_up_codecs
from commlab.fl import local_training
from commlab.models import flatten_params, layout_of
from commlab.config.train_step_spec import load_train_step
from commlab.output.memory_watch import MemoryWatch
from commlab.output.run_folder import write_transport_totals
from commlab.runs.roster import client_name


def run_client(config_path: str) -> None:
    """Parse and check everything, then build the node and run; ConfigError before any side effect."""
    cfg = load_client_config(config_path)
    cfg.dds.check_host()
    seeds = cfg.seeds.tree
    data = as_config_error("dataset", lambda: build_dataset(cfg.dataset, seeds.subset))
    model = as_config_error("model", lambda: build_node_model(cfg.model, seeds.model_init, cfg.threads, data))
    p = cfg.partition
    parts = as_config_error("partition", lambda: p.split(data, cfg.num_clients, seeds.partition))
    numel = flatten_params(model, cfg.sends_buffers).size
    settings = as_config_error("dds", lambda: dds_settings(cfg.dds, numel))
    log = log_to(cfg.name)
    hosted = {i: parts[i] for i in cfg.hosted()}
    if cfg.procs is None:
        mine = client_summary(data, [parts[cfg.client_id]])[0]
        log(f"partition {p.scheme}: {mine['samples']} samples"
            + (f", labels {mine['label_histogram']}" if "label_histogram" in mine else ""))
    else:
        sizes = [len(part) for part in hosted.values()]
        log(f"partition {p.scheme}: hosting {len(hosted)} clients ({client_name(min(hosted))} ... "
            f"{client_name(max(hosted))}), {min(sizes)}-{max(sizes)} samples each")
    # Before the node exists: a warm codec that cannot be built is a ConfigError like any other.
    warm_up_codecs([] if cfg.warm_codec is None else [cfg.warm_codec], layout_of(model, cfg.sends_buffers))
    # One step of training on a copy of the model (Flower's client takes the same): torch's
    # optimizer code and the kernels of a forward and backward pass, loaded before the idle mark.
    local_training.warm_up(model, data, momentum=cfg.optimizer.momentum, weight_decay=cfg.optimizer.weight_decay,
                           step=load_train_step(cfg.train_step))
    node = DdsNode(cfg.name, settings)
    watch = MemoryWatch(4 * numel, cfg.memory_phases)  # the model's fp32 size: the unit of the exchange's memory target
    try:
        Client(cfg, node, model, data, hosted, log, watch).run()
    finally:
        write_transport_totals(cfg.results_dir, cfg.run_id, cfg.name, node.stats.snapshot(), watch)
        node.close()
