# Data-parallel training over DDS (docs/ddp.md): WORLD equal workers, dense allreduce or DGC.
# make ddp-dgc WORLD=3 EPOCHS=2 BACKEND=auto|local|docker PROFILE=lan|10mbit|1mbit|hetero
EPOCHS ?= 2

.PHONY: ddp-dgc ddp-dense
ddp-dgc ddp-dense: ddp-%: $(STAMP) ## DDP training run (WORLD, EPOCHS, BACKEND, PROFILE); results/<run-id>/
	$(PYTHON) -m commlab.ddp.run --method $* --world $(WORLD) --epochs $(EPOCHS) --backend $(BACKEND) --profile $(PROFILE)
