"""Robust aggregation (median, trimmed mean, norm clipping, Krum, FLTrust), the num_samples cap,
their config and the test-only attack hook; no transport."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlab.config.schema import ConfigError, DatasetSection, ModelSection, from_dict
from commlab.fl import checkpoint as ck
from commlab.fl.config import AttackSection, ClientConfig, ControllerConfig
from commlab.fl.root_update import RootUpdate
from commlab.fl.run import build_configs, parse_args
from commlab.fl.strategy import STRATEGIES, FedAvg, FitIns, FitRes, Krum, Median, NormClip, TrimmedMean
from commlab.models import build_model, flatten_params
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP
from commlab.runs.seeds import SeedTree

COMMON = dict(epochs=1, lr=0.1, batch_size=8, subset_size=10)


def make(name, weights, **kw):
    return STRATEGIES[name](np.asarray(weights, np.float32), **COMMON, **kw)


def res(cid, delta, n=10):
    return FitRes(cid, n, np.asarray(delta, np.float32))


def test_median_and_trimmed_mean_of_known_vectors():
    rows = [[1, 10], [2, 20], [3, 30], [100, -500]]
    np.testing.assert_allclose(make("median", [0, 0]).aggregate(1, [res(str(i), r) for i, r in enumerate(rows)], []),
                               [2.5, 15])
    five = rows + [[4, 40]]
    np.testing.assert_allclose(make("trimmed_mean", [0, 0], trim_fraction=0.2).aggregate(
        1, [res(str(i), r) for i, r in enumerate(five)], []), [3, 20])
    # trim_fraction * n < 1 trims nothing: the unweighted mean
    np.testing.assert_allclose(make("trimmed_mean", [0, 0], trim_fraction=0.1).aggregate(
        1, [res(str(i), r) for i, r in enumerate(five)], []), np.mean(five, axis=0), rtol=1e-6)


finite = st.floats(-10, 10, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(honest=st.integers(3, 7).flatmap(lambda n: st.lists(st.lists(finite, min_size=5, max_size=5),
                                                             min_size=n, max_size=n)),
       scale=st.floats(1e3, 1e8), sign=st.sampled_from([-1.0, 1.0]), name=st.sampled_from(["median", "trimmed_mean"]))
def test_one_huge_outlier_stays_inside_the_honest_range(honest, scale, sign, name):
    honest = np.asarray(honest, np.float32)
    outlier = sign * scale * np.linspace(-1, 1, 5, dtype=np.float32) + sign * scale
    results = [res(f"h{i}", h) for i, h in enumerate(honest)] + [res("evil", outlier, n=10)]
    kw = {"trim_fraction": 0.25} if name == "trimmed_mean" else {}  # n in 4..8: trims >= 1 per side
    new = make(name, np.zeros(5), **kw).aggregate(1, results, [])
    tol = 1e-5 * (1 + np.abs(honest).max())
    assert (new >= honest.min(axis=0) - tol).all() and (new <= honest.max(axis=0) + tol).all()


def test_fedavg_is_moved_by_the_same_outlier():
    honest = [res(f"h{i}", [1.0]) for i in range(3)]
    assert make("fedavg", [0.0]).aggregate(1, honest + [res("evil", [-1e6])], [])[0] < -1e5


def test_num_samples_is_capped_at_what_was_asked():
    # subset_size is 10: a client claiming 10**9 samples weighs as much as one reporting 10
    for name, kw in (("fedavg", {}), ("norm_clip", {"clip_norm": 100.0})):
        new = make(name, [0.0], **kw).aggregate(1, [res("a", [1.0], n=10), res("b", [3.0], n=10**9)], [])
        np.testing.assert_allclose(new, [2.0], err_msg=name)
    # fewer than asked (a small partition) still weighs less
    np.testing.assert_allclose(make("fedavg", [0.0]).aggregate(1, [res("a", [1.0], n=10), res("b", [4.0], n=5)], []),
                               [2.0])


def test_norm_clip_fixed_and_adaptive():
    fixed = make("norm_clip", [0.0, 0.0], clip_norm=1.0)
    np.testing.assert_allclose(fixed.aggregate(1, [res("a", [3.0, 4.0]), res("b", [0.0, 0.5])], []), [0.3, 0.65],
                               rtol=1e-6)
    # None: the round's median norm (here 1), so the scaled update pulls with norm 1 only
    adaptive = make("norm_clip", [0.0])
    np.testing.assert_allclose(adaptive.aggregate(1, [res("a", [1.0]), res("b", [1.0]), res("c", [-1000.0])], []),
                               [1 / 3], rtol=1e-6)


def test_krum_picks_the_honest_update_the_others_are_closest_to():
    # n = 7 >= 2f + 3 for f = 2: each score sums the squared distances to the 3 nearest others
    honest = [[1.0, 1.0], [1.1, 0.9], [0.9, 1.1], [1.0, 1.2], [1.2, 1.0]]
    results = [res(f"h{i}", h) for i, h in enumerate(honest)] + [res("x", [-100.0, -100.0]), res("y", [50.0, -80.0])]
    new = make("krum", [0.0, 0.0], num_malicious=2).aggregate(1, results, [])
    np.testing.assert_array_equal(new, np.float32([1.0, 1.0]))  # h0, the centre of the honest ones
    # 3 clients, f = 1 (n < 2f + 3): one neighbour per score; the two honest ones tie, the first wins
    three = [res("a", [1.0, 0.0]), res("b", [0.0, 1.0]), res("c", [-100.0, -100.0])]
    np.testing.assert_array_equal(make("krum", [0.0, 0.0]).aggregate(1, three[::-1], []), [1.0, 0.0])


def test_multi_krum_averages_the_best_scored_like_fedavg():
    results = [res("a", [1.0, 0.0], n=2), res("b", [0.0, 1.0], n=6), res("c", [1.0, 1.0], n=2),
               res("d", [40.0, 0.0]), res("e", [0.0, -40.0])]
    new = make("krum", [0.0, 0.0], num_malicious=2, keep=3).aggregate(1, results, [])
    np.testing.assert_allclose(new, [0.4, 0.8], rtol=1e-6)  # (2*a + 6*b + 2*c) / 10
    # fewer updates than keep (a client failed): all of them, like FedAvg
    two = make("krum", [0.0, 0.0], num_malicious=1, keep=3).aggregate(1, results[:2], [("c", "no update")])
    np.testing.assert_allclose(two, [0.25, 0.75], rtol=1e-6)


def test_fltrust_scores_by_cosine_and_rescales_to_the_reference():
    reference = lambda weights, fit: np.float32([2.0, 0.0])  # noqa: E731
    results = [res("a", [10.0, 0.0]), res("b", [1.0, 1.0]), res("c", [-1000.0, 5.0]), res("d", [0.0, 3.0])]
    new = make("fltrust", [0.0, 0.0], reference=reference).aggregate(1, results, [])
    # a: score 1, rescaled to [2, 0]; b: score 1/sqrt(2), rescaled to [sqrt 2, sqrt 2]; c and d: score 0
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(new, (np.array([2.0, 0.0]) + s * np.array([np.sqrt(2), np.sqrt(2)])) / (1 + s),
                               rtol=1e-6)
    # nobody agrees with the reference: the model stays
    stays = make("fltrust", [0.5, 0.5], reference=reference).aggregate(1, results[2:], [])
    np.testing.assert_array_equal(stays, [0.5, 0.5])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), noise=st.floats(0.0, 0.3), name=st.sampled_from(["krum", "fltrust"]))
def test_a_100x_flipped_update_among_3_stays_close_to_the_honest_mean(seed, noise, name):
    """Three non-identical updates around a common direction (each within `noise` of it, relative),
    the last one sent as -100x: Multi-Krum (keep 2) and FLTrust stay near the honest two's mean."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(50)
    near = lambda: base + noise * np.linalg.norm(base) * rng.uniform(0, 1) * unit(rng.standard_normal(50))  # noqa: E731
    honest = [near() for _ in range(3)]
    results = [res("client-0", honest[0]), res("client-1", honest[1]), res("client-2", -100 * honest[2])]
    kw = {"num_malicious": 1, "keep": 2} if name == "krum" else {"reference": lambda w, fit: near().astype(np.float32)}
    new = make(name, np.zeros(50), **kw).aggregate(1, results, [])
    honest_mean = (honest[0] + honest[1]) / 2
    # each rescaled honest update is within 3 * noise of base, their mean within noise of it
    assert np.linalg.norm(new - honest_mean) <= 4 * noise * np.linalg.norm(base) + 1e-4 * np.linalg.norm(base)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_root_update_is_deterministic_and_trains_like_a_client():
    root = RootUpdate(ModelSection(), DatasetSection(train_subset=300, test_subset=10), samples=40, seeds=SeedTree(0),
                      momentum=0.9, train_step=DEFAULT_TRAIN_STEP, threads=1)
    weights = flatten_params(build_model("mnist_cnn"))
    fit = FitIns(round=1, epochs=1, lr=0.05, batch_size=16, subset_size=64)
    first, again = root(weights, fit), root(weights, fit)
    assert first.tobytes() == again.tobytes() and np.linalg.norm(first) > 0
    assert root(weights, replace(fit, round=2)).tobytes() != first.tobytes()  # each round its own batch order


