"""One chooser of a port in a named range (trainer.distributed.listen.first_free): the ring, its store pair and the heal
server take the first port no other process of the pod holds, and only "address in use" moves them on."""

from __future__ import annotations

import errno

import pytest
from trainer.distributed.listen import bound_socket, first_free
from trainer.distributed.tls_ring import RENDEZVOUS_OFFSET, RingError, pair_ports, ring_socket

from tests.ports import free_ports

HOST = "127.0.0.1"
NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): an address no interface of this machine holds


def _free_range(width: int) -> range:
    """``width`` free ports whose store ports (RENDEZVOUS_OFFSET below) are above the privileged ones."""
    while (ports := free_ports(HOST, width)).start - RENDEZVOUS_OFFSET < 1024:
        pass
    return ports


def test_a_held_port_moves_the_choice_to_the_next_one() -> None:
    ports = _free_range(3)
    held = bound_socket(HOST, ports[0])
    try:
        with ring_socket(HOST, ports) as sock:
            assert sock.getsockname()[1] == ports[1]
    finally:
        held.close()


def test_a_full_range_is_one_error_naming_it() -> None:
    ports = _free_range(2)
    held = [bound_socket(HOST, p) for p in ports]
    try:
        with pytest.raises(RingError, match=f"every ring port {ports[0]}-{ports[-1]} is taken"):
            ring_socket(HOST, ports)
        assert first_free(ports, lambda port: bound_socket(HOST, port)) is None
    finally:
        for sock in held:
            sock.close()


def test_a_pair_skips_a_port_whose_store_port_is_held() -> None:
    ports = _free_range(2)
    held = bound_socket(HOST, ports[0] - RENDEZVOUS_OFFSET)
    try:
        store, ring = pair_ports(HOST, ports)
        with store, ring:
            assert (ring.getsockname()[1], store.getsockname()[1]) == (ports[1], ports[1] - RENDEZVOUS_OFFSET)
    finally:
        held.close()


def test_an_address_this_machine_lacks_is_that_error_not_a_full_range() -> None:
    """Before the one chooser, the ring took any OSError for "taken" and blamed the number of groups."""
    with pytest.raises(OSError, match="annot assign requested address") as raised:
        ring_socket(NOT_HERE, _free_range(2))
    assert not isinstance(raised.value, RingError)
    assert raised.value.errno == errno.EADDRNOTAVAIL
