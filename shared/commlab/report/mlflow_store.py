"""Runs logged to an MLflow file store (a folder; no tracking server), from their CSVs.

One MLflow experiment per settings group (the report's groups: runs in one experiment are
comparable), one MLflow run per run folder, named by its run id and tagged `commlab.run_id`:
params are the hyperparameters of commlab.report.tracking, metrics its scalars at their round,
step or epoch (keys `rounds/<column>`, `clients/<client-id>/<column>`, `steps/rank<r>/<column>`,
`epochs/rank<r>/<column>`). Exporting a run again replaces its MLflow run.

    mlflow ui --backend-store-uri results/mlruns   # with MLFLOW_ALLOW_FILE_STORE=true
"""
from __future__ import annotations

import os
from pathlib import Path

from .runs import Run, read_manifest
from .tracking import Scalar, hparams, manifest_time, run_scalars

RUN_ID_TAG = "commlab.run_id"
BATCH_METRICS = 1000  # MLflow's limits for one log_batch call
BATCH_PARAMS = 100
STATUS = {"completed": "FINISHED", "running": "RUNNING"}  # anything else ("failed: ...") is FAILED


def metric_key(s: Scalar) -> str:
    return f"{s.table}/{s.source}/{s.column}" if s.source else s.tag


def store_client(store: Path):
    """An MlflowClient on the file store at `store` (made if missing). MLflow 3 keeps file stores
    behind MLFLOW_ALLOW_FILE_STORE; a folder is what this export writes, so it is set here, and
    MLflow's usage reports are off (the testbed talks to no outside host)."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient
    store.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=store.resolve().as_uri())


def export_run(client, run_dir: Path) -> str:
    """Log the run in `run_dir` (replacing an earlier export of it); returns the MLflow run id."""
    from mlflow.entities import Metric, Param
    manifest = read_manifest(run_dir)
    run_id = str(manifest.get("run_id") or run_dir.name)
    scalars = list(run_scalars(run_dir))  # read all first: a broken file logs nothing
    group = Run(run_id=run_id, path=run_dir, manifest=manifest, tables={}).group
    experiment = client.get_experiment_by_name(group)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(group)
    for old in client.search_runs([experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'"):
        client.delete_run(old.info.run_id)
    started = manifest_time(manifest, "started_at")
    finished = manifest_time(manifest, "finished_at")
    run = client.create_run(experiment_id, run_name=run_id, start_time=None if started is None else int(started * 1000),
                            tags={RUN_ID_TAG: run_id, "commlab.status": str(manifest.get("status", "")),
                                  "commlab.git_commit": str(manifest.get("git_commit", ""))})
    mlflow_id = run.info.run_id
    params = [Param(k, str(v)) for k, v in hparams(manifest).items()]
    for i in range(0, len(params), BATCH_PARAMS):
        client.log_batch(mlflow_id, params=params[i:i + BATCH_PARAMS])
    stamp = run.info.start_time
    metrics = [Metric(metric_key(s), s.value, stamp, s.step) for s in scalars]
    for i in range(0, len(metrics), BATCH_METRICS):
        client.log_batch(mlflow_id, metrics=metrics[i:i + BATCH_METRICS])
    status = STATUS.get(str(manifest.get("status")), "FAILED")
    if status != "RUNNING":
        client.set_terminated(mlflow_id, status, end_time=None if finished is None else int(finished * 1000))
    return mlflow_id