def fixed_reference(weights, fit):
    """A stand-in for the server's root update: deterministic in the weights and the round."""
    return np.sin(weights + np.float32(fit.round % 7)).astype(np.float32)


@pytest.mark.parametrize("name, kw", [("fedavg", {}), ("median", {}), ("trimmed_mean", {"trim_fraction": 0.25}),
                                      ("norm_clip", {"clip_norm": 2.0}), ("krum", {"num_malicious": 1, "keep": 2}),
                                      ("fltrust", {"reference": fixed_reference})])
def test_checkpoint_resume_continues_bit_identically(tmp_path, name, kw):
    rng = np.random.default_rng(1)
    rounds = [[res(f"c{i}", rng.standard_normal(50)) for i in range(4)] for _ in range(3)]
    straight = make(name, np.zeros(50), server_momentum=0.7, **kw)
    for rnd, results in enumerate(rounds, 1):
        straight.aggregate(rnd, results, [])
    first = make(name, np.zeros(50), server_momentum=0.7, **kw)
    first.aggregate(1, rounds[0], [])
    saved = ck.load_checkpoint(ck.save_checkpoint(tmp_path, ck.Checkpoint(1, first.weights, first.state_dict(), {})))
    resumed = make(name, saved.weights, server_momentum=0.7, **kw)
    resumed.load_state_dict(saved.strategy_state)
    for rnd, results in enumerate(rounds[1:], 2):
        resumed.aggregate(rnd, results, [])
    assert resumed.weights.tobytes() == straight.weights.tobytes()


