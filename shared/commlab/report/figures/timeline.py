"""A per-round timeline of one FL run, Gantt-style: a row per client and one for the controller,
each round's phases as bars on the run's wall clock.

The durations are measured (clients-<i>.csv: train_time_s + stretch_s, encode_time_s, upload_s;
rounds.csv: aggregate_time_s, broadcast_time_s, round_time_s, wall_time_s); where they sit is
derived: a round ends when its broadcast ends (wall_time_s) and began round_time_s earlier; each
client computes, encodes and uploads back to back from the round's start, then waits for the
slowest until the controller aggregates; the broadcast of the new model closes the round on every
row. Between rounds the controller evaluates and checkpoints."""
from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .layout import natural_key, new_figure, set_title

PHASES = {"compute": "tab:blue", "encode": "tab:orange", "upload": "tab:green",
          "wait for slowest": "lightgrey", "aggregate": "tab:purple", "broadcast": "tab:red",
          "evaluate, checkpoint": "tab:brown"}
CONTROLLER_ROW = "controller"


def number(value: object) -> float:
    """A CSV cell as seconds: empty or missing (a column the run did not write) is 0."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def phases(rounds: pd.DataFrame, clients: pd.DataFrame, first: int, last: int) -> pd.DataFrame:
    """Rows (row, phase, start_s, length_s) of rounds first..last."""
    out = []
    rounds = rounds.sort_values("round").reset_index(drop=True)
    for i, r in rounds.iterrows():
        rnd = int(r["round"])
        end = number(r["wall_time_s"]) or rounds["round_time_s"].loc[:i].sum()
        start = end - number(r["round_time_s"])
        broadcast, aggregate = number(r["broadcast_time_s"]), number(r["aggregate_time_s"])
        collected = end - broadcast - aggregate
        if first <= rnd <= last:
            for _, c in clients[clients["round"] == rnd].iterrows():
                at = start
                for phase, length in (("compute", number(c["train_time_s"]) + number(c.get("stretch_s"))),
                                      ("encode", number(c["encode_time_s"])), ("upload", number(c.get("upload_s")))):
                    out.append((str(c["client_id"]), phase, at, length))
                    at += length
                out.append((str(c["client_id"]), "wait for slowest", at, max(0.0, collected - at)))
            rows = [CONTROLLER_ROW, *sorted({str(c) for c in clients["client_id"]}, key=natural_key)]
            out += [(row, "broadcast", end - broadcast, broadcast) for row in rows]
            out.append((CONTROLLER_ROW, "aggregate", collected, aggregate))
        if first <= rnd < last and i + 1 < len(rounds):
            following = rounds.iloc[i + 1]
            next_start = number(following["wall_time_s"]) - number(following["round_time_s"])
            out.append((CONTROLLER_ROW, "evaluate, checkpoint", end, max(0.0, next_start - end)))
    return pd.DataFrame(out, columns=["row", "phase", "start_s", "length_s"])


def timeline_figure(rounds: pd.DataFrame, clients: pd.DataFrame, title_items: list[str],
                    most_rounds: int = 5) -> Figure:
    """The first `most_rounds` rounds of the run (a long run's bars would be slivers)."""
    first = int(rounds["round"].min())
    last = min(int(rounds["round"].max()), first + most_rounds - 1)
    bars = phases(rounds, clients, first, last)
    rows = [CONTROLLER_ROW, *sorted(set(bars["row"]) - {CONTROLLER_ROW}, key=natural_key)]
    fig, ax = new_figure(size=(8.0, 1.6 + 0.45 * len(rows)))
    for y, row in enumerate(rows):
        mine = bars[(bars["row"] == row) & (bars["length_s"] > 0)]
        for phase, d in mine.groupby("phase"):
            ax.broken_barh(list(zip(d["start_s"], d["length_s"])), (y - 0.35, 0.7), facecolors=PHASES[phase])
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("wall time since training started (s)")
    ax.grid(True, axis="x", alpha=0.3)
    shown = [p for p in PHASES if p in set(bars.loc[bars["length_s"] > 0, "phase"])]
    ax.legend([Patch(color=PHASES[p]) for p in shown], shown, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0, fontsize=8)
    set_title(fig, f"Per-round timeline, rounds {first}-{last}: measured phase durations, placed back to back",
              title_items)
    return fig
