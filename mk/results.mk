# Result tables under docs/results/, each headed by its command, commit, date, machine and wall
# time (commlab.report.results_doc). QUICK=1: small settings, minutes; without: the published
# settings. Namespaces for the 10 Mbit/s rows need root; as a plain user those rows are skipped.
# matrix-fashion_mnist runs its sweep file (experiments/sweeps/matrix-fashion_mnist[-quick].json),
# then bench_matrix builds the table from those cells.
RESULTS ?= codecs auth transport chaos
.PHONY: results
results: $(STAMP) $(if $(filter crossover peers-fl-%,$(RESULTS)),flwr) ## rerun the self-contained benchmarks (RESULTS: codecs auth transport chaos; also secagg and swarm-engines (root), privacy and peers-resnet18 (root: 10 Mbit/s namespaces), peers-fl-lan and peers-fl-1gbit (Flower; root for 1gbit), crossover (root, Flower), matrix-fashion_mnist (the longest); each table's header gives the wall time of the run that wrote it) into docs/results/*.md (QUICK=1: minutes)
	$(PYTHON) -m commlab.report.results_doc $(if $(QUICK),--quick) $(RESULTS)
