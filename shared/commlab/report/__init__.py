"""Reports over results/: pandas tables (summary.csv, report.md) and matplotlib figures."""
from .build import Report, build_report

__all__ = ["Report", "build_report"]
