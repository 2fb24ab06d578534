"""The Flower FedAvg peer's ServerApp and ClientApp for Flower's deployment runtime (transport
`deployment`, docs/peers.md): the same strategy and local training as the legacy transport
(`flower.server_parts`, `flower.ClientTrainer`), nothing copied.

`flower_run.py` writes a Flower app project per run (results/<run-id>/flower-app/pyproject.toml,
components `commlab.peers.flower_app:server_app` / `:client_app` (`:secaggplus_client_app` with
config `secaggplus`: Flower's SecAgg+ mod around the same client), run config `config` = the path of
configs/flower.json) and starts it with `flwr run` on the run's SuperLink. The ServerApp runs once
per run in a `flwr-serverapp` process (started by the SuperLink side's SuperExec); the ClientApp in
a fresh `flwr-clientapp` process per message (started by each SuperNode's SuperExec), so a client
rebuilds its model, data and partition every round (the same ones: all are seeded) and keeps its
unwritten clients-<i>.csv row in a small JSON file between rounds; after the last round the
ServerApp sends each client one `get_properties` message so it writes its last row. Its SuperNode's `--node-config
client-id=<i>` says which client it is.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from flwr.app import Context
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.server import Grid
from flwr.serverapp import ServerApp

from commlab.config.schema import load_config
from commlab.peers.flower import ClientTrainer, FlowerConfig, server_parts

CONFIG_KEY = "config"        # run config: the path of the run's flower.json
CLIENT_KEY = "client-id"     # node config of a SuperNode: its client index
FLUSH_KEY = "flush-row"      # get_properties config after the last round: write the pending clients row


def _config(context: Context) -> FlowerConfig:
    return load_config(FlowerConfig, str(context.run_config[CONFIG_KEY]))


server_app = ServerApp()


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    """Flower's legacy server loop (`start_grid`) over the deployment's Grid, with the peer's strategy;
    with `secaggplus`, Flower's DefaultWorkflow with SecAggPlusWorkflow as its fit step (Flower's
    defaults for the quantization: clipping range 8, 2**22 levels, masks modulo 2**32)."""
    from flwr.common import GetPropertiesIns
    from flwr.server import SimpleClientManager
    from flwr.server.compat import LegacyContext, start_grid
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    logging.getLogger("flwr").setLevel(logging.WARNING)
    cfg = _config(context)
    strategy, server_config, finish = server_parts(cfg)
    clients = SimpleClientManager()
    try:
        if cfg.secaggplus:
            shares, threshold = cfg.secaggplus_shares
            workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(shares, threshold, timeout=cfg.round_timeout_s))
            workflow(grid, LegacyContext(context, server_config, strategy, clients))
        else:
            start_grid(grid=grid, strategy=strategy, config=server_config, client_manager=clients)
    except BaseException as e:
        finish(e)
        raise
    # The legacy clients write their last row when the server disconnects them; a ClientApp is a
    # process per message, so it is told to: one small message each, after the last round (best
    # effort: the run's rounds are done whatever happens here).
    for cid, proxy in clients.all().items():
        try:
            proxy.get_properties(GetPropertiesIns({FLUSH_KEY: 1}), timeout=cfg.round_timeout_s,
                                 group_id=cfg.rounds + 1)
        except Exception as e:  # noqa: BLE001
            print(f"[controller] node {cid}: its last clients row not written ({type(e).__name__}: {e})", flush=True)
    finish(None)


def client_fn(context: Context):
    """A NumPyClient for this message (the legacy server loop sends legacy FitIns), around
    `ClientTrainer.fit`."""
    from flwr.client import NumPyClient

    logging.getLogger("flwr").setLevel(logging.WARNING)
    cfg = _config(context)
    index = int(context.node_config[CLIENT_KEY])
    store = Path(cfg.results_dir) / cfg.run_id / f".clients-{index}.pending.json"

    class Client(NumPyClient):
        def fit(self, parameters, config):
            trainer = ClientTrainer(cfg, index)
            pending = json.loads(store.read_text()) if store.exists() else {}
            try:
                reply = trainer.fit(parameters, config, pending)
                tmp = store.with_suffix(f".{os.getpid()}")
                tmp.write_text(json.dumps(pending))
                tmp.replace(store)
            finally:
                trainer.table.close()
            return reply

        def get_properties(self, config):
            """After the last round (`server_main`): write the last row, as the legacy client does when
            the server disconnects it."""
            if config.get(FLUSH_KEY) and store.exists():
                trainer = ClientTrainer(cfg, index, train=False)
                trainer.flush_row(json.loads(store.read_text()))
                trainer.table.close()
                store.unlink()
            return {}

    return Client().to_client()


client_app = ClientApp(client_fn=client_fn)
secaggplus_client_app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])  # config secaggplus
