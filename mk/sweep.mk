# Sweeps (docs/sweeps.md): a grid or list over launcher flags and seeds from a sweep file, each cell
# a run named by the hash of its settings; a stopped sweep resumes where it was. JOBS caps the cells
# run at once (default: what the cores hold); SWEEP_ARGS: --retry-failed, --report-only, --timeline RUN_ID.
SWEEP ?= experiments/sweeps/smoke.json
JOBS ?=
.PHONY: sweep
sweep: $(STAMP) ## run the sweep file SWEEP (default experiments/sweeps/smoke.json), resumable, then its report.md and figures -> results/sweeps/<name>/
	$(PYTHON) -m commlab.sweep $(SWEEP) $(if $(JOBS),--jobs $(JOBS)) $(SWEEP_ARGS)
