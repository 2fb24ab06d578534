"""Time to a target accuracy from a run's rounds table, and its spread over seeds: for the
benchmarks that compare time to accuracy (bench_fedbuff, bench_adaptive, bench_downlink)."""
from __future__ import annotations

import math
import statistics

import pandas as pd


def wall_times(rounds: pd.DataFrame) -> pd.Series:
    """Seconds since the start of training at each row: `wall_time_s`, or for runs written before
    that column the running sum of `round_time_s` (evaluation left out)."""
    if "wall_time_s" in rounds and rounds["wall_time_s"].notna().all():
        return rounds["wall_time_s"].astype(float)
    return rounds["round_time_s"].astype(float).cumsum()


def time_to_target(rounds: pd.DataFrame, target: float) -> dict:
    """The first row whose test accuracy reaches `target`: its wall time, its round (server
    version), the sum of round times up to it, and the bytes up until then; None when none does."""
    wall, hit = wall_times(rounds), rounds.index[rounds["test_accuracy"] >= target]
    if not len(hit):
        return {"time_to_target_s": None, "step_to_target": None, "time_to_target_excl_eval_s": None,
                "up_MB_to_target": None}
    i = hit[0]
    return {"time_to_target_s": float(wall[i]), "step_to_target": int(rounds["round"][i]),
            "time_to_target_excl_eval_s": float(rounds["round_time_s"].loc[:i].sum()),
            "up_MB_to_target": float(rounds["bytes_up"].loc[:i].sum() / 1e6)}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan  # a run that missed the target: inf stays inf


def seconds_or_inf(run: dict, key: str) -> float:
    """A run's time to target, infinitely slow when it never reached it (or failed)."""
    return math.inf if run.get(key) is None else float(run[key])


def spread(runs: list[dict], key: str) -> dict:
    """Over a group's runs (seeds): how many reached the target, and min/median/max of `key`."""
    times = [seconds_or_inf(r, key) for r in runs]
    return {"reached": f"{sum(not math.isinf(t) for t in times)}/{len(runs)}",
            "min_s": min(times), "median_s": median(times), "max_s": max(times)}