def test_strategy_classes_refuse_bad_parameters():
    with pytest.raises(ValueError, match="trim_fraction"):
        TrimmedMean(np.zeros(1, np.float32), trim_fraction=0.5, **COMMON)
    with pytest.raises(ValueError, match="clip_norm"):
        NormClip(np.zeros(1, np.float32), clip_norm=0.0, **COMMON)
    for kw in ({"num_malicious": -1}, {"keep": 0}):
        with pytest.raises(ValueError, match="need num_malicious >= 0 and keep >= 1"):
            Krum(np.zeros(1, np.float32), **kw, **COMMON)
    assert issubclass(Median, FedAvg)


def controller(tmp_path, *argv):
    cfg, clients = build_configs(parse_args(["--results-dir", str(tmp_path), "--run-id", "t", "--domain-id", "5",
                                             "--clients", "4", *argv]))
    return cfg, clients


@pytest.mark.parametrize("strategy, message", [
    ({"name": "bulyan"},
     "strategy.name: unknown strategy 'bulyan' (known: fedavg, median, trimmed_mean, norm_clip, krum, fltrust, fedbuff)"),
    ({"name": "fedavg", "trim_fraction": 0.2}, "strategy.trim_fraction: only for strategy trimmed_mean, not fedavg"),
    ({"name": "median", "clip_norm": 1.0}, "strategy.clip_norm: only for strategy norm_clip, not median"),
    ({"name": "trimmed_mean", "trim_fraction": 0.5}, "strategy.trim_fraction: must be in [0, 0.5), got 0.5"),
    ({"name": "norm_clip", "clip_norm": 0}, "strategy.clip_norm: must be > 0, got 0.0"),
    ({"name": "fedavg", "keep": 2}, "strategy.keep: only for strategy krum, not fedavg"),
    ({"name": "krum", "root_samples": 100}, "strategy.root_samples: only for strategy fltrust, not krum"),
    ({"name": "krum", "num_malicious": -1}, "strategy.num_malicious: must be >= 0, got -1"),
    ({"name": "krum", "keep": 0}, "strategy.keep: must be > 0, got 0"),
    ({"name": "krum", "keep": 5}, "sampling.clients_per_round: krum cannot keep 5 of the 4 updates of a round"),
    ({"name": "fltrust", "root_samples": 0}, "strategy.root_samples: must be > 0, got 0"),
    ({"name": "fltrust", "root_momentum": 1.0}, "strategy.root_momentum: must be in [0, 1), got 1.0"),
    ({"name": "median", "trim": 1},
     "unknown key strategy.trim (allowed: clip_norm, keep, name, num_malicious, root_momentum, root_samples, "
     "server_lr, server_momentum, trim_fraction)"),
])
def test_strategy_config_errors_are_one_line(tmp_path, strategy, message):
    cfg, _ = controller(tmp_path)
    cfg["strategy"] = strategy
    with pytest.raises(ConfigError) as e:
        from_dict(ControllerConfig, cfg)
    assert str(e.value) == message


