"""Each client's compression memory between its rounds (error feedback's residual, DGC's
accumulation, PowerSGD's warm start), for a process that trains one client or many.

A process shares one Compression (codec + memory object) among the clients it hosts and swaps
each client's state in before encoding and out after.

One client (in memory): the Compression that encoded its last round holds its state, and nothing
else does: no copy of a model-sized state is kept. A round encoded again is refused: the process
resends the frame it sent for that round (fl.client keeps it), which is what a second encode
from the state before the round would make. An encode the codec refuses may have consumed the
state (error feedback compensates in place): the client starts afresh.

Many (logical clients): one checksummed file per client under `folder`, with the state before
and after the last round it encoded, so a host of hundreds holds one client's state at a time, a
restarted host continues where its clients were, and a round run again (after a controller
restart) starts from the state before it (the files are removed when the run is over: with
int8_sparse each holds the 6.7 MB residual twice).
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
    after: dict   # the state after it


class ClientMemory:
    def __init__(self, folder: Path | None = None):
        self.folder = folder
        # (compression, client, round): the compression that last encoded, and for whom, still
        # holds that client's state after that round; its next round needs no copy swapped in.
        self._live: tuple[Compression, int, int] | None = None

    def reset(self) -> None:
        """A new codec (the command named another one): every client starts afresh."""
        self._live = None
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            for path in self.folder.glob("client-*.state"):
                path.unlink()

    def discard(self) -> None:
        """The run is over: drop every client's state (a host of many: its folder)."""
        self._live = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def encode(self, client: int, rnd: int, delta: np.ndarray, compression: Compression) -> bytes:
        """Encode client `client`'s delta of round `rnd` through its own memory; `compression` is
        freshly built (its state is the client's first) or the one that encoded the client's last
        round, and is left holding the client's new state. ValueError: in memory, a round encoded
        again or a second client."""
        live = self._live
        if self.folder is None:
            _take_over(client, rnd, compression, live)  # refuses before anything moved
            self._live = None  # an encode that raises may have consumed the state
            payload = compression.encode(delta)
        else:
            self._live = None
            _restore(client, rnd, compression, live, self._get(client))
            before = compression.state_dict()  # state_dict() returns copies
            payload = compression.encode(delta)
            self._put(client, Entry(rnd, before, compression.state_dict()))
        self._live = (compression, client, rnd)
        return payload

    def _path(self, client: int) -> Path:
        return self.folder / f"client-{client}.state"

    def _get(self, client: int) -> Entry | None:
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
        doc = {"round": entry.round, "before": _tensors(entry.before), "after": _tensors(entry.after)}
        write_checksummed(self._path(client), lambda f: torch.save(doc, f))


def _take_over(client: int, rnd: int, compression: Compression, live: tuple[Compression, int, int] | None) -> None:
    """In memory: `compression` goes on from the one that holds the client's state (nothing held:
    the client's first round, or its last encode was refused: it starts afresh)."""
    if live is None:
        return
    holder, held_client, held_round = live
    if held_client != client:
        raise ValueError(f"client memory in RAM holds client {held_client}, asked to encode client {client}: "
                         "a process hosting several clients keeps their memories in a folder")
    if held_round >= rnd:
        raise ValueError(f"client {client}: round {rnd} encoded again after round {held_round}: in RAM no state "
                         "before a round is kept; resend the frame sent for it")
    if holder is not compression:  # a rebuilt compressor goes on from the one that holds the state
        compression.load_state_dict(holder.state_dict())


def _restore(client: int, rnd: int, compression: Compression, live: tuple[Compression, int, int] | None,
             entry: Entry | None) -> None:
    """In files: load into `compression` the client's state before round `rnd` (the state before
    `entry`'s round when it is run again, else the state after it)."""
    if entry is None:
        return
    if entry.round == rnd:  # run again
        compression.load_state_dict(_copy(entry.before))
    elif live is None or live[1:] != (client, entry.round):  # held by no live compression
        compression.load_state_dict(_copy(entry.after))
    elif live[0] is not compression:  # a rebuilt compressor goes on from the one that holds it
        compression.load_state_dict(live[0].state_dict())


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
