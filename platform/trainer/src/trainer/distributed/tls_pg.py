"""The cross-region process group of a run with a TLS identity: a ring all-reduce over the run's mutual TLS.

Across regions torchft's Manager all-reduces over its ``pg`` (DDP's gradient buckets, ft/gradsync.py; DiLoCo's
pseudo-gradients, torchft/local_sgd.py), today gloo. PyTorch's pip wheels build gloo without its TLS
transport and torchft 0.2.0's ProcessGroupGloo binds gloo's sockets on every interface at ports chosen at
run time, so gloo cannot be put behind the run's certificate. This process group does the same ring
all-reduce as gloo and NCCL for large messages (a reduce-scatter then an all-gather, 2(n-1) steps of
payload/n bytes: distributed/link.py) over TLS 1.3 sockets of the run's CA (distributed/tls_ring.py), on CPU tensors; a CUDA
tensor is staged through host memory, as gloo does.

What torchft calls on it (torchft 0.2.0 manager.py ``Manager._async_quorum``, ``Manager.allreduce``,
``Manager.should_commit``): ``configure`` once per quorum with the quorum's store address, this group's rank
and the quorum's size; ``allreduce([tensor], opts)`` with ReduceOp.SUM (the Manager turns AVG into SUM and
divides itself; AVG is served too); ``errored``. ``size`` is read by distributed/counted_pg.py. Nothing else is used
(quantized all-reduce is off: DiLoCo's ``should_quantize`` defaults to False).

A failure (a peer gone, a timeout, a closed link) fails the collective's work and every later one until the
next ``configure``: torchft then reports the error, the step does not commit, and the Lighthouse gives a
new quorum (it bumps the quorum id after a commit failure), which configures a new ring.
"""

from __future__ import annotations

import logging
import queue
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torchft.process_group import ProcessGroup

from trainer.distributed.tls_ring import RingError, RingServer, rendezvous

log = logging.getLogger(__name__)

ReduceOp = dist.ReduceOp
Op = Any  # ReduceOp's RedOpType (SUM, AVG, ...): what a collective is asked to do
BACKEND = "meridian-tls-ring"


@dataclass
class Links:
    """One quorum's ring: the link to the next rank (sent on) and from the previous one (received on)."""

    rank: int
    world: int
    outgoing: ssl.SSLSocket | None = None  # to rank + 1
    incoming: ssl.SSLSocket | None = None  # from rank - 1
    error: Exception | None = None

    def close(self, error: Exception) -> None:
        self.error = self.error or error
        for conn in (self.outgoing, self.incoming):
            if conn is not None:
                conn.close()


def _bytes(chunk: torch.Tensor) -> memoryview:
    """The chunk's own memory (no copy), as bytes: what TLS sends from and receives into."""
    return memoryview(chunk.view(torch.uint8).numpy()) if chunk.numel() else memoryview(b"")  # type: ignore[arg-type]


def _recv_into(conn: ssl.SSLSocket, target: memoryview) -> None:
    got = 0
    while got < len(target):
        n = conn.recv_into(target[got:], len(target) - got)
        if n == 0:
            raise RingError("the previous rank closed its ring link")
        got += n


def ring_allreduce(links: Links, flat: torch.Tensor, sender: ThreadPoolExecutor) -> None:
    """Sum ``flat`` (1-D, contiguous, CPU) over the ring in place: reduce-scatter, then all-gather."""
    n, rank = links.world, links.rank
    assert links.outgoing is not None
    assert links.incoming is not None
    chunks = list(torch.tensor_split(flat, n))
    scratch = torch.empty_like(chunks[0])

    def step(out: int, into: int, reduce: bool) -> None:
        sent = sender.submit(links.outgoing.sendall, _bytes(chunks[out]))  # type: ignore[union-attr]
        target = chunks[into] if not reduce else scratch[: chunks[into].numel()]
        _recv_into(links.incoming, _bytes(target))  # type: ignore[arg-type]
        sent.result()
        if reduce:
            chunks[into].add_(target)

    for s in range(n - 1):  # after these, this rank holds the sum of chunk (rank + 1) % n
        step((rank - s) % n, (rank - s - 1) % n, reduce=True)
    for s in range(n - 1):
        step((rank - s + 1) % n, (rank - s) % n, reduce=False)


