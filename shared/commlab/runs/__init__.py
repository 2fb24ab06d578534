"""Launching runs: the nodes of a run (`roster`), their local processes (`launch`), per-run key
material (`keys`), numbers claimed against everything else running on the machine (`claims`) and
the test-only halting points of nodes (`fault_points`)."""
