"""The twin's cluster DNS: A records for Services and pods, as kube-dns answers a pod with dnsPolicy ClusterFirst.

/etc/hosts is not enough: gRPC's resolver (Ray's GCS client) asks DNS servers and never reads it, so a
Ray worker with only host entries waits for its head for ever. Pods get this server as their only
nameserver, with Kubernetes' search path and `ndots:5` (https://kubernetes.io/docs/concepts/services-networking/
dns-pod-service/#pod-dns-config). It answers A queries for the names it holds, an empty NOERROR for
other types of a held name (so a resolver asking AAAA first goes on to A), and NXDOMAIN for the rest.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from collections.abc import Mapping

TTL_S = 5
_A, _IN = 1, 1


def parse_question(packet: bytes) -> tuple[int, str, int, int] | None:
    """(id, lower-case name, qtype, end of the question) of a query with one question; None if malformed."""
    if len(packet) < 12:
        return None
    ident, flags, questions = struct.unpack("!HHH", packet[:6])
    if flags & 0x8000 or questions != 1:
        return None
    labels, at = [], 12
    while True:
        if at >= len(packet):
            return None
        size = packet[at]
        at += 1
        if size == 0:
            break
        if size > 63 or at + size > len(packet):
            return None
        labels.append(packet[at : at + size].decode("ascii", errors="replace").lower())
        at += size
    if at + 4 > len(packet):
        return None
    qtype, _ = struct.unpack("!HH", packet[at : at + 4])
    return ident, ".".join(labels), qtype, at + 4


def answer(packet: bytes, records: Mapping[str, str]) -> bytes | None:
    """The response to one query packet, from `records` (name → IPv4 address); None to drop it."""
    parsed = parse_question(packet)
    if parsed is None:
        return None
    ident, name, qtype, end = parsed
    question = packet[12:end]
    address = records.get(name.rstrip("."))
    if address is None:
        return struct.pack("!HHHHHH", ident, 0x8183, 1, 0, 0, 0) + question  # NXDOMAIN
    if qtype != _A:
        return struct.pack("!HHHHHH", ident, 0x8180, 1, 0, 0, 0) + question
    record = struct.pack("!HHHIH", 0xC00C, _A, _IN, TTL_S, 4) + ipaddress.IPv4Address(address).packed
    return struct.pack("!HHHHHH", ident, 0x8180, 1, 1, 0, 0) + question + record


class Server:
    """A UDP DNS server on `address`:53 in a daemon thread; `records` may change while it runs."""

    def __init__(self, address: str) -> None:
        self.records: dict[str, str] = {}
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, 53))
        self.sock.settimeout(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="twin-dns", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                packet, peer = self.sock.recvfrom(512)
            except TimeoutError:
                continue
            except OSError:
                return
            response = answer(packet, dict(self.records))
            if response is not None:
                self.sock.sendto(response, peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
