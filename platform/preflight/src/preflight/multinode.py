"""All-reduce between this node and known-good peers, over the RDMA NICs, judged against the catalog's floor.

Every participant runs `preflight run --deep --peers A,B,... [--self ME]` at about the same time
with the same set of names (its own may be in the list or not). The participants, sorted, give
each node its rank and the first one hosts the rendezvous, so no coordinator is needed. Each
node starts one process per GPU (ranks node_rank x per_node + local rank, LOCAL_RANK picks the
GPU and so its NIC: on A3 Ultra each GPU has its own CX-7), which is how a job's NCCL traffic
crosses all 8 NICs; on a machine without GPUs one gloo process per node (tests). The processes
run `collective.measure` (nccl-tests' busbw, the slowest rank decides) and the floor is the one
gkr passes for a job on several such machines (`Thresholds.args(nodes)`: catalog
`allreduce_inter_gbps` less 20%).

NCCL then uses the environment this runs in: the caller loads Google's gIB setup first, as gkr's
prelude does for jobs (`source /usr/local/gib/scripts/set_nccl_env.sh`, then NCCL_SOCKET_IFNAME
and the A3 Ultra tuner config); on GPUs without NCCL_NET=gIB the check refuses to run rather than
measure plain sockets and blame the node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from preflight.collective import CollectiveSettings, Measurement, judge, measure
from preflight.report import Result

NAME = "nccl-multinode"
PORT = 29510  # beside torchrun's 29400 and gkr's 29500, so a leftover job's port is not taken
MAX_NODES = 64
TIMEOUT_S = 300.0  # peers start within minutes of each other; then a hung collective ends
_ADDRESS = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.\-]{0,251}[A-Za-z0-9])?")  # a DNS name or an IPv4 address


@dataclass(frozen=True)
class Plan:
    master: str  # the first participant: hosts the rendezvous
    port: int
    node_rank: int
    nodes: int
    per_node: int  # processes on each node (GPUs, or 1 on CPU)

    @property
    def world(self) -> int:
        return self.nodes * self.per_node


def plan(me: str, peers: list[str], port: int = PORT, per_node: int = 1) -> Plan:
    """Pure: this node's place among the participants; ValueError (one line) for a bad list."""
    for name in [me, *peers]:
        if not _ADDRESS.fullmatch(name):
            raise ValueError(f"--peers/--self: {name[:80]!r} is not a host name or IPv4 address")
    everyone = sorted({me, *peers})
    if len(everyone) < 2:
        raise ValueError("--peers: name at least one peer besides this node")
    if len(everyone) > MAX_NODES:
        raise ValueError(f"--peers: {len(everyone)} nodes, at most {MAX_NODES}")
    if not 1 <= port <= 65535:
        raise ValueError(f"--peer-port: {port} is not a TCP port")
    if not 1 <= per_node <= 64:
        raise ValueError(f"{per_node} processes per node: expected 1 to 64")
    return Plan(everyone[0], port, everyone.index(me), len(everyone), per_node)


def verdict(
    measurements: list[Measurement], backend: str, layout: Plan, min_busbw_gbps: float | None, sizes: tuple[int, ...]
) -> Result:
    """Pure: the judgement, on measured or injected numbers."""
    ranks = f"{layout.nodes} nodes x {layout.per_node} rank(s)"
    return judge(measurements, backend, layout.world, CollectiveSettings(min_busbw_gbps, sizes), NAME, ranks)


def _environment(layout: Plan, local: int, settings: CollectiveSettings, result: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MASTER_ADDR": layout.master,
        "MASTER_PORT": str(layout.port),
        "RANK": str(layout.node_rank * layout.per_node + local),
        "WORLD_SIZE": str(layout.world),
        "LOCAL_RANK": str(local),
        "PREFLIGHT_SIZES": ",".join(str(s) for s in settings.sizes),
        "PREFLIGHT_ITERATIONS": str(settings.iterations),
        "PREFLIGHT_RESULT": str(result),
    }


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def _last_line(path: Path, code: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 4096))  # a traceback ends with the exception
            tail = f.read().decode(errors="replace")
    except OSError:
        tail = ""
    return (tail.strip().splitlines() or [f"exit {code}"])[-1][:300]


