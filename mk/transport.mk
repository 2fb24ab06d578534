# DDS transport (commlab.dds): tests, the DDS-vs-TCP and the allreduce benchmarks.
.PHONY: bench-transport bench-allreduce test-transport

bench-transport: $(STAMP) ## DDS vs TCP goodput on loopback and a 10 Mbit tbf link (needs root for namespaces) -> results/bench/transport.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_transport.py $(BENCH_QUICK)

# ALLREDUCE_ARGS: --profile P --numel N --reps R --multicast data --chunk-bytes N --datagram-frames K --send-window B --no-netns
ALLREDUCE_ARGS ?=
bench-allreduce: $(STAMP) ## dense allreduce over DDS, naive vs ring, WORLD ranks on loopback and on 10 Mbit namespaces (root; ALLREDUCE_ARGS) -> results/bench/allreduce.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_allreduce.py --world $(WORLD) $(BENCH_QUICK) $(ALLREDUCE_ARGS)

test-transport: $(STAMP) ## DDS transport tests (tests/dds: unit, multi-process, network namespaces) and message authentication
	$(PYTHON) -m pytest -q -ra tests/dds tests/security/test_auth.py

.PHONY: bench-auth
bench-auth: $(STAMP) ## cost of authenticated (MAC) and encrypted (AEAD) messages: DDS goodput and CPU against plain, loopback and a 10 Mbit link -> results/bench/auth.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_auth.py $(BENCH_QUICK)
