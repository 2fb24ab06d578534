"""Typed config schema: dataclasses checked field by field against a parsed JSON object.

Why not a schema library: the field list already lives in the dataclasses, so a ~60-line walker
gives one clear message naming the bad key (its dotted path) without a new dependency.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

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
        return dict(value)
    # bool is an int in Python: refuse it where a number is meant, and accept ints for floats.
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and type(value) is tp:
        return value
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass `cls` from `data`: unknown keys, missing keys and wrong types raise ConfigError."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    prefix = f"{where}." if where else ""
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key {prefix}{unknown[0]} (allowed: {', '.join(sorted(fields))})")
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