def _wait(procs: list[subprocess.Popen[bytes]], deadline: float) -> int | None:
    """The index of the first process that failed, -1 when all succeeded, None at the deadline."""
    while time.monotonic() < deadline:
        codes = [proc.poll() for proc in procs]
        failed = next((i for i, code in enumerate(codes) if code not in (None, 0)), None)
        if failed is not None:
            return failed  # the others may wait at the rendezvous for it: do not wait for them
        if all(code == 0 for code in codes):
            return -1
        time.sleep(0.1)
    return None


def launch(layout: Plan, settings: CollectiveSettings, timeout_s: float = TIMEOUT_S) -> Result:
    """Start this node's processes, wait for them (killed at the timeout), judge local rank 0's numbers."""
    with tempfile.TemporaryDirectory(prefix="preflight-multinode-") as folder:
        results = [Path(folder) / f"rank{i}.json" for i in range(layout.per_node)]
        logs = [Path(folder) / f"rank{i}.log" for i in range(layout.per_node)]  # a file: NCCL_DEBUG never fills a pipe
        procs = []
        try:
            for i in range(layout.per_node):
                with logs[i].open("wb") as log:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "preflight.multinode"],
                            env=_environment(layout, i, settings, results[i]),
                            stdout=subprocess.DEVNULL,
                            stderr=log,
                        )
                    )
            outcome = _wait(procs, time.monotonic() + timeout_s)
        finally:
            _stop(procs)
        if outcome is None:
            return Result(
                NAME,
                "error",
                f"the all-reduce with {layout.nodes - 1} peer(s) did not finish within {timeout_s:g} s "
                f"(rendezvous {layout.master}:{layout.port}): are the peers running it too?",
            )
        if outcome >= 0:
            reason = _last_line(logs[outcome], procs[outcome].returncode)
            return Result(NAME, "error", f"the all-reduce could not run: {reason}")
        try:
            data = json.loads(results[0].read_text())
            measurements = [Measurement(**m) for m in data["measurements"]]
            backend = str(data["backend"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return Result(NAME, "error", f"the all-reduce left no readable result ({exc})")
    return verdict(measurements, backend, layout, settings.min_busbw_gbps, settings.sizes)


def check(
    me: str,
    peers: list[str],
    settings: CollectiveSettings,
    env: Mapping[str, str],
    rdma: bool = True,
    port: int = PORT,
    timeout_s: float = TIMEOUT_S,
) -> Result:
    if not peers:
        return Result(NAME, "skip", "no peers given (--peers HOST,...): nothing to test across")
    try:
        import torch
    except ImportError:
        return Result(NAME, "error", "PyTorch is not installed in this image")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus and rdma and env.get("NCCL_NET") != "gIB":
        return Result(
            NAME,
            "error",
            f"NCCL_NET={env.get('NCCL_NET', '(unset)')}: the gIB environment is not loaded; run after "
            "`source /usr/local/gib/scripts/set_nccl_env.sh` as gkr's prelude does",
        )
    try:
        layout = plan(me, peers, port, per_node=gpus or 1)
    except ValueError as exc:
        return Result(NAME, "error", str(exc))
    return launch(layout, settings, timeout_s)


def _worker() -> int:
    """One rank: measure, and (every rank) write the numbers where the launcher reads them."""
    sizes = tuple(int(s) for s in os.environ["PREFLIGHT_SIZES"].split(","))
    settings = CollectiveSettings(None, sizes, iterations=int(os.environ["PREFLIGHT_ITERATIONS"]))
    measurements, backend, world = measure(settings)
    Path(os.environ["PREFLIGHT_RESULT"]).write_text(
        json.dumps({"backend": backend, "world": world, "measurements": [asdict(m) for m in measurements]})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker())
