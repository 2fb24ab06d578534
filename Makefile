# Every target that runs Python depends on $(STAMP): the virtual environment is made and the
# project installed on first use, so a fresh clone needs nothing but python3.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv test test-fast test-repeat
help:
	@grep -hE '^[a-zA-Z0-9_% -]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q -e '.[test,tracking,privacy]'
	touch $(STAMP)

venv: $(STAMP) ## create .venv and install the project

test: $(STAMP) ## run the whole test suite (unit, multi-process DDS, network namespaces, containers)
	$(PYTHON) -m pytest -q -ra

# The inner loop: every area's unit tests, none that starts a process, a DDS participant, a
# namespace or a container (those are marked slow or docker; tests/unit_guard.py fails a test that
# starts one unmarked), with the fuzz tests at FAST_CASES inputs each (make test: 1,000).
FAST_CASES ?= 100
test-fast: $(STAMP) ## unit tests of every area: no processes, DDS participants, namespaces or containers; fuzz tests at FAST_CASES (100) inputs
	COMMLAB_FUZZ_CASES=$(FAST_CASES) $(PYTHON) -m pytest -q -ra -m "not slow and not docker"

# The tests that start, kill and restart processes: run them N times and report any flake.
N ?= 20
K ?= test_fl_faults or test_dds_multiprocess or killed
test-repeat: $(STAMP) ## run the tests matching K (pytest -k; default: fault and multi-process tests) N times each; per-test pass counts
	$(PYTHON) -m pytest -q -ra --repeat $(N) -k "$(K)"

# Faults a run must survive, each test N times: every node kind paused past its lease (PAUSES
# seconds), nodes killed and restarted, rogue, replaying and flooding processes on the domain.
PAUSES ?= 8,60
.PHONY: chaos bench-chaos
bench-chaos: $(STAMP) ## chaos table: FL/DDP runs with nodes paused 2/10/60 s, killed, restarted, CPU hogs, four runs at once, links flapped or lossy (root) -> results/bench/chaos.{csv,md} (QUICK=1: 10 s pauses)
	$(PYTHON) benchmarks/bench_chaos.py $(BENCH_QUICK)

chaos: $(STAMP) ## FL nodes and DDP ranks paused past their lease (PAUSES s), killed and restarted; rogue and flooding processes on the domain; N (20) runs each
	COMMLAB_PAUSES=$(PAUSES) $(PYTHON) -m pytest -q -ra --repeat $(N) tests/fl/test_fl_pause.py tests/ddp/test_ddp_pause.py tests/fl/test_fl_faults.py tests/security/test_rogue_nodes.py tests/security/test_rogue_flood.py

# Every surface that reads untrusted bytes (codec frames, message fields, configs, checkpoints, SecAgg+ frames,
# chunk reassembly) with CASES generated inputs per test; `make test` runs the same tests with 1,000.
CASES ?= 10000
.PHONY: fuzz
fuzz: $(STAMP) ## fuzz every decoder, message field, config, checkpoint and reassembly with CASES (10,000) inputs per test
	COMMLAB_FUZZ_CASES=$(CASES) $(PYTHON) -m pytest -q -ra -p no:randomly tests/codecs/test_malformed_frames.py tests/security/test_message_fields.py tests/security/test_fuzz_inputs.py tests/privacy/test_secagg.py tests/privacy/test_secagg_wire.py

# Every bench-* target (commlab.bench): QUICK=1 runs its small settings, a check of the pipeline in
# minutes, into results/bench/<name>-quick.{csv,md}; the full run writes results/bench/<name>.{csv,md},
# each table headed by its command, commit, date, machine and wall time.
QUICK ?=
BENCH_QUICK = $(if $(QUICK),--quick)

# Experiment settings shared by the fl-*, ddp-*, histogram and container targets.
CLIENTS ?= 2
WORLD ?= 3
BACKEND ?= auto
PROFILE ?= lan
# Workloads (docs/workloads.md): MODEL=resnet20 DATASET=cifar10 DATA_DIR=/path/with/the/official/files
MODEL ?= mnist_cnn
DATASET ?= mnist
DATA_DIR ?=
ifneq ($(DATA_DIR),)
export COMMLAB_DATA_DIR := $(abspath $(DATA_DIR))
endif

include $(sort $(wildcard mk/*.mk))
