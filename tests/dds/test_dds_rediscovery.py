"""How soon a node announces itself again to an address where no peer answers (one whose lease
expired: paused, starved, cut off). Cyclone sends its participant announcement (SPDP) to such an
address only every 30 s unless SPDPInterval is set; a peer that already dropped this node waits
for that announcement, so after a pause the two found each other again only after up to 30 s.
A plain UDP socket in the peer list stands for the silent peer: it counts the announcements."""
from __future__ import annotations

import socket

import pytest

from commlab.dds import DdsNode, DdsSettings

SPDP_WRITER = bytes.fromhex("000100c2")  # entity id of the builtin participant announcement writer
GUARD_S = 25.0  # hang guard, below Cyclone's 30 s default: the count, not the time, is asserted


def _announcements(sock: socket.socket, wanted: int) -> int:
    """SPDP messages received, up to `wanted` or until the guard passes without one."""
    got = 0
    while got < wanted:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        got += data.startswith(b"RTPS") and SPDP_WRITER in data
    return got


@pytest.mark.slow
def test_a_node_announces_itself_to_a_silent_peer_address_every_spdp_interval(claims):
    settings = DdsSettings(domain_id=claims.take("domain"), lease_s=2.0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        port = claims.take("port")
        sock.bind(("127.0.0.1", port))
        sock.settimeout(GUARD_S)
        silent = DdsSettings(**{**settings.__dict__, "peers": ("127.0.0.1", f"127.0.0.1:{port}")})
        with DdsNode("controller", silent):
            # Two come at once (participant created, first ping); Cyclone's default sends the next after 30 s.
            assert _announcements(sock, 4) == 4


@pytest.mark.parametrize("lease_s,interval", [(2.0, "1.600s"), (20.0, "18.000s"), (60.0, "30.000s")])
def test_the_announcement_interval_is_cyclones_own_for_the_lease_and_applies_to_lost_peers(lease_s, interval):
    xml = DdsSettings(domain_id=1, lease_s=lease_s).to_xml()
    assert f"<SPDPInterval>{interval}</SPDPInterval>" in xml
    assert "<DiscoveredLocatorPruneDelay>600s</DiscoveredLocatorPruneDelay>" in xml
