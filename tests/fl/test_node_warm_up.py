"""Setting a node up runs the codecs once (fl.entry.warm_up_codecs): every codec must get through
it on a model's layout, and it must leave nothing behind that the run would see."""
from __future__ import annotations

import numpy as np
import pytest

from commlab.codecs import names
from commlab.config.schema import ConfigError
from commlab.fl.config import CodecSection
from commlab.fl.entry import build_codec, warm_up_codecs

LAYOUT = [("conv", (8, 4, 3, 3)), ("conv_bias", (8,)), ("fc", (40, 30)), ("fc_bias", (40,))]


@pytest.mark.parametrize("name", [n.split("<")[0] for n in names()])
def test_every_codec_at_its_defaults_warms_up_on_a_models_layout(name):
    warm_up_codecs([CodecSection(name)], LAYOUT)


def test_a_warm_up_leaves_the_global_random_state_and_the_runs_codec_as_they_were():
    codec = build_codec(CodecSection("randomk"), LAYOUT)
    numel = sum(int(np.prod(shape)) for _, shape in LAYOUT)
    vec = np.arange(numel, dtype=np.float32)
    state = np.random.get_state()[1].copy()
    reference = build_codec(CodecSection("randomk"), LAYOUT).encode(vec)
    warm_up_codecs([CodecSection("randomk")], LAYOUT)
    assert codec.encode(vec) == reference  # the run's codec draws what it would have drawn
    assert np.array_equal(np.random.get_state()[1], state)


def test_a_codec_that_cannot_be_built_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="nosuchcodec"):
        warm_up_codecs([CodecSection("nosuchcodec")], LAYOUT)


def test_the_launcher_has_every_client_warm_up_the_runs_codec(tmp_path):
    from commlab.fl.run import build_configs, parse_args
    a = parse_args(["--codec", "int8_sparse", "--codec-param", "ratio=0.05", "--clients", "2", "--domain-id", "7",
                    "--results-dir", str(tmp_path)])
    controller, clients = build_configs(a)
    assert [c["warm_codec"] for c in clients] == [controller["codec"]] * 2
    assert controller["codec"] == {"name": "int8_sparse", "params": {"ratio": 0.05}}
