"""Private federated learning: client-level differential privacy (dp), its accountant, and
secure aggregation (secagg) of quantized updates (docs/privacy.md)."""
