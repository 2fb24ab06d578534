# DDS transport (commlab.dds): tests and the DDS-vs-TCP benchmark.
.PHONY: bench-transport test-transport

bench-transport: $(STAMP) ## DDS vs TCP goodput on loopback and a 10 Mbit tbf link (needs root for namespaces)
	$(PYTHON) benchmarks/bench_transport.py --json results/bench/transport.json

test-transport: $(STAMP) ## DDS transport tests (tests/dds: unit, multi-process, network namespaces) and message authentication
	$(PYTHON) -m pytest -q -ra tests/dds tests/security/test_auth.py

.PHONY: bench-auth
bench-auth: $(STAMP) ## cost of authenticated messages: DDS goodput with/without, loopback and a 10 Mbit link -> results/bench/auth.csv
	$(PYTHON) benchmarks/bench_auth.py
