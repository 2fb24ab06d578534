# Codec benchmark (docs/codecs.md): wire size, throughput vs memcpy, error; table in results/bench/.
.PHONY: bench-codecs
bench-codecs: $(STAMP) ## codec table: wire bytes, encode/decode MB/s vs memcpy, error -> results/bench/codecs.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_codecs.py $(BENCH_QUICK)

# Every compressor in FL and DDP (docs/codecs.md): bytes vs fp32/dense, accuracy delta, comm time.
# Short runs by default; MATRIX_ARGS="--fl-rounds 10 --fl-samples 6000 --ddp-epochs 2 --ddp-train-subset 20000" for the full ones.
MATRIX_ARGS ?=
.PHONY: bench-matrix
bench-matrix: $(STAMP) ## every compressor x {FL, DDP}: bytes, accuracy delta, comm time -> results/bench/matrix.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_matrix.py $(BENCH_QUICK) $(MATRIX_ARGS)

# Both directions, one-to-many (docs/fl.md): compressed model broadcast and multicast on 10 Mbit links (root).
DOWNLINK_ARGS ?=
.PHONY: bench-downlink
bench-downlink: $(STAMP) ## compressed broadcast + multicast vs fp32 unicast, 10 Mbit namespaces (root) -> results/bench/downlink-*.{csv,md} (QUICK=1)
	$(PYTHON) benchmarks/bench_downlink.py $(BENCH_QUICK) $(DOWNLINK_ARGS)

# Where compression pays off (docs/codecs.md): FL round and DDP step time and bytes against the link rate
# (loopback, 1 Gbit/s, 100, 10, 1 Mbit/s namespaces, root), every compressor and the gloo peers.
CROSSOVER_ARGS ?=
.PHONY: bench-crossover
bench-crossover: flwr ## FL round / DDP step time and bytes vs link rate per compressor, gloo and Flower, the rate where each pays off -> results/bench/crossover.{csv,md,svg} (QUICK=1)
	$(PYTHON) benchmarks/bench_crossover.py $(BENCH_QUICK) $(CROSSOVER_ARGS)
