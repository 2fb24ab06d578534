# Data and models: dataset cache and partition histograms.
DATASET ?= mnist
SCHEME ?= dirichlet
ALPHA ?= 0.5
LABELS_PER_CLIENT ?= 2
SEED ?= 1

.PHONY: data-cache data-histogram test-data
data-cache: $(STAMP) ## convert DATASET (default mnist) once into the local cache (COMMLAB_DATA_DIR or ~/.cache/commlab)
	$(PYTHON) -c 'from commlab.data import load_dataset, cache_dir; load_dataset("$(DATASET)"); print("cached in", cache_dir())'

data-histogram: $(STAMP) ## print per-client label histogram (DATASET CLIENTS SCHEME ALPHA LABELS_PER_CLIENT SEED)
	$(PYTHON) -m commlab.data --dataset $(DATASET) --clients $(CLIENTS) --scheme $(SCHEME) --alpha $(ALPHA) --labels-per-client $(LABELS_PER_CLIENT) --seed $(SEED)

test-data: $(STAMP) ## tests for datasets, partitions and models
	$(PYTHON) -m pytest -q tests/data
