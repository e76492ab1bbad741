"""TCP stores the trainer serves, listening only on the address their peers are given (the pod's IP in a pod).

torch's TCPStore server listens on every interface whatever ``host_name`` says: with torch 2.13,
``TCPStore("127.0.0.1", 0, is_master=True)`` shows as ``*:<port>`` in ``ss -ltn`` (tests/trainer/test_bind.py
keeps the observation). Its documented ``master_listen_fd`` takes a socket already bound instead (PyTorch's
torch.distributed docs, ``TCPStore``: "a socket already bound to port", Linux only), so the trainer binds
that socket to the address itself and hands it over: the store is then not reachable on the pod's other
interfaces (its loopback, gVNIC, a GPU pod's RDMA NICs). It stays plain TCP without authentication: who may
reach it is the network's business (the trainer README, "What a run across regions still exposes").
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

T = TypeVar("T")

LISTEN_BACKLOG = 1024  # a group's ranks and the other groups' process groups connect at once after a quorum
TORCH_STORE_TIMEOUT = timedelta(seconds=300)  # torch's own default for a TCPStore


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` only (0: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's own listener sets it
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


# Ports this process holds for a store it opens later (reserve): nothing else can take one in between.
_RESERVED: dict[tuple[str, int], socket.socket] = {}


def reserve(host: str) -> int:
    """A free port on ``host``, held listening by this process until ``store_on(host, port)`` serves on it.

    A port found free and let go is anyone's until it is bound again: a Ray spare picks its group's
    rendezvous port when it is placed and trains on it only after another group dies, seconds or hours
    later, and any connection of the node (Ray's, gloo's) may be given that port as its own in between.
    Held, it cannot be (tests/trainer/test_rendezvous_port.py). Connections that arrive before the store wait in the backlog.
    """
    sock = bound_socket(host, 0)
    port: int = sock.getsockname()[1]
    _RESERVED[(host, port)] = sock
    return port


def first_free(ports: Iterable[int], bind: Callable[[int], T]) -> T | None:
    """``bind(port)`` on the first of ``ports`` no other process of this pod holds; None when all are held.

    The one chooser of a port in a named range (the ring's, the heal server's): only "address in use" moves
    on to the next port; any other error (an address this pod does not have) is raised, not taken for a
    full range."""
    for port in ports:
        try:
            return bind(port)
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
    return None


def store_on(
    host: str,
    port: int = 0,
    world_size: int | None = None,
    *,
    timeout: timedelta = TORCH_STORE_TIMEOUT,
    wait_for_workers: bool = False,
) -> Any:
    """A TCPStore server (``is_master``) listening on ``host``:``port`` only; its clients dial ``host`` as before."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    sock = _RESERVED.pop((host, port), None) or bound_socket(host, port)
    bound = sock.getsockname()[1]
    fd = sock.detach()  # the store owns the descriptor from here (it closes it when it stops)
    try:
        return TCPStore(
            host,
            bound,
            world_size,
            is_master=True,
            timeout=timeout,
            wait_for_workers=wait_for_workers,
            master_listen_fd=fd,
        )
    except BaseException:
        os.close(fd)
        raise
