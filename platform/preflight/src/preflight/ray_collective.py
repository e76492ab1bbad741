"""The cross-pod all-reduce for Ray jobs: one rank per GPU worker pod, placed by Ray.

A RayJob's entrypoint runs on the head; this places one task per worker pod
(a placement group of `pods` bundles of `gpus_per_pod` GPUs, spread), lets
the first one pick the rendezvous address, runs `collective.measure` in each,
and judges rank 0's numbers like `preflight run --check allreduce`.

    python -m preflight.ray_collective --pods 16 --gpus-per-pod 8 --min-busbw-gbps 144 && exec <the job>

Exit codes as `preflight run`: 0 pass, 1 fail, 2 could not run.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from contract.names import ray_address
from preflight.collective import CollectiveSettings, Measurement, judge, measure
from preflight.report import Result, exit_code, lines


def _rendezvous() -> tuple[str, int]:
    """This node's address and a free port on it."""
    with socket.socket() as s:
        s.bind(("", 0))
        port = int(s.getsockname()[1])
    return socket.gethostbyname(socket.gethostname()), port


def _rank(rank: int, world: int, address: str, port: int, settings: CollectiveSettings) -> dict[str, Any]:
    os.environ.update(MASTER_ADDR=address, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0")
    measurements, backend, _ = measure(settings)
    return {"backend": backend, "measurements": [asdict(m) for m in measurements]}


def run(pods: int, gpus_per_pod: int, settings: CollectiveSettings, timeout_s: float = 600) -> Result:
    try:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    except ImportError:
        return Result("allreduce", "error", "Ray is not installed in this image")
    if pods < 2:
        return Result("allreduce", "skip", "one pod: no collective across pods to test")
    if not ray.is_initialized():
        # the job's cluster (RAY_ADDRESS), or a local one
        ray.init(address=ray_address(os.environ), ignore_reinit_error=True, log_to_driver=False)
    bundle = {"GPU": gpus_per_pod} if gpus_per_pod else {"CPU": 1}
    group = placement_group([bundle] * pods, strategy="SPREAD")
    try:
        ray.get(group.ready(), timeout=timeout_s)
        options = [
            {
                "scheduling_strategy": PlacementGroupSchedulingStrategy(group, i),
                "num_gpus": gpus_per_pod,
                "num_cpus": 0 if gpus_per_pod else 1,
            }
            for i in range(pods)
        ]
        address, port = ray.get(ray.remote(_rendezvous).options(**options[0]).remote(), timeout=timeout_s)
        task = ray.remote(_rank)
        results = ray.get(
            [task.options(**options[i]).remote(i, pods, address, port, settings) for i in range(pods)],
            timeout=timeout_s,
        )
    except (ray.exceptions.RayError, TimeoutError) as exc:
        return Result(
            "allreduce", "error", f"the all-reduce across {pods} pods could not run: {str(exc).splitlines()[0]}"
        )
    finally:
        remove_placement_group(group)
    first = results[0]
    return judge([Measurement(**m) for m in first["measurements"]], first["backend"], pods, settings)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="preflight.ray_collective", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--gpus-per-pod", type=int, default=8)
    parser.add_argument("--min-busbw-gbps", type=float)
    parser.add_argument(
        "--sizes", type=lambda s: tuple(int(x) for x in s.split(",")), default=(1 << 20, 16 << 20, 256 << 20)
    )
    args = parser.parse_args(argv)
    result = run(args.pods, args.gpus_per_pod, CollectiveSettings(args.min_busbw_gbps, sizes=args.sizes))
    sys.stdout.write(lines([result], limit=len(result.evidence)))  # lines() shows a failure's evidence
    if result.status not in ("fail", "error"):
        sys.stdout.writelines(f"      {row}\n" for row in result.evidence)
    return exit_code([result])


if __name__ == "__main__":
    raise SystemExit(main())
