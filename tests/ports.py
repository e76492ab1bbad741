"""The tests' free-port helpers, one of each kind (tests/test_one_helper.py refuses a second copy)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at this moment: bound to port 0 and closed again. Another process may take it
    before the caller binds it; the tests that need a port held use a listening socket of their own instead."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def free_ports(host: str, count: int) -> range:
    """``count`` consecutive ports on ``host`` that nothing holds at this moment (each bound, then all closed),
    for a test of a chooser over a named range that must not meet another test's listener in that range."""
    for _ in range(50):
        start = free_port(host)
        if start + count > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(start, start + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind((host, port))
            return range(start, start + count)
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise AssertionError(f"no {count} consecutive free ports on {host}")
