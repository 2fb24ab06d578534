"""Adaptive FL uplinks (docs/adaptive.md): per-client qsgd bits and uplink rates chosen each round
from measured compute times and links. bits.py (what q bits cost), allocation.py (the optimisation),
estimates.py (smoothed per-client measurements), section.py (the controller config section),
planner.py (the controller's side), shaping.py (the client's side)."""
