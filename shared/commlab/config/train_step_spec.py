"""Which training step a node runs: config key `train_step`, "package.module:function" (imported)
or "path/to/file.py:function" (loaded from that file, so a step can live outside the library); the
step's contract is in commlab.models.train_step. A relative file path is resolved against the current
working directory, like every other path in a node config; the launchers
(`python -m commlab.fl.run` / `commlab.ddp.run --train-step`) write it absolute into the configs.

This module imports neither torch nor the step itself until a step is loaded: the launchers
check their configs with it and never train.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from commlab.config.schema import ConfigError

if TYPE_CHECKING:
    from commlab.models.train_step import TrainStep

DEFAULT_TRAIN_STEP = "commlab.models.train_step:cross_entropy_step"
SPEC_FORMS = "'package.module:function' or 'path/to/file.py:function'"


def is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target


def resolve_spec_path(spec: str) -> str:
    """The spec with a relative file path made absolute (against the working directory); a module
    spec, or anything malformed (left for load_train_step to report), unchanged."""
    target, sep, function = spec.rpartition(":")
    if not sep or not is_file_target(target):
        return spec
    return f"{os.path.abspath(os.path.expanduser(target))}:{function}"


def load_train_step(spec: str, key: str = "train_step") -> "TrainStep":
    """The function `spec` names; ConfigError (one line, starting with `key`) if it cannot be used."""
    target, sep, function = spec.rpartition(":")
    if not sep or not target or not function:
        raise ConfigError(f"{key}: expected {SPEC_FORMS}, got {spec!r}")
    if not function.isidentifier():
        raise ConfigError(f"{key}: {function!r} is not a function name (in {spec!r})")
    module = _load_file(target, key) if is_file_target(target) else _import(target, key)
    if not hasattr(module, function):
        raise ConfigError(f"{key}: {target} has no function {function!r}")
    step = getattr(module, function)
    if not callable(step):
        raise ConfigError(f"{key}: {spec} is not callable: it is {type(step).__name__} {step!r:.40}")
    try:
        signature = inspect.signature(step)
    except (TypeError, ValueError):  # some builtins have none: trust them
        return step
    try:
        signature.bind(None, None, None)
    except TypeError:
        raise ConfigError(f"{key}: {spec} must take (model, x, y), its signature is {function}{signature}") from None
    return step


def check_train_step(spec: str, key: str = "train_step") -> None:
    """ConfigError (one line) unless `spec` loads as a step. The library's own default is taken as
    it is: loading it would import torch into processes that never train (the launchers)."""
    if spec != DEFAULT_TRAIN_STEP:
        load_train_step(spec, key)


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def _import(name: str, key: str):
    if not all(part.isidentifier() for part in name.split(".")):
        raise ConfigError(f"{key}: {name!r} is neither a module name nor a .py file (expected {SPEC_FORMS})")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            raise ConfigError(f"{key}: module not found: {name}") from None
        raise ConfigError(f"{key}: importing {name} failed: {_one_line(e)}") from None
    except Exception as e:
        raise ConfigError(f"{key}: importing {name} failed: {_one_line(e)}") from None


def _load_file(target: str, key: str):
    """The module of a .py file, executed once per process (kept in sys.modules under a name
    derived from its absolute path, so dataclasses and pickling inside it work)."""
    path = Path(os.path.abspath(os.path.expanduser(target)))
    if not path.is_file():
        raise ConfigError(f"{key}: file not found: {path}" + ("" if Path(target).is_absolute() else
                                                               " (relative paths start at the working directory)"))
    name = "commlab_train_step_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{key}: cannot load {path} as a Python module (expected a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ConfigError(f"{key}: loading {path} failed: {_one_line(e)}") from None
    return module
