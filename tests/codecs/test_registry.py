"""The registry and the one hook: unique ids and names (the registry refuses a taken one), every
codec module registered by existing, what each compressor declares (exchange, exact sizes) holds,
and build_compression gives every compressor in both settings."""
from __future__ import annotations

import importlib
import math
import pkgutil

import numpy as np
import pytest

import commlab.codecs
from commlab.codecs import CodecError, ErrorFeedback, NoMemory, build_compression, get_codec, names
from commlab.codecs.base import _BY_ID, _BY_NAME, ALLGATHER, EXCHANGES, LOWRANK, Codec, codec_class, register
from commlab.codecs.fp32 import Fp32

LAYOUT = [("conv", (8, 1, 3, 3)), ("conv.bias", (8,)), ("fc", (64, 40)), ("out", (10, 64))]
NUMEL = sum(math.prod(s) for _, s in LAYOUT)
CONCRETE = [n.split("<")[0] + ("4" if "<" in n else "") for n in names()]


def codec_classes() -> set[type[Codec]]:
    """Every concrete Codec subclass defined in the package."""
    found, todo = set(), [Codec]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("commlab.codecs.") and "codec_id" in vars(sub):
                found.add(sub)
    return found


def test_ids_and_names_are_unique_and_every_codec_class_is_registered():
    classes = codec_classes()
    assert {c.codec_id for c in classes} == set(_BY_ID) and len(_BY_ID) == len(classes)
    assert all(_BY_ID[c.codec_id] is c for c in classes)
    assert all(_BY_NAME[n] is c for c in classes for n in (c.name, *c.aliases))
    assert {"fp16", "bf16"} <= set(names()) and "dense" not in names()  # aliases resolve, but are not listed
    assert codec_class("dense")[0] is codec_class("fp32")[0]


def test_every_module_of_the_package_is_imported():
    """No list to edit: a new compressor file registers itself when commlab.codecs is imported."""
    for module in pkgutil.iter_modules(commlab.codecs.__path__):
        assert importlib.import_module(f"commlab.codecs.{module.name}")
    assert {c.__module__ for c in codec_classes()} <= {f"commlab.codecs.{m.name}" for m in
                                                      pkgutil.iter_modules(commlab.codecs.__path__)}


def test_a_taken_id_or_name_is_refused_and_the_registry_is_unchanged():
    before = (dict(_BY_ID), dict(_BY_NAME))

    class SameId(Fp32):
        name, codec_id = "fp32_again", 1

    class SameName(Fp32):
        name, codec_id = "int8", 250

    class Alias(Fp32):
        name, codec_id, aliases = "fresh", 251, ("dense",)

    for cls, message in [(SameId, "codec id 1 of SameId is taken by Fp32"),
                         (SameName, "codec name 'int8' of SameName is taken by Int8"),
                         (Alias, "codec name 'dense' of Alias is taken by Fp32")]:
        with pytest.raises(CodecError, match=message):
            register(cls)
    assert (dict(_BY_ID), dict(_BY_NAME)) == before


def test_an_unknown_exchange_is_refused():
    class Nowhere(Fp32):
        name, codec_id, exchange = "nowhere", 252, "broadcast"

    with pytest.raises(CodecError, match="exchange must be one of allreduce, allgather, lowrank"):
        register(Nowhere)


@pytest.mark.parametrize("name", CONCRETE)
def test_every_compressor_builds_in_both_settings_and_declares_its_exchange(name):
    for setting in ("fl", "ddp"):
        comp = build_compression(name, {}, LAYOUT, setting=setting, momentum=0.9, world=3, seed=2, run_seed=1)
        assert comp.codec.exchange in EXCHANGES and comp.codec.family == codec_class(name)[0].name
        if comp.codec.exchange != ALLGATHER:  # summed in transit: no rank sees its own frame come back
            assert isinstance(comp.memory, ErrorFeedback if comp.codec.exchange == LOWRANK else NoMemory)
    with pytest.raises(CodecError, match="setting must be one of fl, ddp"):
        build_compression(name, {}, LAYOUT, setting="both")


@pytest.mark.parametrize("name", CONCRETE)
def test_frames_are_exactly_wire_size_unless_sized_by_content(name):
    codec = build_compression(name, {}, LAYOUT, seed=0).codec
    for seed in range(3):
        vec = np.random.default_rng(seed).standard_normal(NUMEL).astype(np.float32)
        size = len(codec.encode(vec))
        assert size <= codec.wire_size(NUMEL)
        if not codec.sized_by_content:
            assert size == codec.wire_size(NUMEL)


def test_memory_and_schedule_parameters_default_by_setting():
    fl, ddp = (build_compression("dgc", {}, LAYOUT, setting=s) for s in ("fl", "ddp"))
    assert (fl.schedule.warmup.length, fl.memory.clip_norm) == (4.0, None)   # rounds 1-4 at the paper's stages
    assert (ddp.schedule.warmup.length, ddp.memory.clip_norm) == (1.0, 10.0)  # one epoch of steps
    assert ddp.steady_from(100) == 100 and fl.steady_from(1) == 4
    fl, ddp = (build_compression("powersgd2", {}, LAYOUT, setting=s) for s in ("fl", "ddp"))
    assert (fl.memory.decay, fl.memory.clip, ddp.memory.decay, ddp.memory.clip) == (0.5, 1.0, 1.0, None)
    assert fl.steady_from(1) == ddp.steady_from(1) == 2
    with pytest.raises(CodecError, match="unknown parameters"):  # DDP's residual is plain: no such parameter
        build_compression("powersgd2", {"residual_clip": 1.0}, LAYOUT, setting="ddp")
    assert get_codec("dgc").takes("warmup_length") and get_codec("qsgd").takes("levels")
    assert not get_codec("int8").takes("warmup_length")


def test_warm_compiles_every_codec_with_its_defaults(monkeypatch):
    # The node images run warm() when built: it must reach every registered codec (its processes
    # split the same list; one job runs it here, where the patch can see it).
    seen = []
    real = Codec.encode
    monkeypatch.setattr(Codec, "encode", lambda self, vec: seen.append(self.codec_id) or real(self, vec))
    commlab.codecs.warm(jobs=1)
    assert sorted(seen) == sorted(_BY_ID)
