# Reference peers on the testbed's links (docs/peers.md): torch DDP over gloo and a centralized trainer.
# make peer-gloo HOOK=none|fp16|powersgd WORLD=3 EPOCHS=2 PROFILE=lan|10mbit PEER_ARGS="--train-subset 6000"
# make centralized WORLD=3 EPOCHS=2
# make peer-flower CLIENTS=2 ROUNDS=10 PROFILE=lan|10mbit   /   make bench-peers-fl PROFILE=10mbit [SMOKE=1]
HOOK ?= none
PEER_ARGS ?=
EPOCHS ?= 2

.PHONY: peer-gloo centralized bench-peers peer-flower bench-peers-fl flwr
peer-gloo: $(STAMP) ## torch DDP over gloo with comm hook HOOK (none, fp16, powersgd): WORLD EPOCHS PROFILE PEER_ARGS
	$(PYTHON) -m commlab.peers.run --kind gloo --hook $(HOOK) --world $(WORLD) --epochs $(EPOCHS) --profile $(PROFILE) $(PEER_ARGS)

centralized: $(STAMP) ## one process on the union of WORLD workers' data, same budget: the accuracy ceiling
	$(PYTHON) -m commlab.peers.run --kind centralized --world $(WORLD) --epochs $(EPOCHS) --profile $(PROFILE) $(PEER_ARGS)

bench-peers: $(STAMP) ## DDS dense/dgc/powersgd2 vs gloo none/fp16/powersgd vs centralized on 10 Mbit namespaces (root)
	$(PYTHON) benchmarks/bench_peers.py

# Flower is an optional extra for these targets only, not a dependency of the nodes.
flwr: $(STAMP)
	@$(PYTHON) -c "import flwr" 2>/dev/null || $(PYTHON) -m pip install -q flwr

peer-flower: flwr ## Flower FedAvg (server + clients over its gRPC) with make fl-fp32's settings: CLIENTS ROUNDS PROFILE PEER_ARGS
	$(PYTHON) -m commlab.peers.run --kind flower --clients $(CLIENTS) --rounds $(ROUNDS) --profile $(PROFILE) $(PEER_ARGS)

bench-peers-fl: flwr ## DDS fp32 and int8_sparse vs Flower FedAvg, one table (SMOKE=1: 2 rounds on small subsets)
	$(PYTHON) benchmarks/bench_peers_fl.py --profile $(PROFILE) --clients $(CLIENTS) $(if $(SMOKE),--smoke,--rounds $(ROUNDS))
