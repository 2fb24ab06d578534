"""Link profiles: resolution per node, tc arguments, and real shaping between namespaces."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from commlab.links.profiles import check_profile, describe, ingress_drop_rule, link_for, load_profiles, netem_args, tbf_args
from commlab.links.spec import LinkError, LinkSpec


def test_every_profile_resolves_for_every_role():
    for name in load_profiles():
        for node in ("controller", "client-0", "client-7", "worker-0", "worker-3"):
            assert link_for(name, node).rate_bps > 0


def test_hetero_gives_clients_different_rates_cycling_by_index():
    rates = [link_for("hetero", f"client-{i}").rate_bps for i in range(4)]
    assert len(set(rates[:3])) == 3
    assert rates[3] == rates[0]
    assert link_for("hetero", "controller").rate_bps > max(rates)


def test_uniform_profiles():
    assert link_for("10mbit", "client-1").rate_bps == 10e6
    assert link_for("1mbit", "controller").rate_bps == 1e6


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(LinkError, match="unknown link profile 'wan'.*10mbit.*-loss"):
        link_for("wan", "client-0")


def test_loss_suffix_adds_loss_to_any_profile_or_rate():
    assert link_for("10mbit-loss5", "client-1") == LinkSpec("10mbit", delay_ms=2, loss_pct=5.0)
    assert link_for("10mbit-loss1", "controller").loss_pct == 1.0
    assert link_for("hetero-loss0.5", "client-1") == LinkSpec("5mbit", delay_ms=20, loss_pct=0.5)
    assert link_for("100mbit", "worker-2") == LinkSpec("100mbit")
    assert link_for("2.5mbit-loss2", "client-0") == LinkSpec("2.5mbit", loss_pct=2.0)


@pytest.mark.parametrize("name, problem", [("10mbit-loss100", "below 100"), ("10mbit-loss0", "above 0"),
                                           ("10mbps-loss5", "unknown link profile '10mbps'"),
                                           ("10mbit-lossy", "unknown link profile '10mbit-lossy'")])
def test_bad_loss_profiles_are_one_line_naming_the_problem(name, problem):
    with pytest.raises(LinkError, match=problem):
        check_profile(name)


def test_ingress_drop_rule_is_a_random_input_drop():
    rule = ingress_drop_rule(5.0)
    assert rule[0] == "INPUT" and rule[-2:] == ["-j", "DROP"]
    assert rule[rule.index("--probability") + 1] == "0.05" and "random" in rule


def test_bad_rate_is_rejected_with_its_value():
    with pytest.raises(LinkError, match="'10 mbps'"):
        LinkSpec(rate="10 mbps").rate_bps


def test_tc_arguments():
    assert tbf_args(LinkSpec("10mbit"))[:3] == ["tbf", "rate", "10mbit"]
    assert int(tbf_args(LinkSpec("1gbit"))[4]) >= 1e9 / 8 * 0.01  # burst keeps up with the rate
    # The queue: 400 ms of rate, never less than two DDS send windows with room to spare.
    from commlab.dds.settings import SEND_WINDOW
    assert tbf_args(LinkSpec("10mbit"))[5:] == ["limit", str(500_000)]
    assert int(tbf_args(LinkSpec("600kbit"))[6]) >= 4 * SEND_WINDOW
    # A fast link's larger window keeps its room when an allocation lowers the rate.
    from commlab.dds.settings import link_send_window_bytes
    from commlab.links.profiles import queue_floor_for
    window = link_send_window_bytes(1e9)
    assert int(tbf_args(LinkSpec("600kbit"), queue_floor_for(window))[6]) >= 4 * window > 4 * SEND_WINDOW
    assert netem_args(LinkSpec("1mbit", delay_ms=20, loss_pct=0.5)) == ["netem", "delay", "20ms", "loss", "0.5%"]
    assert not LinkSpec("1mbit").needs_netem


RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5599)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(65536)
    if not b: break
    t0 = t0 or time.monotonic(); n += len(b)
print(n, time.monotonic() - t0, flush=True)
"""
SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], 5599), timeout=30); s.sendall(b"x" * int(sys.argv[2])); s.close()
"""


def transfer_mbit_per_s(lab, src: str, dst: str, nbytes: int) -> float:
    rx = lab.popen(dst, [sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready"
        subprocess.run([*lab.prefix(src), sys.executable, "-c", SENDER, lab.addresses[dst], str(nbytes)],
                       check=True, timeout=60)
        n, seconds = rx.stdout.readline().split()
    finally:
        rx.wait(timeout=30)
    assert int(n) == nbytes
    return nbytes * 8 / float(seconds) / 1e6


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root")
def test_shaping_between_namespaces_limits_the_rate_and_reports_what_applied():
    from commlab.links.netns import NetnsLab

    with NetnsLab(["a", "b"]) as lab:
        namespaces = list(lab.namespaces.values())
        unshaped = transfer_mbit_per_s(lab, "a", "b", 4_000_000)
        record = lab.shape("a", LinkSpec("10mbit", delay_ms=2))
        shaped = transfer_mbit_per_s(lab, "a", "b", 2_500_000)
        print(f"unshaped {unshaped:.0f} Mbit/s, shaped {shaped:.2f} Mbit/s; {describe(record)}")
        assert 7 < shaped < 11, shaped
        assert unshaped > 5 * shaped
        assert record["applied"]["rate"] == "10mbit" and "tbf" in record["tc_show"]
        if record["not_applied"]:  # no netem on this kernel: the record says so and why
            assert record["not_applied"]["delay_ms"] == 2 and "netem" in record["not_applied"]["reason"]
        else:
            assert record["applied"]["delay_ms"] == 2
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not set(namespaces) & set(left)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces, tc and iptables need root")
def test_loss_goes_to_each_namespace_ingress_and_the_record_says_how():
    from commlab.links.netns import NetnsLab

    with NetnsLab(["a", "b"]) as lab:
        record = lab.shape("b", link_for("10mbit-loss5", "b"))
        again = lab.shape("b", link_for("10mbit-loss1", "b"))  # replaces the rule, never adds a second
        rules = subprocess.run([*lab.prefix("b"), "iptables", "-S", "INPUT"], capture_output=True, text=True).stdout
        untouched = subprocess.run([*lab.prefix("a"), "iptables", "-S", "INPUT"], capture_output=True, text=True).stdout
    drops = [line for line in rules.splitlines() if "DROP" in line]
    assert "DROP" not in untouched
    if "netem" in again["tc_show"]:  # a kernel with netem takes the loss on egress instead
        assert not drops and again["applied"]["loss_pct"] == 1.0
        return
    assert len(drops) == 1 and "0.0099999" in drops[0], rules
    for rec, pct in ((record, 5.0), (again, 1.0)):
        assert rec["applied"] == {"rate": "10mbit", "loss_pct": pct, "loss_on": "ingress (iptables INPUT)"}
        assert rec["not_applied"] == {"delay_ms": 2, "reason": "the kernel has no netem qdisc"}
        assert "loss" in describe(rec) and "NOT applied {'delay_ms': 2}" in describe(rec)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_namespace_lab_comes_up_on_a_machine_without_iptables(tmp_path, monkeypatch):
    """A fresh machine has no iptables until a Docker engine is installed; the lab used to die
    with FileNotFoundError there (`make fl-* PROFILE=10mbit BACKEND=local` as root)."""
    import shutil

    from commlab.links.netns import NetnsLab

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ip").symlink_to(shutil.which("ip"))  # everything the lab needs but iptables
    monkeypatch.setenv("PATH", str(bin_dir))
    with NetnsLab(["a", "b"]) as lab:
        namespaces = list(lab.namespaces.values())
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        assert set(namespaces) <= set(listed)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not set(namespaces) & set(left)



@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_a_labs_bridge_passes_frames_without_iptables_and_leaves_the_hosts_switches_alone():
    """With br_netfilter loaded (by a Docker engine) a bridge sends every frame through iptables,
    where conntrack reassembled and fragmented again each DDS datagram: the lab's bridge lives in
    a namespace of its own whose switches are off, the host's keep their values, and a datagram
    of many frames crosses it."""
    from pathlib import Path

    from commlab.links.netns import BRIDGE_NETFILTER, NetnsLab

    host = [Path("/proc/sys/net/bridge", name) for name in BRIDGE_NETFILTER]
    if not host[0].exists():
        pytest.skip("br_netfilter is not loaded (no Docker engine has run here): no bridge calls iptables")
    before = [p.read_text() for p in host]
    with NetnsLab(["a", "b"]) as lab:
        inside = subprocess.run(["ip", "netns", "exec", lab.switch, "cat", *map(str, host)],
                                capture_output=True, text=True, check=True).stdout.split()
        assert inside == ["0"] * len(host)
        receiver = lab.popen("b", [sys.executable, "-c", "import socket; s = socket.socket(socket.AF_INET, "
                                   "socket.SOCK_DGRAM); s.bind(('0.0.0.0', 7400)); print('bound', flush=True); "
                                   "s.settimeout(30); print(len(s.recv(65535)))"], stdout=subprocess.PIPE, text=True)
        try:
            assert receiver.stdout.readline() == "bound\n"
            subprocess.run([*lab.prefix("a"), sys.executable, "-c", "import socket; socket.socket(socket.AF_INET, "
                            f"socket.SOCK_DGRAM).sendto(bytes(60000), ('{lab.addresses['b']}', 7400))"], check=True)
            assert receiver.communicate(timeout=40)[0] == "60000\n"  # 41 frames, reassembled at b only
        finally:
            receiver.kill()
    assert [p.read_text() for p in host] == before
