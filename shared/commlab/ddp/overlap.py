"""The dense ring allreduce overlapped with backward, as torch DDP's Reducer does with its buckets.

Each parameter's gradient is copied into a preallocated flat float32 vector (flatten_grads order)
by a post-accumulate-grad hook the moment backward has produced it. The ring allreduce starts
before backward, in a thread of its own, and reads this rank's values of each block only once every
parameter overlapping that block is in (Group.allreduce_async `ready`); until then it runs the
blocks that can go. The last layers' gradients, ready first, cross the network while the first
layers' backward still runs. Every element is summed in the same order as without overlap, so the
bytes on the wire and the trained models are the same.

Steps take turns with two such vectors: the one step k fills is filled again at step k+2, after
step k+1's allreduce has finished, when the ring no longer keeps step k's blocks for a resend. So
the ring keeps them by reference instead of copying them (Group.allreduce_async `kept`).

    reducer = Reducer(model, node.announcer.directory.changed)
    with reducer.filling():                  # the hooks copy gradients into reducer.flat
        pending = Pending(group.allreduce_async("7/grads", reducer.flat, ready=reducer.ready, kept=True).wait)
        loss.backward()
    mean = pending.result()                  # raises the ring's PeerLost here, in the training thread

The hooks stay on the parameters and copy only inside filling().
"""
from __future__ import annotations

import bisect
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np
import torch

from commlab.dds import DdsError


class Reducer:
    """One flat gradient vector filled during backward, with which of its parameters are in."""

    def __init__(self, model: torch.nn.Module, changed: threading.Condition | None = None):
        """`changed`: the condition the ring waits on (the node directory's), notified as gradients come in."""
        self.params = list(model.parameters())
        sizes = [p.numel() for p in self.params]
        self.starts = [0, *np.cumsum(sizes).tolist()]  # parameter i is flat[starts[i]:starts[i + 1]]
        self.flats = (np.empty(self.starts[-1], dtype=np.float32), np.empty(self.starts[-1], dtype=np.float32))
        self._tensors = tuple(torch.from_numpy(f) for f in self.flats)  # the same memory, for copy_ from a gradient
        self._turn = 0  # which of the two vectors filling() fills
        self._in = [False] * len(self.params)
        self._filling = False
        self._cancelled: str | None = None
        self._cond = changed if changed is not None else threading.Condition()
        for i, p in enumerate(self.params):
            if p.requires_grad:  # a frozen parameter never has a gradient: complete() writes its zeros
                p.register_post_accumulate_grad_hook(lambda p, i=i: self._on_grad(i))

    @property
    def flat(self) -> np.ndarray:
        """The vector the current (else the last) filling() fills."""
        return self.flats[self._turn]

    def _copy(self, i: int) -> None:
        grad = self.params[i].grad
        piece = self._tensors[self._turn][self.starts[i]:self.starts[i + 1]]
        if grad is None:
            piece.zero_()
        else:
            piece.copy_(grad.detach().reshape(-1))

    def _on_grad(self, i: int) -> None:
        if not self._filling:
            return
        self._copy(i)
        with self._cond:
            self._in[i] = True
            self._cond.notify_all()

    @contextmanager
    def filling(self) -> Iterator[None]:
        """Inside: the hooks copy each gradient as backward produces it. On a normal exit every
        parameter without one (unused, frozen) gets its zeros, so the whole vector is in; on an
        exception a ring still waiting for values is told why it will get none."""
        with self._cond:
            self._in = [False] * len(self.params)
            self._cancelled = None
            self._turn ^= 1
        self._filling = True
        try:
            yield
        except BaseException as e:
            with self._cond:
                self._cancelled = f"backward failed: {type(e).__name__}: {e}"
                self._cond.notify_all()
            raise
        finally:
            self._filling = False
        for i, done in enumerate(self._in):
            if not done:
                self._copy(i)
        with self._cond:
            self._in = [True] * len(self.params)
            self._cond.notify_all()

    def ready(self, lo: int, hi: int) -> bool:
        """flat[lo:hi] holds this rank's final values (DdsError if backward failed). The ring asks
        under the lock of `changed`, which the hooks notify."""
        first = bisect.bisect_right(self.starts, lo) - 1
        last = max(first, bisect.bisect_left(self.starts, hi) - 1)  # the parameters overlapping [lo, hi)
        with self._cond:
            if self._cancelled is not None:
                raise DdsError(f"allreduce stopped waiting for this rank's gradients: {self._cancelled}")
            return all(self._in[first:last + 1])


class Pending:
    """A call running in a thread of its own; result() returns its value or raises its error in
    the caller's thread."""

    def __init__(self, call: Callable[[], np.ndarray], name: str = "overlapped allreduce"):
        self._value: np.ndarray | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name=name, daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], np.ndarray]) -> None:
        try:
            self._value = call()
        except BaseException as e:  # raised again by result(), in the training thread
            self._error = e

    def result(self) -> np.ndarray:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value
