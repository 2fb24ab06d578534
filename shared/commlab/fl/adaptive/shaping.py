"""The client's side of the adaptive allocation: the codec parameters its bits name, its emulated
compute slowdown, its uplink shaped to the allocated rate, and the measurements it reports."""
from __future__ import annotations

import math
import os
import time

import numpy as np

from commlab.codecs import Codec
from commlab.dds.settings import SEND_WINDOW

from .bits import BITS, frame_size_estimates, levels


class ClientSide:
    """The client's side: the codec its bits name, its emulated compute slowdown, its uplink rate
    (tc on its own interface, inside its namespace or container), and what it measures for its
    reports (payload goodput of each upload, until every reader acknowledged it)."""

    def __init__(self, name: str, link_profile: str, interface: str, speed_factor: float = 1.0, log=print,
                 send_window_bytes: int | None = None):
        from commlab.links.profiles import link_for, queue_floor_for
        from commlab.links.spec import LinkError
        self.name, self.speed_factor, self.log = name, speed_factor, log
        # The uplink's queue at any allocated rate: room for the node's DDS send window (None: the default).
        self.queue_floor = queue_floor_for(send_window_bytes or SEND_WINDOW)
        try:
            self.link_bps = link_for(link_profile, name).rate_bps
        except (LinkError, KeyError):
            self.link_bps = math.inf
        # Only where the profile was applied to this node's own interface (not loopback), as root.
        self.can_shape = interface != "lo" and os.geteuid() == 0 and math.isfinite(self.link_bps)
        self.rate_bps = self.link_bps if self.can_shape else math.nan
        self.upload_rate_bps = self.rate_bps  # the rate of the last upload (the csv's rate_bps)
        self.prev_upload_Bps, self.prev_rate_Bps, self.prev_at_link_rate = 0.0, 0.0, False
        self.bits: int | None = None
        self.upload_s = self.goodput_Bps = math.nan
        self._warned = False

    def codec_params(self, cmd) -> dict:
        """The command's codec parameters, at this client's bits (the qsgd codec's levels) when
        the command names them."""
        q = cmd.client_bits.get(self.name) if cmd.client_bits else None
        self.bits = None
        if q is None:
            return dict(cmd.codec_params)
        if not isinstance(q, int) or isinstance(q, bool) or q not in BITS:
            self.log(f"round {cmd.round}: ignoring bits {q!r} (need 1..8); using {cmd.codec}")
            return dict(cmd.codec_params)
        self.bits = q
        return {**cmd.codec_params, "levels": levels(q)}

    def stretch(self, train_s: float) -> float:
        """Emulated slower compute: sleep (1/speed_factor - 1) x the measured training time."""
        if self.speed_factor >= 1:
            return 0.0
        start = time.perf_counter()
        time.sleep(train_s * (1 / self.speed_factor - 1))
        return time.perf_counter() - start

    def before_upload(self, cmd) -> None:
        """Set the uplink to the allocated rate (never above this client's own link), or back to
        the link rate when the command allocates none."""
        rate = cmd.client_rates_Bps.get(self.name) if cmd.client_rates_Bps else None
        target = self.link_bps
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate) and rate > 0:
            target = min(rate * 8, self.link_bps)
        elif rate is not None:
            self.log(f"round {cmd.round}: ignoring rate {rate!r}; uploading at the link rate")
        if not self.can_shape:
            if rate is not None and not self._warned:
                self.log("uplink rate NOT applied: no shaped interface of its own (loopback or not root)")
                self._warned = True
            return
        self._shape(cmd, target)

    def _shape(self, cmd, target_bps: float) -> None:
        if target_bps != self.rate_bps:
            from commlab.links.profiles import set_rate
            from commlab.links.spec import LinkError
            try:
                set_rate(target_bps, queue_floor=self.queue_floor)
                self.rate_bps = target_bps
            except LinkError as e:  # the round goes on at the rate that is set; the csv says which
                self.log(f"round {cmd.round}: uplink rate NOT changed to {target_bps / 1e6:.2f} Mbit/s: {e}")

    def after_upload(self, cmd, nbytes: int, started: float, publisher, timeout_s: float) -> None:
        """Measure the upload: commands that allocate (bits or a rate) wait until every reader
        acknowledged it, so rate-only baselines measure their uploads as the adaptive policy does."""
        if cmd.client_bits or cmd.client_rates_Bps:
            publisher.wait_for_acks(timeout_s)
        self.upload_s = time.perf_counter() - started
        self.goodput_Bps = nbytes / self.upload_s if self.upload_s > 0 else math.nan
        self.prev_upload_Bps = self.goodput_Bps if math.isfinite(self.goodput_Bps) else 0.0
        self.prev_at_link_rate = not self.can_shape or self.rate_bps >= self.link_bps
        self.prev_rate_Bps = self.rate_bps / 8 if self.can_shape else 0.0
        self.upload_rate_bps = self.rate_bps
        # The allocated rate is the upload's share of B. Kept afterwards, it would also carry the
        # acknowledgements of the next model broadcast: at 0.25 Mbit/s that broadcast took 1.9-3.7 s
        # instead of 0.55 s (measured), a cost no upload caused. Back to the own link until the next upload.
        if self.can_shape:
            self._shape(cmd, self.link_bps)

    def size_report(self, codec: Codec, update: np.ndarray, frame_len: int) -> dict[str, int]:
        """Frames sized by their content (qsgdz) at allocated bits: the update's frame bytes at
        every bits (keys as strings, as JSON carries them), so the controller can weigh bits it
        has not seen; {} else."""
        if self.bits is None or not codec.sized_by_content:
            return {}
        sizes = frame_size_estimates(update, codec.family, self.bits, frame_len, codec.bucket)
        return {str(q): v for q, v in sizes.items()}

    def report(self, compute_s: float) -> dict:
        """ClientUpdate fields (the goodput is the previous upload's: this one is not done yet)."""
        return {"compute_s": compute_s, "prev_upload_Bps": self.prev_upload_Bps,
                "prev_rate_Bps": self.prev_rate_Bps, "prev_at_link_rate": self.prev_at_link_rate}

    def row(self, stretch_s: float) -> dict:
        def num(v: float, nd: int) -> float | str:
            return round(v, nd) if math.isfinite(v) else ""
        return {"bits": "" if self.bits is None else self.bits, "rate_bps": num(self.upload_rate_bps, 0),
                "upload_s": num(self.upload_s, 4), "goodput_Bps": num(self.goodput_Bps, 1),
                "stretch_s": round(stretch_s, 4)}
