# Federated learning over DDS (docs/fl.md): a controller and CLIENTS clients, one run per codec.
# make fl-int8_sparse CLIENTS=2 ROUNDS=10 BACKEND=auto|local|docker PROFILE=lan|10mbit|1mbit|hetero
# Defaults: Dirichlet(0.5) non-IID, 6000 samples per client and round, batch 64, 1 local epoch.
ROUNDS ?= 10
SAMPLES ?= 6000
FL_ARGS ?=

.PHONY: test-fl test-fl-slow
fl-%: $(STAMP) ## FL run with compressor % (fp32, int8, int8_sparse, qsgd16, dgc, powersgd, signsgd, ...): CLIENTS ROUNDS BACKEND PROFILE SAMPLES FL_ARGS
	$(PYTHON) -m commlab.fl.run --codec $* --clients $(CLIENTS) --rounds $(ROUNDS) --samples-per-round $(SAMPLES) --backend $(BACKEND) --profile $(PROFILE) $(FL_ARGS)

test-fl: $(STAMP) ## fast FL tests: config validation, FedAvg, update checks, checkpoints
	$(PYTHON) -m pytest -q -m "not slow" tests/test_fl_config.py tests/test_fl_strategy.py tests/test_fl_checkpoint.py

test-fl-slow: $(STAMP) ## FL fault tests with real node processes (client killed, controller restart, malformed update)
	$(PYTHON) -m pytest -q tests/test_fl_faults.py
