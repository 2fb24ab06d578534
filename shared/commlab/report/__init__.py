"""Reports over results/: pandas tables (summary.csv, report.md) and matplotlib figures (build.py),
TensorBoard events and MLflow runs (tracking.py). Nothing is imported here: a launcher that only
follows its run into TensorBoard loads neither pandas nor matplotlib."""
