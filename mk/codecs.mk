# Codec benchmark (docs/codecs.md): wire size, throughput vs memcpy, error; CSV in results/bench/.
.PHONY: bench-codecs
bench-codecs: $(STAMP) ## codec table: wire bytes, encode/decode MB/s vs memcpy, error -> results/bench/codecs.csv
	$(PYTHON) benchmarks/bench_codecs.py
