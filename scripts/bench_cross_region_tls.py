"""What the run's mutual TLS costs per all-reduce byte: the TLS ring (trainer/distributed/tls_pg.py) against plain gloo.

Two local processes, each a replica group's cross-group process group, all-reduce (sum) one float32 tensor of
--mib MiB --iterations times after one warm-up; for each backend the table gives the median of:

* wall seconds per all-reduce and its throughput: payload GB/s (the tensor's bytes over the time) and wire
  GB/s (what each process sent, 2(n-1)/n of the payload for a ring: trainer/distributed/link.py's ``wire_bytes``);
* CPU seconds per GB: the CPU time both processes spent (every thread: time.process_time), per GB of
  payload, the figure that compares with a mesh's sidecar or ztunnel cost (trainer README).

The TLS ring uses a certificate gkr mints for a run (TLS 1.3, AES-GCM as OpenSSL negotiates); gloo is torchft's
ProcessGroupGloo over TCP. Both over loopback, so this is the cost of the endpoints, not of a network.

    .venv/bin/python scripts/bench_cross_region_tls.py [--mib 64] [--iterations 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

GROUPS = 2
HOST = "127.0.0.1"
TIMEOUT = timedelta(seconds=120)


def _identity(folder: Path) -> Path:
    from gkr.run_tls import mint

    minted = mint("bench")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("ca.crt", minted.ca), ("tls.crt", minted.member[0]), ("tls.key", minted.member[1])):
        (folder / name).write_text(text)
    return folder


def _process_group(backend: str, rank: int, sockets: dict[str, Any]) -> tuple[Any, str]:
    """This rank's process group, configured for a quorum of GROUPS; rank 0 hosts the store (and the rendezvous)."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    store_port = sockets["store_port"]
    if rank == 0:
        sockets["store"] = TCPStore(
            HOST, store_port, is_master=True, wait_for_workers=False, master_listen_fd=sockets["store_fd"]
        )
    if backend == "gloo":
        from torchft.process_group import ProcessGroupGloo

        pg: Any = ProcessGroupGloo(timeout=TIMEOUT)
    else:
        from trainer.distributed.mtls import Identity
        from trainer.distributed.tls_pg import TlsRingProcessGroup
        from trainer.distributed.tls_ring import RingServer

        listener = socket.socket(fileno=sockets["ring_fd"]) if rank == 0 else socket.create_server((HOST, 0))
        pg = TlsRingProcessGroup(RingServer(listener, Identity.folder(sockets["identity"])), TIMEOUT)
    address = f"{HOST}:{store_port}/bench/{backend}"
    pg.configure(address, f"bench-{rank}", rank, GROUPS)
    return pg, address


def _worker(backend: str, rank: int, mib: int, iterations: int, sockets: dict[str, Any], out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    pg, _ = _process_group(backend, rank, sockets)
    tensor = torch.ones(mib << 18)  # float32: 4 bytes each
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM  # type: ignore[assignment]  # torch converts RedOpType on assignment
    samples = []
    for i in range(iterations + 1):
        tensor.fill_(1.0)
        wall, cpu = time.perf_counter(), time.process_time()
        pg.allreduce([tensor], opts).wait()
        if i:  # the first is the warm-up: connections, buffers
            samples.append((time.perf_counter() - wall, time.process_time() - cpu))
    if float(tensor[0]) != GROUPS:
        raise SystemExit(f"bench: {backend} summed to {float(tensor[0])}, not {GROUPS}")
    out.put((rank, samples))
    time.sleep(1)  # let the peer finish reading before this process (and its sockets) go away
    pg.shutdown()


def measure(backend: str, mib: int, iterations: int, identity: Path) -> dict[str, float]:
    from trainer.distributed.link import wire_bytes
    from trainer.distributed.tls_ring import pair_ports

    store, ring = pair_ports(HOST)
    sockets = {"store_port": store.getsockname()[1], "store_fd": store.fileno(), "ring_fd": ring.fileno()}
    sockets["identity"] = str(identity)
    context = mp.get_context("fork")  # the listening sockets are inherited by rank 0
    out = context.Queue()
    procs = [context.Process(target=_worker, args=(backend, r, mib, iterations, sockets, out)) for r in range(GROUPS)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    store.close()
    ring.close()
    payload = (mib << 20) / 1e9
    walls = [max(results[r][i][0] for r in results) for i in range(iterations)]
    cpus = [sum(results[r][i][1] for r in results) for i in range(iterations)]
    wall = statistics.median(walls)
    return {
        "wall_s": round(wall, 4),
        "payload_gb_s": round(payload / wall, 3),
        "wire_gb_s": round(wire_bytes(mib << 20, GROUPS) / 1e9 / wall, 3),
        "cpu_s_per_gb": round(statistics.median(cpus) / payload, 3),
    }


def table(rows: dict[str, dict[str, float]], mib: int) -> str:
    lines = [f"all-reduce of {mib} MiB float32 between {GROUPS} local processes (median)"]
    lines.append(f"{'backend':<10} {'wall s':>8} {'payload GB/s':>13} {'wire GB/s':>10} {'CPU s/GB':>9}")
    for name, row in rows.items():
        lines.append(
            f"{name:<10} {row['wall_s']:>8.4f} {row['payload_gb_s']:>13.3f} {row['wire_gb_s']:>10.3f}"
            f" {row['cpu_s_per_gb']:>9.3f}"
        )
    gloo, tls = rows["gloo"], rows["tls-ring"]
    lines.append(
        f"TLS ring / gloo: {tls['wall_s'] / gloo['wall_s']:.2f}x the time, "
        f"{tls['cpu_s_per_gb'] / gloo['cpu_s_per_gb']:.2f}x the CPU per byte"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not (1 <= args.mib <= 4096 and 1 <= args.iterations <= 100):
        print("bench_cross_region_tls: --mib in [1, 4096] and --iterations in [1, 100]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        identity = _identity(Path(tmp) / "run-tls")
        rows = {name: measure(name, args.mib, args.iterations, identity) for name in ("gloo", "tls-ring")}
    print(json.dumps(rows, indent=2) if args.json else table(rows, args.mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