class Ring:
    """The ring's state and its one worker thread (collectives run in the order they were issued, as gloo's)."""

    def __init__(self, server: RingServer, timeout: timedelta) -> None:
        self.server, self.timeout = server, timeout
        self.links = Links(0, 1)
        self.jobs: queue.SimpleQueue[tuple[Links, list[torch.Tensor], Op, torch.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tls-ring-send")
        threading.Thread(target=self.work_loop, name="tls-ring-work", daemon=True).start()

    def configure(self, store_addr: str, rank: int, world: int) -> None:
        self.links.close(RingError("the ring was reconfigured"))
        self.links = Links(rank, world)
        if world == 1:
            return  # alone in the quorum: nothing crosses a link
        deadline = time.monotonic() + self.timeout.total_seconds()
        links = self.links
        try:
            key, addresses = rendezvous(self.server, store_addr, rank, world, self.timeout.total_seconds())
            self.server.forget(lambda k: k == key)
            header = {"op": "ring", "key": key, "rank": rank}
            links.outgoing = self.server.dial(addresses[(rank + 1) % world], header, self.timeout.total_seconds())
            links.incoming = self.server.wait_link(key, (rank - 1) % world, deadline)
            links.incoming.settimeout(self.timeout.total_seconds())
        except (OSError, ssl.SSLError, RingError) as error:
            links.close(error)
            raise RingError(f"tls ring: rank {rank} of {world}: {error}") from None

    def submit(self, tensors: list[torch.Tensor], op: Op) -> torch.futures.Future[Any]:
        future: torch.futures.Future[Any] = torch.futures.Future()
        self.jobs.put((self.links, tensors, op, future))
        return future

    def work_loop(self) -> None:
        while True:
            links, tensors, op, future = self.jobs.get()
            try:
                if links.error is not None:
                    raise RingError(f"the ring failed earlier: {links.error}")
                for tensor in tensors:
                    self.reduce_one(links, tensor, op)
            except Exception as error:
                links.close(error)
                log.warning(
                    "tls ring: all-reduce failed: %s", str(error).splitlines()[0][:200] if str(error) else error
                )
                future.set_exception(error)
            else:
                future.set_result(tensors)

    def reduce_one(self, links: Links, tensor: torch.Tensor, op: Op) -> None:
        if op not in (ReduceOp.SUM, ReduceOp.AVG):
            raise RingError(f"reduce op {op} is not served (sum and avg are)")
        if links.world == 1:
            return
        staged = tensor.detach().to("cpu", copy=tensor.device.type != "cpu").contiguous()
        flat = staged.view(-1)
        ring_allreduce(links, flat, self.sender)
        if op == ReduceOp.AVG:
            flat.div_(links.world)
        if staged.data_ptr() != tensor.data_ptr():
            tensor.copy_(staged)  # a CUDA or non-contiguous tensor: back from its host copy

    def abort(self, error: Exception) -> None:
        self.links.close(error)


class RingWork(dist.Work):  # the base of every collective's work, as torchft's own
    """A collective of the ring: done when its future is; ``wait`` is bounded by the process group's timeout."""

    def __init__(self, ring: Ring, future: torch.futures.Future[Any]) -> None:
        super().__init__()
        self.ring, self.future, self.done = ring, future, threading.Event()
        future.add_done_callback(lambda _: self.done.set())

    def wait(self, timeout: timedelta | None = None) -> bool:
        limit = (timeout or self.ring.timeout).total_seconds()
        if not self.done.wait(limit):
            error = TimeoutError(f"tls ring: all-reduce did not complete within {limit:g}s")
            self.ring.abort(error)  # its sockets close: the worker fails the collective and moves on
            raise error
        self.future.value()  # raises the collective's error
        return True

    def block_current_stream(self, timeout: timedelta | None = None) -> None:
        self.wait(timeout)  # the result is written back from host memory: nothing is left on a stream

    def is_completed(self) -> bool:
        return self.done.is_set()

    def get_future(self) -> torch.futures.Future[Any]:
        return self.future


class TlsRingProcessGroup(ProcessGroup):  # type: ignore[misc]  # torchft has no type information
    """torchft's process group interface over ``Ring``; no state of its own (torchft's private names stay its own)."""

    def __init__(self, server: RingServer, timeout: timedelta) -> None:
        super().__init__(0, 1)
        self.ring = Ring(server, timeout)

    def configure(
        self,
        store_addr: str,
        replica_id: str,
        rank: int,
        world_size: int,
        quorum_id: int | None = None,
        group_rank: int | None = None,
        group_world_size: int | None = None,
        global_ranks: list[int] | None = None,
    ) -> None:
        self.ring.configure(store_addr, rank, world_size)

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> RingWork:
        op = getattr(opts, "reduceOp", opts)  # AllreduceOptions, a ReduceOp or its RedOpType
        return RingWork(self.ring, self.ring.submit(tensors, getattr(op, "op", op)))

    def size(self) -> int:
        return self.ring.links.world

    def getBackendName(self) -> str:
        return BACKEND

    def errored(self) -> Exception | None:
        return self.ring.links.error

    def set_timeout(self, timeout: timedelta) -> None:
        self.ring.timeout = timeout

    def abort(self) -> None:
        self.ring.abort(RingError("the process group was aborted"))

    def shutdown(self) -> None:
        self.abort()
        self.ring.server.close()
        self.ring.sender.shutdown(wait=False)
