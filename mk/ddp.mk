# Data-parallel training over DDS (docs/ddp.md): WORLD equal workers, dense allreduce or DGC.
# make ddp-dgc WORLD=3 EPOCHS=2 BACKEND=auto|local|docker PROFILE=lan|10mbit|1mbit|hetero DDP_ARGS="--train-subset 2000"
EPOCHS ?= 2
DDP_ARGS ?=

.PHONY: ddp-dgc ddp-dense
ddp-dgc ddp-dense: ddp-%: $(STAMP) ## DDP training run (WORLD, EPOCHS, BACKEND, PROFILE, DDP_ARGS); results/<run-id>/
	$(PYTHON) -m commlab.ddp.run --method $* --world $(WORLD) --epochs $(EPOCHS) --backend $(BACKEND) --profile $(PROFILE) $(DDP_ARGS)
