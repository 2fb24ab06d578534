"""DP-FedAvg: clipping bounds every update, the noise has the configured std, and the epsilon a
run reports is the accountant's own for the same sampling rate, noise multiplier and rounds."""
import math
import re

import numpy as np
import pytest

from commlab.config.schema import ConfigError, from_dict
from commlab.fl.config import ControllerConfig
from commlab.fl.run import build_configs, parse_args
from commlab.fl.strategy import FitRes
from commlab.fl.strategy_config import build_strategy
from commlab.privacy.accountant import epsilon
from commlab.privacy.dp import DPFedAvg, clip, delta_noise_multiplier
from commlab.output.tables import COLUMNS

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting import pld, rdp  # noqa: E402

FEDAVG = dict(epochs=1, lr=0.1, batch_size=8, subset_size=10, seed=0)


def strategy(size: int = 50, **kw) -> DPFedAvg:
    args = dict(noise_multiplier=1.1, clip_norm=1.0, clients=100, per_round=10, delta=1e-5, noise_seed=3)
    return DPFedAvg(np.zeros(size, np.float32), **FEDAVG, **{**args, **kw})


def results(deltas: list[np.ndarray]) -> list[FitRes]:
    return [FitRes(f"client-{i}", 10, d.astype(np.float32)) for i, d in enumerate(deltas)]


@pytest.mark.parametrize("method, accountant", [("rdp", rdp.RdpAccountant), ("pld", pld.PLDAccountant)])
def test_reported_epsilon_is_the_accountants_own(method, accountant):
    s, rng = strategy(accountant=method), np.random.default_rng(0)
    for rnd in range(1, 4):
        s.aggregate(rnd, results([rng.normal(size=50) for _ in range(10)]), [])
    # The accountant composed round by round, as an auditor would, not through SelfComposedDpEvent.
    reference = accountant()
    for _ in range(3):
        reference.compose(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.1)))
    reported = s.epsilon()
    assert reported == pytest.approx(reference.get_epsilon(1e-5), rel=1e-9) and 0 < reported < math.inf


def test_epsilon_grows_with_rounds_and_shrinks_with_noise():
    assert epsilon(1.1, 0.1, 0, 1e-5) == 0
    assert epsilon(0.0, 0.1, 1, 1e-5) == math.inf
    assert epsilon(1.1, 0.1, 10, 1e-5) < epsilon(1.1, 0.1, 20, 1e-5)
    assert epsilon(2.0, 0.1, 10, 1e-5) < epsilon(1.1, 0.1, 10, 1e-5)
    with pytest.raises(ValueError, match="unknown accountant 'moments'"):
        epsilon(1.1, 0.1, 10, 1e-5, "moments")


def test_clipping_bounds_norms_and_keeps_small_updates():
    rng = np.random.default_rng(1)
    for scale in (0.01, 1.0, 1e6):
        d = rng.normal(size=1000) * scale
        clipped, within = clip(d, 2.5)
        assert np.linalg.norm(clipped) <= 2.5 * (1 + 1e-12)
        assert within == (np.linalg.norm(d) <= 2.5)
        if within:
            assert np.array_equal(clipped, d)
        else:  # the direction is kept
            assert np.allclose(clipped / np.linalg.norm(clipped), d / np.linalg.norm(d))


def test_one_client_moves_the_model_by_at_most_clip_over_per_round():
    s = strategy(noise_multiplier=0.0, clip_norm=0.5)
    huge = np.full(50, 1e4)
    weights = s.aggregate(1, results([huge] + [np.zeros(50)] * 9), [])
    assert np.linalg.norm(weights) == pytest.approx(0.5 / 10, rel=1e-6)


def test_noise_std_is_z_times_clip_on_the_sum():
    # 10 zero updates: the sum is pure noise. 200,000 draws estimate the std within 0.16% (one
    # standard error); the bound is 1%, over six standard errors, and the seed is fixed.
    z, c = 2.0, 0.5
    s = strategy(size=200_000, noise_multiplier=z, clip_norm=c)
    weights = s.aggregate(1, results([np.zeros(200_000)] * 10), [])
    noise_on_sum = weights.astype(np.float64) * 10
    assert noise_on_sum.std() == pytest.approx(z * c, rel=0.01)
    assert abs(noise_on_sum.mean()) < 5 * z * c / math.sqrt(200_000)


