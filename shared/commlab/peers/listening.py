"""Waiting for a server to listen: Flower's grpc-bidi client does not retry a stream refused at
its start; it exits, and the server then waits for it until its round timeout."""
from __future__ import annotations

import socket
import time


def await_listener(address: str, timeout_s: float, poll_s: float = 0.1) -> None:
    """Until a TCP connection to `address` ("host:port") is accepted (then closed at once);
    RuntimeError naming the address after timeout_s."""
    host, _, port = address.rpartition(":")
    end = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=max(poll_s, 1.0)).close()
            return
        except OSError as e:
            if time.monotonic() >= end:
                raise RuntimeError(f"nothing accepted connections at {address} within {timeout_s:.0f}s ({e})") from e
            time.sleep(poll_s)
