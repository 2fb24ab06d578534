# Federated learning over DDS (docs/fl.md): a controller and CLIENTS clients, one run per codec.
# make fl-int8_sparse DOWNLINK=int8_sparse CLIENTS=2 ROUNDS=10 BACKEND=auto|local|docker|swarm PROFILE=lan|10mbit|1mbit|hetero
# Workloads (docs/workloads.md): MODEL=resnet20 DATASET=cifar10 DATA_DIR=... SCHEME=natural|iid|dirichlet|shards|label_quantity|quantity
# Defaults: mnist_cnn on MNIST, Dirichlet(0.5) non-IID, 6000 samples per client and round, batch 64, 1 local epoch.
ROUNDS ?= 10
SAMPLES ?= 6000
DOWNLINK ?= fp32
FL_ARGS ?=
# Sampling (docs/scale.md): PER_ROUND=2 (or 0.1) clients per round; AVAILABILITY=trace.csv (make fl-trace).
PER_ROUND ?=
AVAILABILITY ?=
# Logical clients (docs/scale.md): PROCS=4 processes host the CLIENTS clients.
PROCS ?=
FL_SAMPLING = $(if $(PER_ROUND),--per-round $(PER_ROUND)) $(if $(AVAILABILITY),--availability $(AVAILABILITY)) $(if $(PROCS),--procs $(PROCS))
FL_WORKLOAD = --model $(MODEL) --dataset $(DATASET) --partition $(SCHEME) --alpha $(ALPHA) --labels-per-client $(LABELS_PER_CLIENT) --exponent $(EXPONENT)
# SCHEDULE=many: the local and server steps tuned for many small clients (docs/scale.md), the same
# for 10 and 1,000 clients: 10 local epochs of batch 16 at lr 0.02, FedAvgM 0.5 with server lr 2.
SCHEDULE ?=
SCHEDULE_many = --epochs 10 --batch-size 16 --lr 0.02 --server-momentum 0.5 --server-lr 2
FL_SCHEDULE = $(if $(SCHEDULE),$(or $(SCHEDULE_$(SCHEDULE)),$(error unknown SCHEDULE=$(SCHEDULE); known: many)))

.PHONY: test-fl test-fl-slow
fl-%: $(STAMP) ## FL run with compressor % (fp32, fp16, bf16, int8, int8_sparse, qsgd16, dgc, powersgd, signsgd, ...): CLIENTS ROUNDS BACKEND PROFILE SAMPLES MODEL DATASET DATA_DIR SCHEME PER_ROUND AVAILABILITY PROCS SCHEDULE FL_ARGS
	$(PYTHON) -m commlab.fl.run --codec $* --clients $(CLIENTS) --rounds $(ROUNDS) --samples-per-round $(SAMPLES) --downlink-codec $(DOWNLINK) --backend $(BACKEND) --profile $(PROFILE) $(FL_WORKLOAD) $(FL_SAMPLING) $(FL_SCHEDULE) $(FL_ARGS)

TRACE ?= results/traces/diurnal-$(CLIENTS)x$(ROUNDS).csv
PERIOD ?= 24
ON_FRACTION ?= 0.5
TRACE_SEED ?= 0
.PHONY: fl-trace
fl-trace: $(STAMP) ## diurnal availability trace for CLIENTS clients over ROUNDS rounds (PERIOD ON_FRACTION TRACE_SEED) -> TRACE
	$(PYTHON) -m commlab.fl.sampling --clients $(CLIENTS) --rounds $(ROUNDS) --period $(PERIOD) --on-fraction $(ON_FRACTION) --seed $(TRACE_SEED) --out $(TRACE)

test-fl: $(STAMP) ## FL unit tests (tests/fl): config validation, strategies, robust rules, checkpoints, broadcast, sampling, adaptive bits, BatchNorm statistics
	$(PYTHON) -m pytest -q -m "not slow" tests/fl

test-fl-slow: $(STAMP) ## FL tests with real node processes (tests/fl): clients killed, controller restarted, nodes paused, logical clients, FedBuff, workloads beyond MNIST
	$(PYTHON) -m pytest -q -ra -m slow tests/fl

.PHONY: bench-robust
bench-robust: $(STAMP) ## every aggregation rule clean and with one sign-flipped client: 3 and 10 non-IID x100 (ROBUST_ARGS) -> results/bench/robust.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_robust.py $(BENCH_QUICK) $(ROBUST_ARGS)

# FedBuff vs synchronous FedAvg to 97 % on hetero links, 20 clients in namespaces (docs/scale.md).
FEDBUFF_ARGS ?=
.PHONY: bench-fedbuff
bench-fedbuff: $(STAMP) ## FedBuff vs FedAvg: wall time to 97 % on hetero, 20 clients in namespaces (root), 3 seeds -> results/bench/fedbuff.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_fedbuff.py $(BENCH_QUICK) $(FEDBUFF_ARGS)

# Adaptive bits and bandwidth per client (docs/adaptive.md); PROFILE=hetero4 CLIENTS=4 to match the bench.
UPLINK_MBIT ?= 8
SPEEDS ?= 1,1,0.5,0.25
# Entropy-coded qsgd frames; qsgd15: the fixed-width ones.
ADAPTIVE_CODEC ?= qsgdz15
.PHONY: fl-adaptive bench-adaptive test-adaptive
fl-adaptive: $(STAMP) ## FL with per-client qsgd bits and uplink rates each round: CLIENTS ROUNDS BACKEND PROFILE SAMPLES UPLINK_MBIT SPEEDS ADAPTIVE_CODEC FL_ARGS
	$(PYTHON) -m commlab.fl.run --codec $(ADAPTIVE_CODEC) --adaptive joint --total-uplink-mbit $(UPLINK_MBIT) --speed-factors $(SPEEDS) --clients $(CLIENTS) --rounds $(ROUNDS) --samples-per-round $(SAMPLES) --backend $(BACKEND) --profile $(PROFILE) $(FL_ARGS)

bench-adaptive: $(STAMP) ## adaptive (qsgd bits and rates; int8_sparse's rates) vs qsgd 2/4/8 bits, fp32, int8_sparse (equal split) on hetero4, 3 seeds to 97 %, 4 clients in namespaces (root) -> results/bench/adaptive.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_adaptive.py $(BENCH_QUICK) $(ADAPTIVE_ARGS)

test-adaptive: $(STAMP) ## the allocation against brute force, budget, monotonicity, fairness; estimates; the rate change applied (root)
	$(PYTHON) -m pytest -q tests/fl/test_adaptive.py tests/benchmarks/test_bench_adaptive.py

# Accuracy against epsilon: DP-FedAvg at three noise multipliers and without privacy, 100 logical
# clients, 10 per round (docs/privacy.md).
.PHONY: bench-privacy
bench-privacy: $(STAMP) ## DP-FedAvg accuracy vs epsilon, MNIST, 100 clients 10 per round, z 0.03/0.1/0.3 and none, fp32 and qsgd8 (PRIVACY_ARGS) -> results/bench/privacy.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_privacy.py $(BENCH_QUICK) $(PRIVACY_ARGS)

# What SecAgg+ costs a run: bytes per client and round, round time, plain against --secagg (docs/privacy.md).
.PHONY: bench-secagg
bench-secagg: $(STAMP) ## SecAgg+, DP-FedAvg and DP under SecAgg+ against plain FedAvg: fp32 and int8, 4 clients on 10 Mbit links (namespaces as root), bytes up per client and round, round time, accuracy (SECAGG_ARGS) -> results/bench/secagg.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_secagg.py $(BENCH_QUICK) $(SECAGG_ARGS)
