# Experiment tracking (docs/report.md, "Tracking"): every run writes TensorBoard events beside its
# CSVs (results/<run-id>/tensorboard/); these targets serve them, rewrite them, or log runs to an
# MLflow file store. RUNS="id1 id2" restricts the exports to named runs.
TB_PORT ?= 6006
MLFLOW_STORE ?= results/mlruns
.PHONY: tensorboard tensorboard-export mlflow-export
# --load_fast=false: TensorBoard's Python reader; its faster Rust one leaves out float64 scalars,
# which the events hold so that every value is the CSV's very number.
tensorboard: $(STAMP) ## serve results/ in TensorBoard on 127.0.0.1:TB_PORT (6006): every run's rounds, clients, steps, epochs and hparams
	$(PYTHON) -m tensorboard.main --logdir results --load_fast=false --host 127.0.0.1 --port $(TB_PORT)

tensorboard-export: $(STAMP) ## rewrite the TensorBoard events of the runs under results/ (or RUNS) from their CSVs
	$(PYTHON) -m commlab.report.export tensorboard $(if $(RUNS),--runs $(RUNS))

mlflow-export: $(STAMP) ## log the runs under results/ (or RUNS) to the MLflow file store MLFLOW_STORE (results/mlruns), no server
	$(PYTHON) -m commlab.report.export mlflow --store $(MLFLOW_STORE) $(if $(RUNS),--runs $(RUNS))
