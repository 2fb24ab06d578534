"""Typed node configs: dataclasses checked field by field against a parsed JSON object, plus the
sections and validators every node config shares (FL controller/client, DDP worker).

Why not a schema library: the field list already lives in the dataclasses, so a ~60-line walker
gives one clear message naming the bad key (its dotted path) without a new dependency.
"""
from __future__ import annotations

import dataclasses
import fcntl
import ipaddress
import json
import math
import socket
import struct
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from commlab.runs.seeds import SeedTree, check_seed

T = TypeVar("T")


class ConfigError(ValueError):
    """Bad configuration; the message names the offending key (dotted path) or file."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: expected {_type_name(tp)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected an object, got {type(value).__name__}")
        return from_dict(tp, value, where)
    if origin is tuple:
        (item,) = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected an object, got {type(value).__name__}")
        _finite_numbers(value, where)
        return dict(value)
    # bool is an int in Python: refuse it where a number is meant, and accept ints for floats.
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: must be a finite number, got {value}")
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and type(value) is tp:
        return value
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")


def _finite_numbers(value: Any, where: str) -> None:
    """NaN/Inf nowhere in a free-form object (model, codec parameters): JSON has no such numbers,
    Python's json module reads NaN/Infinity anyway, and 1e999 is inf."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value}")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        _finite_numbers(item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]")


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass `cls` from `data`: unknown keys, missing keys and wrong types raise ConfigError."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    prefix = f"{where}." if where else ""
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = unknown[0] if unknown[0].isprintable() else repr(unknown[0])  # the message stays one line
        raise ConfigError(f"unknown key {prefix}{key} (allowed: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"missing key {prefix}{name}")
            continue
        kwargs[name] = _convert(data[name], hints[name], prefix + name)
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        check(prefix)
    return obj


def to_dict(obj: Any) -> dict[str, Any]:
    """Dataclass -> JSON-ready dict (tuples become lists)."""
    return dataclasses.asdict(obj, dict_factory=lambda kv: {k: list(v) if isinstance(v, tuple) else v for k, v in kv})


def load_config(cls: type[T], path: str | Path) -> T:
    """Read JSON file `path` into dataclass `cls`; every problem is a ConfigError naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, nesting too deep
        raise ConfigError(f"{path}: invalid JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object at top level")
    try:
        return from_dict(cls, data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def load_from_argv(prog: str, usage: str, argv: list[str], load: Callable[[str], T]) -> T | None:
    """What ``load`` makes of a node program's one argument, its config file; None after one line
    on stderr, the usage or the config error naming the problem (the program then exits 2)."""
    if len(argv) != 1:
        print(f"usage: {usage}", file=sys.stderr)
        return None
    try:
        return load(argv[0])
    except ValueError as e:  # ConfigError, or a number in the environment that is none
        print(f"{prog}: config error: {e}", file=sys.stderr)
        return None


def positive(where: str, **values: float) -> None:
    for name, v in values.items():
        if v <= 0:
            raise ConfigError(f"{where}{name}: must be > 0, got {v}")


def existing(where: str, name: str, path: str | None) -> None:
    if path is not None and not Path(path).exists():
        # repr when the path holds control characters: the error stays one line
        shown = path if path.isprintable() else repr(path)
        raise ConfigError(f"{where}{name}: file not found: {shown}")


# The benchmarking range every container and namespace of the testbed uses: the only networks
# multicast may go out on (never loopback, never the machine's real interface).
PRIVATE_MULTICAST_NET = ipaddress.ip_network("198.18.0.0/15")


def interface_ipv4(name: str) -> ipaddress.IPv4Address | None:
    """The interface's IPv4 address (SIOCGIFADDR), or None if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return ipaddress.IPv4Address(raw[20:24])


@dataclass(frozen=True)
class DdsSection:
    domain_id: int
    interface: str = "lo"
    peers: tuple[str, ...] = ("127.0.0.1",)
    # Optional transport tuning; None keeps the commlab.dds.DdsSettings default.
    chunk_bytes: int | None = None
    write_timeout_s: float | None = None
    lease_s: float | None = None
    loopback_tuned: bool | None = None
    # off | discovery | data (commlab.dds.settings.MULTICAST); None: off with peers, discovery without.
    multicast: str | None = None
    # The link's MTU when below 1500 (a swarm overlay: 1450); None keeps 1500.
    link_mtu: int | None = None
    # Shaped links: IP frames per DDS datagram and a writer's send window (commlab.dds.settings).
    datagram_frames: int | None = None
    send_window_bytes: int | None = None
    # The link drops packets (a loss profile): NACKs and heartbeats tuned for repair (commlab.dds.settings).
    lossy_link: bool | None = None
    # This node's keyring (commlab.dds.auth): messages are authenticated when set. A path, never the key.
    key_file: str | None = None
    # With key_file: payloads encrypted too (AEGIS-128X4), as by default; false: authenticated, in clear.
    encrypt: bool | None = None
    # Loopback: ring blocks between processes of one host through shared memory (commlab.dds.shm); false: over UDP.
    shared_memory: bool | None = None
    # The ring allreduce's directions (1 or 2) and largest block; None: commlab.dds.settings' defaults.
    ring_directions: int | None = None
    ring_block_bytes: int | None = None

    def check(self, where: str) -> None:
        if not 0 <= self.domain_id <= 232:
            raise ConfigError(f"{where}domain_id: must be in 0..232, got {self.domain_id}")
        if self.multicast not in (None, "off", "discovery", "data"):
            raise ConfigError(f"{where}multicast: must be off, discovery or data, got {self.multicast!r}")
        if self.link_mtu is not None and not 1280 <= self.link_mtu <= 9000:
            raise ConfigError(f"{where}link_mtu: must be in 1280..9000, got {self.link_mtu}")
        if self.datagram_frames is not None and not 1 <= self.datagram_frames <= 44:
            raise ConfigError(f"{where}datagram_frames: must be in 1..44, got {self.datagram_frames}")
        if self.send_window_bytes is not None and not 4096 <= self.send_window_bytes <= 1 << 24:
            raise ConfigError(f"{where}send_window_bytes: must be in 4096..16777216, got {self.send_window_bytes}")
        if self.ring_directions not in (None, 1, 2):
            raise ConfigError(f"{where}ring_directions: must be 1 or 2, got {self.ring_directions!r}")
        if self.ring_block_bytes is not None and self.ring_block_bytes < 4:
            raise ConfigError(f"{where}ring_block_bytes: must be at least 4 (one float), got {self.ring_block_bytes}")

    def check_host(self, where: str = "dds.") -> None:
        """What only the machine the node runs on can tell: does `interface` exist here? Called at
        node start, not by check(): launchers parse the same configs on the host, where the eth0 of
        a container or network namespace need not exist."""
        try:
            names = [name for _, name in socket.if_nameindex()]
        except OSError:  # no way to list them: let DDS report it
            return
        if self.interface not in names:
            raise ConfigError(f"{where}interface: no interface {self.interface!r} on this machine "
                              f"(have: {', '.join(names)})")
        if self.multicast not in (None, "off"):
            address = interface_ipv4(self.interface)
            if address is None or address not in PRIVATE_MULTICAST_NET:
                raise ConfigError(f"{where}multicast: {self.multicast} is only allowed on a private network in "
                                  f"{PRIVATE_MULTICAST_NET}; interface {self.interface} has address {address}")



@dataclass(frozen=True)
class NamedSection:
    """Something built by registry name with keyword parameters: a model, a codec."""
    name: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelSection(NamedSection):
    name: str = "mnist_cnn"


@dataclass(frozen=True)
class SeedSection:
    """The run's two root seeds; every random stream of the run derives from them (commlab.runs.seeds)."""
    run: int = 0                # model init, sampling, local training, codecs, batch orders
    data: int | None = None     # the data subsets and how the training set is split; None: the run seed

    def check(self, where: str) -> None:
        problem = check_seed(where, "run", self.run) or check_seed(where, "data", self.data)
        if problem:
            raise ConfigError(problem)

    @property
    def tree(self) -> SeedTree:
        return SeedTree(self.run, self.data)


@dataclass(frozen=True)
class DatasetSection:
    name: str = "mnist"
    root: str | None = None  # data directory (official files and the cache); None: COMMLAB_DATA_DIR, else ~/.cache/commlab
    # Random subsets (seeded by the run's data seed, commlab.runs.seeds) for fast tests; None uses the whole split.
    train_subset: int | None = None
    test_subset: int | None = None

    def check(self, where: str) -> None:
        existing(where, "root", self.root)
        for name in ("train_subset", "test_subset"):
            if getattr(self, name) is not None:
                positive(where, **{name: getattr(self, name)})


@dataclass(frozen=True, kw_only=True)
class DdsNodeConfig:
    """What the config of every DDS node (FL controller and client, DDP worker) starts with: its run,
    where results go, its DDS section, and the link, model, dataset and seeds of the run."""
    run_id: str
    results_dir: str
    dds: DdsSection
    link_profile: str = "lan"  # recorded in the manifest; shaping is applied by the testbed
    model: ModelSection = ModelSection()
    dataset: DatasetSection = DatasetSection()
    seeds: SeedSection = SeedSection()  # the run's seed tree (commlab.runs.seeds); FL clients hold the controller's
