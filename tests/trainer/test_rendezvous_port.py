"""A sharded group's rendezvous port is held from the moment it is chosen until the group's store serves on it.

Under Ray a spare chooses its rendezvous port when it is placed and trains on it only when another group dies.
A port found free and let go in between is anyone's: a connection of the node (Ray's, gloo's) may be given it
as its own local port, and the restarted group's store then fails with "address in use" and restarts again
(the CI failure of stop 49: group 1 trained three times after one kill). The live side: test_ray_groups_recovery.py.
"""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import pytest
from trainer.distributed import listen
from trainer.distributed.group import group_store

from tests.ports import free_port

POD_IP = "127.0.0.2"  # the node's IP under Ray (as in test_bind.py)


def take_as_local_port(port: int) -> tuple[socket.socket, socket.socket]:
    """A client connection whose own end is ``port``, as the kernel may give any outgoing connection."""
    server = socket.socket()
    server.bind((POD_IP, 0))
    server.listen()
    client = socket.socket()
    client.bind((POD_IP, port))
    client.connect(server.getsockname())
    return server, client


def test_a_port_found_free_and_let_go_is_lost_to_any_connection_of_the_node() -> None:
    """What the spare did before: the store cannot open on a port a connection took in the meantime."""
    port = free_port(POD_IP)
    server, client = take_as_local_port(port)
    try:
        with pytest.raises(OSError, match="Address already in use"):
            listen.store_on(POD_IP, port)
    finally:
        client.close()
        server.close()


def test_a_reserved_rendezvous_port_is_the_group_s_alone_until_its_store_serves_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = listen.reserve(POD_IP)
    with pytest.raises(OSError, match="Address already in use"):
        take_as_local_port(port)
    monkeypatch.setenv("MASTER_ADDR", POD_IP)
    monkeypatch.setenv("MASTER_PORT", str(port))
    stores: dict[int, object] = {}
    rank0 = threading.Thread(target=lambda: stores.__setitem__(0, group_store(0, 2, timedelta(seconds=30))))
    rank0.start()
    stores[1] = group_store(1, 2, timedelta(seconds=30))  # rank 1 dials the reserved port; rank 0's store serves it
    rank0.join(timeout=30)
    assert set(stores) == {0, 1}
    assert (POD_IP, port) not in listen._RESERVED  # handed to the store, once
