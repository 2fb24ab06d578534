# Data-parallel training over DDS (docs/ddp.md): WORLD equal workers, one gradient exchange per step.
# make ddp-<method> WORLD=3 EPOCHS=2 BACKEND=auto|local|docker|swarm PROFILE=lan|10mbit|1mbit|hetero DDP_ARGS="--train-subset 2000"
# Workloads (docs/workloads.md): MODEL=resnet18 DATASET=cifar10 (or synthetic:cifar10) DATA_DIR=...
# <method>: dense (the fp32 allreduce) or any registered codec, exchanged as it declares: fp16 and
# bf16 allreduced in their own frames, powersgd<r> by two allreduces, dgc, int8, qsgd4, signsgd,
# randomk, ... by allgather of frames.
EPOCHS ?= 2
DDP_ARGS ?=

ddp-%: $(STAMP) ## DDP run with method % (dense, fp16, bf16, dgc, powersgd2, int8, qsgd4, signsgd, ...): WORLD EPOCHS BACKEND PROFILE MODEL DATASET DATA_DIR DDP_ARGS
	$(PYTHON) -m commlab.ddp.run --method $* --world $(WORLD) --epochs $(EPOCHS) --backend $(BACKEND) --profile $(PROFILE) --model $(MODEL) --dataset $(DATASET) $(DDP_ARGS)

.PHONY: bench-ddp
bench-ddp: $(STAMP) ## dense allreduce vs DGC, same seeds and data: bytes after warm-up, accuracy gap, step times (WORLD EPOCHS) -> results/bench/ddp.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_ddp.py --world $(WORLD) $(if $(QUICK),--quick,--epochs $(EPOCHS))
