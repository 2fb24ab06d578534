"""Sweeps (docs/sweeps.md): a grid or list over launcher flags and seeds, each cell a run whose id
is a hash of its settings, run as many at once as the machine holds, resumable after a kill, then
one report with its figures. `python -m commlab.sweep experiments/sweeps/smoke.json` (make sweep)."""
