"""Data-parallel training over DDS: WORLD equal workers, one gradient exchange per step
(dense allreduce or DGC allgather), distributed evaluation, per-step profile."""
