"""Each client's compression memory between its rounds (error feedback's residual, DGC's
accumulation, PowerSGD's warm start), for a process that trains one client or many.

A process shares one Compression (codec + memory object) among the clients it hosts and swaps
each client's state in before encoding and out after. Per client it keeps the state before and
after the last round it encoded: a round run again (after a controller restart) starts from the
state before it, so the lost first attempt leaves no trace. One client: kept in memory. Many
(logical clients): one checksummed file per client under `folder`, so a host of hundreds holds
one client's state at a time, and a restarted host continues where its clients were (the files
are removed when the run is over: with int8_sparse each holds the 6.7 MB residual twice).
"""
from __future__ import annotations

import copy
import io
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from commlab.codecs.compression import Compression
from commlab.config.schema import ConfigError
from commlab.output.checksummed import read_checksummed, write_checksummed


@dataclass
class Entry:
    round: int    # the last round encoded
    before: dict  # the state before it
    after: dict | None  # the state after it; None in memory (ClientMemory.encode)


class ClientMemory:
    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self._ram: dict[int, Entry] = {}
        # (compression, client, round): the compression that last encoded, and for whom, still
        # holds that client's state after that round; its next round needs no copy swapped in.
        self._live: tuple[Compression, int, int] | None = None

    def reset(self) -> None:
        """A new codec (the command named another one): every client starts afresh."""
        self._ram.clear()
        self._live = None
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            for path in self.folder.glob("client-*.state"):
                path.unlink()

    def discard(self) -> None:
        """The run is over: drop every client's state (a host of many: its folder)."""
        self._ram.clear()
        self._live = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def encode(self, client: int, rnd: int, delta: np.ndarray, compression: Compression) -> bytes:
        """Encode client `client`'s delta of round `rnd` through its own memory; `compression` is
        freshly built (its state is the client's first) and is left holding the client's new state."""
        self._restore(client, rnd, compression)
        before = compression.state_dict()  # state_dict() returns copies
        if self.folder is None:
            # In memory the state after the round is kept by `compression` alone (self._live), not
            # copied: one model-sized state less for a large model. Recorded before encoding: an
            # encode that raises leaves the state the round started from.
            self._ram[client] = Entry(rnd, before, None)
        payload = compression.encode(delta)
        if self.folder is not None:
            self._put(client, Entry(rnd, before, compression.state_dict()))
        self._live = (compression, client, rnd)
        return payload

    def _restore(self, client: int, rnd: int, compression: Compression) -> None:
        """Load into `compression` the client's state before round `rnd`."""
        entry, live, self._live = self._get(client), self._live, None  # an encode that raises may move the state
        if entry is None:
            return
        holds = live is not None and live[1:] == (client, entry.round)  # live[0] holds the state after entry.round
        if entry.round == rnd or (entry.after is None and not holds):  # run again, or its encode raised
            compression.load_state_dict(_copy(entry.before))
        elif holds and live[0] is not compression:  # a rebuilt compressor goes on from the one that holds it
            compression.load_state_dict(live[0].state_dict())
        elif not holds:
            compression.load_state_dict(_copy(entry.after))

    def _path(self, client: int) -> Path:
        return self.folder / f"client-{client}.state"

    def _get(self, client: int) -> Entry | None:
        if self.folder is None:
            return self._ram.get(client)
        path = self._path(client)
        if not path.exists():
            return None
        try:
            doc = torch.load(io.BytesIO(read_checksummed(path)), weights_only=True)
            return Entry(int(doc["round"]), _arrays(doc["before"]), _arrays(doc["after"]))
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file
            raise ConfigError(f"{path}: not a client memory file ({type(e).__name__}: {e})") from None

    def _put(self, client: int, entry: Entry) -> None:
        if self.folder is None:
            self._ram[client] = entry
            return
        doc = {"round": entry.round, "before": _tensors(entry.before), "after": _tensors(entry.after)}
        write_checksummed(self._path(client), lambda f: torch.save(doc, f))


def _copy(state: Any) -> Any:
    return copy.deepcopy(state)


def _tensors(obj: Any) -> Any:
    """numpy arrays -> tensors, recursively: torch.load(weights_only=True) reads tensors, not arrays."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.array(obj))
    if isinstance(obj, dict):
        return {k: _tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tensors(v) for v in obj)
    return obj


def _arrays(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.numpy()
    if isinstance(obj, dict):
        return {k: _arrays(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_arrays(v) for v in obj)
    return obj
