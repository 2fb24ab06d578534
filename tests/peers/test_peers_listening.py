"""await_listener: returns once something accepts connections at the address, and names the
address in one line when nothing does (a port bound but not listening refuses at once)."""
from __future__ import annotations

import socket

import pytest

from commlab.peers.listening import await_listener


def test_a_listening_server_is_found():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        await_listener(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=5.0)


def test_no_listener_is_one_line_naming_the_address():
    with socket.socket() as bound:  # holds the port: nothing else listens there meanwhile
        bound.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{bound.getsockname()[1]}"
        with pytest.raises(RuntimeError, match=f"nothing accepted connections at {address} within 0s"):
            await_listener(address, timeout_s=0.0, poll_s=0.01)
