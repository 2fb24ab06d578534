"""The goodput probe's interleaving of modes (commlab.dds.probe), without starting nodes."""
import argparse

import pytest

from commlab.dds.probe import batches, parse_modes


def test_each_round_starts_with_the_next_mode_and_runs_every_size():
    order = batches(["plain", "mac", "aead"], [(10, 2), (20, 1)], 4)
    firsts = [order[k * 6][1] for k in range(4)]
    assert firsts == ["plain", "mac", "aead", "plain"]
    assert order[6:12] == [(1, "mac", 10, 2), (1, "mac", 20, 1), (1, "aead", 10, 2), (1, "aead", 20, 1),
                           (1, "plain", 10, 2), (1, "plain", 20, 1)]
    assert len(order) == 4 * 3 * 2


@pytest.mark.parametrize("text", ["plain,hmac", "mac,mac", ""])
def test_unknown_or_repeated_modes_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="modes must be distinct ones of plain, mac, aead"):
        parse_modes(text)
