"""What every test area shares: one hypothesis profile, the plugins (`--repeat`, the unit-test
guard), the codecs' compiled loops in numba's cache before any node starts, the claims fixtures
that give a test its own DDS domain ids, ports, namespace lab tags and compose project numbers
(commlab.runs.claims), and the peer benchmarks' smoke runs, each made once for the test areas
that check them."""
from __future__ import annotations

from typing import Iterator

import pytest
from hypothesis import settings

import commlab.codecs
from commlab.runs.claims import Claims
from peer_benches import Bench, run_bench

pytest_plugins = ["repeat_runs", "unit_guard"]

# One hypothesis profile for the whole suite, loaded once: no per-example deadline (a test passes
# or fails by what it checks, never by how long an example took on a loaded machine). Modules set
# their example counts with settings objects, never by loading a profile of their own (the last
# module imported would set it for every other one).
settings.register_profile("commlab", deadline=None)
settings.load_profile("commlab")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first test that starts node processes, compile every codec's loops into numba's
    on-disk cache once (commlab.codecs.warm, as the node images do when built). On a fresh checkout
    the cache is empty, and the nodes of the first runs, started together, would each compile the
    same loops (seconds per codec, each on the same two cores)."""
    from unit_guard import is_unit_test  # here, not at the top: pytest imports its plugins after this file

    if not session.config.option.collectonly and not all(map(is_unit_test, session.items)):
        commlab.codecs.warm()


@pytest.fixture
def claims() -> Iterator[Claims]:
    """Numbers for this test alone: `claims.take("domain")`, "port", "lab", "project". No other test,
    test suite or run on the machine holds them until the test ends."""
    with Claims() as taken:
        yield taken


@pytest.fixture
def domain(claims: Claims) -> int:
    """A DDS domain id claimed for this test."""
    return claims.take("domain")


@pytest.fixture(scope="session")
def peers_ddp_smoke(tmp_path_factory) -> Bench:
    """`bench_peers.py --smoke` once a session: DDS DDP cases beside torch DDP over gloo and the
    centralized trainer, 2 ranks, 10 steps (tests/peer_benches.py)."""
    return run_bench(tmp_path_factory.mktemp("bench-peers"), "bench_peers.py")


@pytest.fixture(scope="session")
def peers_fl_smoke(tmp_path_factory) -> Bench:
    """`bench_peers_fl.py --smoke` once a session: DDS FL beside Flower (legacy and deployment
    transports) and the centralized trainer (tests/peer_benches.py)."""
    pytest.importorskip("flwr", reason="flwr not installed (pyproject.toml [test]: pip install -e '.[test]')",
                        exc_type=ImportError)
    return run_bench(tmp_path_factory.mktemp("bench-peers-fl"), "bench_peers_fl.py")