def test_noise_is_drawn_from_seed_and_round():
    a, b = strategy(noise_seed=7), strategy(noise_seed=7)
    update = results([np.ones(50)] * 10)
    assert np.array_equal(a.aggregate(1, update, []), b.aggregate(1, update, []))
    assert not np.array_equal(strategy(noise_seed=8).aggregate(1, update, []), strategy(noise_seed=7).aggregate(1, update, []))


def test_adaptive_clipping_tracks_the_median_norm():
    s = strategy(noise_multiplier=0.0, adaptive=True, clip_norm=0.1)  # the count is still noisy
    norms = np.arange(1, 11, dtype=np.float64)  # median 5.5
    rng = np.random.default_rng(2)
    for rnd in range(1, 81):
        deltas = [n * v / np.linalg.norm(v) for n, v in zip(norms, rng.normal(size=(10, 50)))]
        s.aggregate(rnd, results(deltas), [])
    assert 4.0 <= s.clip_norm <= 7.0


def test_adaptive_splits_the_noise_between_count_and_updates():
    assert delta_noise_multiplier(1.0, None) == 1.0
    # 1/z^2 = 1/z_delta^2 + 1/(2 sigma_b)^2
    z_delta = delta_noise_multiplier(1.0, 2.0)
    assert z_delta ** -2 + 4.0 ** -2 == pytest.approx(1.0)
    with pytest.raises(ValueError, match="must be below 2 \\* clipped_count_stddev"):
        delta_noise_multiplier(1.0, 0.5)


def test_state_round_trip_keeps_clip_norm_and_rounds():
    s = strategy(adaptive=True, noise_multiplier=0.5)
    s.aggregate(1, results([np.ones(50) * 3] * 10), [])
    t = strategy(adaptive=True, noise_multiplier=0.5)
    t.load_state_dict(s.state_dict())
    assert (t.clip_norm, t.ledger.rounds, t.epsilon()) == (s.clip_norm, 1, s.epsilon())
    with pytest.raises(ValueError, match="lacks the scalar clip_norm"):
        t.load_state_dict({"momentum": np.zeros(50, np.float32)})


def controller_dict(tmp_path, *flags: str) -> dict:
    cfg, _ = build_configs(parse_args(["--results-dir", str(tmp_path), "--run-id", "t", "--domain-id", "5",
                                       "--clients", "100", "--per-round", "10", "--procs", "2", *flags]))
    return cfg


def test_launcher_flags_build_a_dp_fedavg_run(tmp_path):
    cfg = from_dict(ControllerConfig, controller_dict(tmp_path, "--dp-noise", "0.8", "--dp-clip", "2"))
    s = build_strategy(cfg, np.zeros(20, np.float32))
    assert isinstance(s, DPFedAvg) and (s.noise_multiplier, s.clip_norm, s.sampling_rate) == (0.8, 2.0, 0.1)
    assert "epsilon" in COLUMNS["rounds"]


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["privacy"].update(noise=1.0), "unknown key privacy.noise"),
    (lambda c: c["privacy"].update(delta=0.05), "privacy.delta: 0.05 is not below 1 / expected_clients"),
    (lambda c: c["privacy"].update(accountant="moments"), "privacy.accountant: unknown 'moments'"),
    (lambda c: c["privacy"].update(noise_multiplier=-1.0), "privacy.noise_multiplier: must be >= 0"),
    (lambda c: c["privacy"].update(target_quantile=0.9), "privacy.target_quantile, clip_norm_lr, "),
    (lambda c: c["privacy"].update(adaptive_clipping=True), "privacy.clipped_count_stddev: 0.5 must exceed"),
    (lambda c: c["strategy"].update(name="median"), "privacy: DP-FedAvg replaces the strategy; needs strategy fedavg"),
])
def test_privacy_config_errors_name_the_key(tmp_path, mutate, message):
    cfg = controller_dict(tmp_path, "--dp-noise", "1.1")
    mutate(cfg)
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        from_dict(ControllerConfig, cfg)
