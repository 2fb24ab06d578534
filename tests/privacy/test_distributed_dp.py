"""DP under secure aggregation: each client adds Skellam noise on the field grid, the sum carries
the stated variance, the controller's unmasked sum is bit for bit the sum of the noised levels
(with dropouts), and the epsilon of the run is the accountant's for the same mechanism."""
import numpy as np
import pytest

from commlab.privacy.accountant import epsilon
from commlab.privacy.dp import SecureDPFedAvg
from commlab.privacy.field import TAIL, FieldQuantizer
from commlab.privacy.secagg import SecAggClient, SecAggParams
from commlab.privacy.secagg_server import run_in_process

pytest.importorskip("dp_accounting")
FEDAVG = dict(epochs=1, lr=0.1, batch_size=8, subset_size=10)


def noised_round(q: FieldQuantizer, updates: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(clean levels, noised levels) of each client's update, one row per client."""
    rng = np.random.default_rng(seed)
    clean = np.stack([q.encode(u, rng) for u in updates])
    return clean, np.stack([q.add_noise(levels, rng) for levels in clean])


@pytest.mark.parametrize("steps, z", [(254, 1.0), (8, 0.5), (2, 2.0)])  # int8, qsgd4, terngrad
def test_the_summed_noise_has_the_stated_variance(steps, z):
    """10 clients' noise on 200,000 coordinates: the variance of the sum is (z * steps / 2)**2
    levels. The sample variance of n draws has relative std sqrt((2 + excess kurtosis) / n) < 0.4%
    (Skellam's excess kurtosis 1 / variance is below 1 here); 3% is over 7 of them, and the mean's
    bound 7 standard errors: a wrong per-client share (e.g. std z * steps / 2 each, 10x the
    variance) or a bias falls far outside, the right one does not fail at this fixed seed."""
    clients, n = 10, 200_000
    q = FieldQuantizer(1.0, steps, clients, z * steps / 2)
    updates = np.random.default_rng(1).uniform(-1, 1, (clients, n))
    clean, noised = noised_round(q, updates, seed=2)
    total = noised.astype(np.uint64).sum(axis=0) % q.modulus
    noise_levels = (q.decode_sum(total, clients) - q.decode_sum(clean.sum(axis=0), clients)) * steps / 2
    assert np.allclose(noise_levels, np.round(noise_levels), atol=1e-6)  # integers: noise on the grid
    assert noise_levels.var() == pytest.approx(q.noise_std ** 2, rel=0.03)
    assert abs(noise_levels.mean()) < 7 * q.noise_std / np.sqrt(n)


def test_noised_sums_below_zero_and_above_the_range_decode_to_their_value():
    """Coordinates at -C and +C (levels 0 and steps): the noise takes their sum outside
    0..clients * steps, which the field holds as a signed offset from the centre."""
    clients, n = 5, 20_000
    q = FieldQuantizer(1.0, 16, clients, 8.0)
    updates = np.concatenate([-np.ones((clients, n)), np.ones((clients, n))], axis=1)
    _, noised = noised_round(q, updates, seed=3)
    decoded = q.decode_sum(noised.astype(np.uint64).sum(axis=0) % q.modulus, clients)
    low, high = decoded[:n], decoded[n:]
    assert low.min() < -clients and high.max() > clients  # outside the clean range on both sides
    assert low.mean() == pytest.approx(-clients, abs=0.02) and high.mean() == pytest.approx(clients, abs=0.02)
    assert q.bits == (clients * 16 + 2 * TAIL * 8 + 2).bit_length()


def test_unmasked_noised_sum_is_bit_exact_with_dropouts():
    """SecAgg+ of 8 clients' noised levels, one dropping before its masked input and one after:
    the unmasked sum is the plain sum, modulo the field, of the noised levels of the 7 in it."""
    clients, length = 8, 5000
    names = tuple(f"client-{i}" for i in range(clients))
    q = FieldQuantizer(1.0, 254, clients, 1.0 * 127)
    params = SecAggParams(names, degree=6, threshold=4, graph_seed=5, quantizer=q, length=length)
    _, noised = noised_round(q, np.random.default_rng(4).normal(0, 0.05, (clients, length)), seed=6)
    levels = dict(zip(names, noised))
    assert any(int(v.max()) > q.steps for v in levels.values())  # noised levels leave 0..steps
    parties = [SecAggClient(c, params) for c in names]
    (total, count), _ = run_in_process(params, parties, levels, gone_before_masked={"client-2"},
                                       gone_before_unmask={"client-5"})
    survivors = [c for c in names if c != "client-2"]
    plain = sum(levels[c].astype(np.uint64) for c in survivors) % q.modulus
    assert count == 7 and np.array_equal(total, plain.astype(np.uint32))


def test_epsilon_is_the_accountants_and_survives_a_restart():
    s = SecureDPFedAvg(np.zeros(4, np.float32), **FEDAVG, noise_multiplier=0.8, clients=100, per_round=10,
                       delta=1e-5)
    assert s.epsilon() == 0.0
    for _ in range(3):
        s.step(np.ones(4, np.float32))
    assert s.epsilon() == pytest.approx(epsilon(0.8, 0.1, 3, 1e-5), rel=1e-9)
    resumed = SecureDPFedAvg(np.zeros(4, np.float32), **FEDAVG, noise_multiplier=0.8, clients=100, per_round=10,
                             delta=1e-5)
    resumed.load_state_dict(s.state_dict())
    assert resumed.epsilon() == s.epsilon()
    with pytest.raises(ValueError, match="rounds_spent"):
        resumed.load_state_dict({"momentum": np.zeros(4, np.float32)})
