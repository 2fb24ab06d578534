# Containerized testbed: engine bootstrap, images, the default compose experiment.
.PHONY: docker-engine images up

docker-engine: ## install and start what containers need: engine (198.18.0.0/15 only), compose v2, debootstrap (root)
	scripts/docker-bootstrap.sh

images: $(STAMP) ## build base + controller/client/worker images (debootstrap base when no registry answers)
	$(PYTHON) -m commlab.testbed.images

up: docker-engine images ## run the default experiment in containers: FL int8_sparse, 2 clients, 10mbit (docker compose up)
	docker compose up --abort-on-container-failure

# The same experiments on a single-node Docker Swarm (root): make stack-up; BACKEND=swarm on any fl-%/ddp-% target.
.PHONY: stack-up stack-down bench-stack
stack-up: docker-engine images ## the default experiment (as `up`: FL int8_sparse, 2 clients, 10mbit) as a stack on a single-node Docker Swarm (docs/scale.md)
	$(PYTHON) -m commlab.fl.run --backend swarm --codec int8_sparse --clients 2 --rounds 5 --samples-per-round 6000 --profile 10mbit

stack-down: $(STAMP) ## remove leftover stacks and leave the single-node swarm that stack-up made
	$(PYTHON) -m commlab.testbed.swarm down

bench-stack: docker-engine images ## the same FL run on compose and on the swarm: bytes and accuracy side by side -> results/bench/stack.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_stack.py $(BENCH_QUICK)

# LINK_BACKEND=netns: local processes in network namespaces (root); docker: one container per node.
# LINK_COMM_ARGS: --profile P --rounds R --codec C
LINK_BACKEND ?= netns
LINK_COMM_ARGS ?=
.PHONY: bench-link-comm
bench-link-comm: $(STAMP) ## fp32 vs int8_sparse FL communication time per round on 10 Mbit links, LINK_BACKEND netns|docker (root; LINK_COMM_ARGS) -> results/bench/link-comm.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_link_comm.py --backend $(LINK_BACKEND) $(BENCH_QUICK) $(LINK_COMM_ARGS)

# A swarm across two Docker engines on this machine: dockerds in network namespaces of their own (root).
.PHONY: bench-swarm-engines engine-pair-down
bench-swarm-engines: docker-engine images ## the same FL run on compose and on a swarm across two Docker engines (each a dockerd in its own network namespace): per-round models must be bit-identical -> results/bench/swarm-engines.{csv,md} (root; QUICK=1)
	$(PYTHON) benchmarks/bench_swarm_engines.py $(BENCH_QUICK)

engine-pair-down: $(STAMP) ## stop and remove what an interrupted bench-swarm-engines left: its engines (by pid), namespaces, veth pair, data
	$(PYTHON) -m commlab.testbed.engine_pair down
