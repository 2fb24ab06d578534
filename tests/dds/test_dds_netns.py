"""DDS across two network namespaces joined by a veth link shaped to 10 Mbit/s with tbf."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from commlab.links.netns import NetnsUnavailable, tx_bytes, veth_pair

pytestmark = pytest.mark.slow
SIZE = 1_700_000
RATE_BPS = 10e6


def _probe(side, peer, role: str, domain: int) -> list[str]:
    return [*side.exec_prefix(), sys.executable, "-m", "commlab.dds.probe", role, "--domain", str(domain),
            "--interface", side.interface, "--peer", peer.address, "--sizes", f"{SIZE}x1", "--mtu"]


@pytest.fixture
def shaped_link():
    try:
        with veth_pair(200, rate="10mbit") as sides:
            yield sides
    except NetnsUnavailable as e:
        print(f"SKIP reason: {e}")
        pytest.skip(str(e))
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not {side.netns for side in sides} & set(listed)


def test_chunked_message_crosses_a_shaped_link_between_namespaces(shaped_link, domain):
    a, b = shaped_link
    before = tx_bytes(a)
    receiver = subprocess.Popen(_probe(b, a, "recv", domain), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sender = subprocess.run(_probe(a, b, "send", domain), capture_output=True, text=True, timeout=90)
    _, rerr = receiver.communicate(timeout=30)
    assert sender.returncode == 0 and receiver.returncode == 0, sender.stderr[-2000:] + rerr[-2000:]
    result = json.loads(sender.stdout.strip().splitlines()[-1])  # the ack carried the payload's SHA-256
    measured = tx_bytes(a) - before
    assert result["seconds"] >= 0.8 * SIZE * 8 / RATE_BPS, "the tbf shaping did not apply"
    # Our wire-byte estimate (data only) against the interface counter (everything, with Ethernet headers).
    assert 0.85 * measured <= result["bytes_sent"] <= measured
