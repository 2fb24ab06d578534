"""Every field of every message is checked at one boundary (commlab.dds.messages.from_wire):
arbitrary JSON in a message's meta gives a message of the declared types or a MessageError,
never another exception. FUZZ_CASES (env COMMLAB_FUZZ_CASES) sets the cases per message type."""
import json
import math
import os
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlab.dds.errors import MessageError
from commlab.dds.messages import from_wire, to_wire
from commlab.fl.messages import ClientUpdate, ModelBlob, ModelRequest, Stop, TrainCmd

CASES = int(os.environ.get("COMMLAB_FUZZ_CASES", "1000"))  # make fuzz: 10,000
VALID = [TrainCmd(round=2, epochs=1, lr=0.05, subset_size=100, codec="int8", codec_params={"ratio": 0.1}),
         ClientUpdate(round=2, client_id="client-0", num_samples=100, payload=b"x"),
         ModelBlob(round=1, kind="delta", digest="ab" * 8, base_digest="cd" * 8, run_id="r", payload=b"y"),
         ModelRequest(run_id="r", client_id="client-1", have=""), Stop(run_id="r", last_round=3)]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                           | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def assert_typed(msg) -> None:
    for f in fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, float):
            assert math.isfinite(value)
        if isinstance(value, int) and not isinstance(value, bool):
            assert abs(value) < 2**63


@pytest.mark.parametrize("valid", VALID, ids=lambda m: type(m).__name__)
def test_valid_messages_round_trip(valid):
    assert from_wire(type(valid), *to_wire(valid)) == valid


@pytest.mark.parametrize("valid", VALID, ids=lambda m: type(m).__name__)
@settings(max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_field_value_is_a_typed_message_or_a_message_error(valid, data):
    meta = json.loads(to_wire(valid)[0])
    for name in data.draw(st.lists(st.sampled_from(sorted(meta) + ["payload", "extra"]), max_size=3)):
        if data.draw(st.booleans()):
            meta.pop(name, None)
        else:
            meta[name] = data.draw(JSON_VALUES)
    text = json.dumps(meta)  # NaN and Infinity come out as the non-JSON tokens a sender could send
    try:
        msg = from_wire(type(valid), text, b"")
    except MessageError:
        return
    assert_typed(msg)
    if hasattr(msg, "problem"):
        msg.problem()  # range checks never raise either


@settings(max_examples=CASES, deadline=None)
@given(meta=st.binary(max_size=200))
def test_garbage_meta_is_a_message_error(meta):
    try:
        from_wire(TrainCmd, meta.decode("utf-8", errors="replace"), b"")
    except MessageError:
        pass
