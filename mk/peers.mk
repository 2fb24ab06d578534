# Reference peers on the testbed's links (docs/peers.md): torch DDP over gloo and a centralized trainer.
# make peer-gloo HOOK=none|fp16|powersgd WORLD=3 EPOCHS=2 PROFILE=lan|10mbit BACKEND=auto|local|docker PEER_ARGS="--train-subset 6000"
# make centralized WORLD=3 EPOCHS=2
# make bench-peers [SMOKE=1] [PEERS_BENCH_ARGS="--model resnet18 --dataset synthetic:cifar10 --batch-size 8 --train-subset 120 --skip 2"]   /   make peer-flower CLIENTS=2 ROUNDS=10 PROFILE=lan|10mbit   /   make bench-peers-fl PROFILE=10mbit [SMOKE=1] [REPEATS=4]
# SMOKE=1 (or QUICK=1): a few steps / 2 rounds on small subsets with PROFILE (default lan), every row and ratio (CI runs both:
# tests/benchmarks/test_bench_peers_smoke.py)
HOOK ?= none
PEER_ARGS ?=
PEERS_BENCH_ARGS ?=
EPOCHS ?= 2

.PHONY: peer-gloo centralized bench-peers peer-flower bench-peers-fl flwr
peer-gloo: $(STAMP) ## torch DDP over gloo with comm hook HOOK (none, fp16, powersgd): WORLD EPOCHS PROFILE BACKEND PEER_ARGS
	$(PYTHON) -m commlab.peers.run --kind gloo --hook $(HOOK) --world $(WORLD) --epochs $(EPOCHS) --profile $(PROFILE) --backend $(BACKEND) $(PEER_ARGS)

centralized: $(STAMP) ## one process on the union of WORLD workers' data, same budget: the accuracy ceiling
	$(PYTHON) -m commlab.peers.run --kind centralized --world $(WORLD) --epochs $(EPOCHS) --profile $(PROFILE) $(PEER_ARGS)

bench-peers: $(STAMP) ## DDS dense ring/naive, int8, dgc, powersgd2 vs gloo none/fp16/powersgd vs centralized on 10 Mbit namespaces (root; SMOKE=1: 10 steps) -> results/bench/peers.{csv,md}
	$(PYTHON) benchmarks/bench_peers.py $(if $(or $(SMOKE),$(QUICK)),--quick --profile $(PROFILE)) $(PEERS_BENCH_ARGS)

# Flower is a test dependency (pyproject.toml's [test], the version pinned there), not one of the nodes.
flwr: $(STAMP)
	@$(PYTHON) -c "import flwr" 2>/dev/null || $(PYTHON) -m pip install -q "$$(grep -o 'flwr==[0-9.]*' pyproject.toml)"

peer-flower: flwr ## Flower FedAvg (server + clients over its gRPC) with make fl-fp32's settings: CLIENTS ROUNDS PROFILE PEER_ARGS
	$(PYTHON) -m commlab.peers.run --kind flower --clients $(CLIENTS) --rounds $(ROUNDS) --profile $(PROFILE) $(PEER_ARGS)

bench-peers-fl: flwr ## DDS fp32 and int8_sparse vs Flower FedAvg vs centralized, one table (SMOKE=1: 2 rounds on small subsets; REPEATS=N: each case N times, order alternating, medians) -> results/bench/peers-fl.{csv,md}
	$(PYTHON) benchmarks/bench_peers_fl.py --profile $(PROFILE) --clients $(CLIENTS) $(if $(or $(SMOKE),$(QUICK)),--quick,--rounds $(ROUNDS)) $(if $(REPEATS),--repeats $(REPEATS))
