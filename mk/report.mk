# Reports and figures over results/ (docs/report.md). RUNS="id1 id2" restricts to named runs,
# TARGET sets the accuracy for the time-to-target column.
.PHONY: plots
plots: $(STAMP) ## report.md, summary.csv and PNG figures over results/ into results/report
	$(PYTHON) -m commlab.report $(if $(RUNS),--runs $(RUNS)) $(if $(TARGET),--target-accuracy $(TARGET)) --out results/report
