# Data and models (docs/workloads.md): the data directory, Fashion-MNIST, the cache, partition histograms.
SCHEME ?= dirichlet
ALPHA ?= 0.5
LABELS_PER_CLIENT ?= 2
EXPONENT ?= 1.0
SEED ?= 1

.PHONY: data-install data-cache data-histogram test-data
data-install: ## install Fashion-MNIST: Debian's dataset-fashion-mnist (root; scripts/docker-bootstrap.sh does it too)
	@[ "$$(id -u)" = 0 ] || { echo "data-install: apt-get install dataset-fashion-mnist needs root (sudo make data-install)" >&2; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends dataset-fashion-mnist

data-cache: $(STAMP) ## check DATASET (default mnist) and convert it once into the data directory's cache (DATA_DIR, else COMMLAB_DATA_DIR or ~/.cache/commlab)
	$(PYTHON) -c 'from commlab.data import load_raw, data_dir; load_raw("$(DATASET)"); print("cached in", data_dir())'

data-histogram: $(STAMP) ## print per-client label histogram (DATASET CLIENTS SCHEME ALPHA LABELS_PER_CLIENT EXPONENT SEED)
	$(PYTHON) -m commlab.data --dataset $(DATASET) --clients $(CLIENTS) --scheme $(SCHEME) --alpha $(ALPHA) --labels-per-client $(LABELS_PER_CLIENT) --exponent $(EXPONENT) --seed $(SEED)

test-data: $(STAMP) ## tests for datasets, partitions and models
	$(PYTHON) -m pytest -q -m "not docker" tests/data

# Every model on data that is here (docs/workloads.md): per workload, each compressor against fp32,
# FL rounds on lan and 10mbit (namespaces: root; skipped as a plain user).
WORKLOADS_ARGS ?=
.PHONY: bench-workloads bench-fl-schedule
bench-workloads: $(STAMP) ## per workload (resnet20, resnet18, femnist_cnn, char_lstm, lstm_lm, mnist_cnn on Fashion-MNIST): bytes vs fp32, encode/decode, round time lan/10mbit, accuracy and time to target -> results/bench/workloads-*.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_workloads.py $(BENCH_QUICK) $(WORKLOADS_ARGS)

# Local epochs, learning rate and batch size of FL on one DATASET, one fp32 run each (SCHEDULE_ARGS).
SCHEDULE_ARGS ?=
bench-fl-schedule: $(STAMP) ## FL fp32 on DATASET per local schedule EPOCHS:LR:BATCH: accuracy by round, time to target -> results/bench/fl-schedule.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_fl_schedule.py $(BENCH_QUICK) --dataset $(DATASET) $(SCHEDULE_ARGS)