def test_launcher_builds_strategy_and_attack(tmp_path):
    cfg, clients = controller(tmp_path, "--strategy", "trimmed_mean", "--trim-fraction", "0.25",
                              "--attack", "sign_flip", "--attack-scale", "10")
    c = from_dict(ControllerConfig, cfg)
    assert c.strategy.name == "trimmed_mean" and c.strategy.params() == {"trim_fraction": 0.25}
    assert [k["attack"] for k in clients] == [None, None, None, {"kind": "sign_flip", "scale": 10.0}]
    assert from_dict(ControllerConfig, controller(tmp_path)[0]).strategy.params() == {}
    with pytest.raises(ConfigError, match="--attackers: must be in 1..4, got 5"):
        controller(tmp_path, "--attack", "sign_flip", "--attackers", "5")
    momentum = from_dict(ControllerConfig, controller(tmp_path, "--server-momentum", "0.7", "--server-lr", "0.5")[0])
    assert (momentum.strategy.server_momentum, momentum.strategy.server_lr) == (0.7, 0.5)
    with pytest.raises(ConfigError, match=r"strategy.server_momentum: must be in \[0, 1\), got 1.0"):
        controller(tmp_path, "--server-momentum", "1")


def test_launcher_builds_krum_and_fltrust(tmp_path):
    krum = from_dict(ControllerConfig, controller(tmp_path, "--strategy", "krum", "--keep", "3")[0])
    assert krum.strategy_params() == {"num_malicious": 1, "keep": 3}
    fltrust = from_dict(ControllerConfig, controller(tmp_path, "--strategy", "fltrust", "--root-samples", "200",
                                                     "--momentum", "0.5")[0])
    reference = fltrust.strategy_params()["reference"]
    assert isinstance(reference, RootUpdate) and (reference.samples, reference.momentum) == (200, 0.5)
    with pytest.raises(ConfigError, match="strategy.keep: only for strategy krum, not median"):
        controller(tmp_path, "--strategy", "median", "--keep", "2")


def test_attack_config_and_effect(tmp_path):
    _, clients = controller(tmp_path)
    for attack, message in [({"kind": "label_flip"}, "attack.kind: unknown attack 'label_flip' (known: sign_flip)"),
                            ({"kind": "sign_flip", "scale": -1}, "attack.scale: must be > 0, got -1.0"),
                            ({"scale": 2}, "missing key attack.kind")]:
        with pytest.raises(ConfigError) as e:
            from_dict(ClientConfig, {**clients[0], "attack": attack})
        assert str(e.value) == message
    delta = np.array([1.0, -2.0], np.float32)
    out = AttackSection("sign_flip", 10.0).apply(delta)
    assert out.dtype == np.float32 and out.tolist() == [-10.0, 20.0]
