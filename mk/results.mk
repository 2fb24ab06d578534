# Result tables under docs/results/, each headed by its command, commit, date, machine and wall
# time (commlab.report.results_doc). QUICK=1: small settings, minutes; without: the published
# settings. Namespaces for the 10 Mbit/s rows need root; as a plain user those rows are skipped.
# matrix-fashion_mnist runs its sweep file (experiments/sweeps/matrix-fashion_mnist[-quick].json),
# then bench_matrix builds the table from those cells.
RESULTS ?= codecs auth transport chaos
.PHONY: results
results: $(STAMP) $(if $(filter crossover peers-fl-%,$(RESULTS)),flwr) ## rerun the self-contained benchmarks (RESULTS: codecs auth transport chaos; also secagg and swarm-engines (root), minutes, privacy and peers-resnet18 (root: 10 Mbit/s namespaces), about half an hour, peers-fl-lan and peers-fl-1gbit (Flower; root for 1gbit), about 10 minutes each, crossover (root, Flower), about an hour, matrix-fashion_mnist, hours) into docs/results/*.md (QUICK=1: minutes)
	$(PYTHON) -m commlab.report.results_doc $(if $(QUICK),--quick) $(RESULTS)
