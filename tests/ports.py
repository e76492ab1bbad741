"""The one free-port helper of the tests (tests/test_repository.py refuses a second copy)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at this moment: bound to port 0 and closed again. Another process may take it
    before the caller binds it; the tests that need a port held use a listening socket of their own instead."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
