"""`preflight run`: check the machine this pod landed on.

    preflight run [--check NAME ...] [--kernel-log FILE] [--nvidia-smi FILE]
                  [--expect-gpus N] [--window SECONDS] [--json]
                  [--termination-log FILE] [--annotate]
    preflight run --deep [--level 1-4] [--peers HOST,...] [--self HOST] ...

`--deep` adds the deep checks (RDMA link state, an all-reduce with known-good peers, DCGM
diagnostics at `--level`, default 2; 3 for burn-in) after the usual ones.

On failure `--termination-log` writes the failing check as JSON (schema, check,
summary, evidence, time) where the kubelet reads a container's termination
message: that is how a job's init container tells Warden, with no right to
touch Nodes. `--annotate` patches the Node itself, for callers that may
(Warden's own identity, operators).

Exit codes: 0 every check passed, 1 a check failed, 2 a check could not run
(or bad arguments).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract import incluster, names
from preflight import dcgm, multinode, nvidia_smi, rdma_links
from preflight.checks import check_gpu_state, check_kernel_log
from preflight.collective import CollectiveSettings, check_allreduce
from preflight.compute import ComputeSettings, check_compute
from preflight.environment import Settings, check_checkpoint_mount, check_nccl, check_rdma_interfaces, check_shm
from preflight.metrics import PreflightMetrics
from preflight.node import annotate
from preflight.report import Result, as_json, exit_code, lines, node_annotation, termination_message


def _read(path: str | None, live: list[str]) -> str:
    """A saved output, or the live command's."""
    if path is not None:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    return subprocess.run(live, capture_output=True, text=True, check=True, timeout=60).stdout


def _uptime() -> float | None:
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kernel_log(args: argparse.Namespace) -> Result:
    try:
        text = _read(args.kernel_log, ["dmesg"])
    except (OSError, subprocess.SubprocessError) as exc:
        return Result(
            "kernel-log", "error", f"cannot read the kernel log ({exc}); pass --kernel-log FILE or run with CAP_SYSLOG"
        )
    return check_kernel_log(text, args.window, uptime=None if args.kernel_log else _uptime())


def _gpu_state(args: argparse.Namespace) -> Result:
    try:
        text = _read(args.nvidia_smi, nvidia_smi.QUERY)
        if args.nvidia_smi is None:
            text += "\n" + _read(None, nvidia_smi.BANNER)
    except (OSError, subprocess.SubprocessError) as exc:
        return Result("gpu-state", "error", f"cannot run nvidia-smi ({exc}); pass --nvidia-smi FILE")
    return check_gpu_state(text, args.expect_gpus, args.min_driver)


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(
        root=Path(args.root),
        checkpoint_dir=args.checkpoint_dir,
        rdma=not args.no_rdma,
        min_shm_bytes=int(args.min_shm_gib * 2**30),
    )


CHECKS: dict[str, Callable[[argparse.Namespace], Result]] = {
    "kernel-log": _kernel_log,
    "gpu-state": _gpu_state,
    "compute": lambda a: check_compute(
        ComputeSettings(a.min_tflops, size=256 if a.cpu else 8192, iterations=5 if a.cpu else 20, cpu=a.cpu)
    ),
    "allreduce": lambda a: check_allreduce(CollectiveSettings(a.min_busbw_gbps, sizes=a.sizes)),
    "checkpoint-mount": lambda a: check_checkpoint_mount(_settings(a)),
    "nccl": lambda a: check_nccl(_settings(a), os.environ),
    "rdma-interfaces": lambda a: check_rdma_interfaces(_settings(a)),
    "shm": lambda a: check_shm(_settings(a)),
}


def _dcgm(args: argparse.Namespace) -> Result:
    if args.dcgmi is None:
        return dcgm.run(args.level, args.dcgm_host, args.dcgm_timeout)
    try:
        return dcgm.check(Path(args.dcgmi).read_text(encoding="utf-8", errors="replace"), args.level)
    except OSError as exc:
        return Result(dcgm.NAME, "error", f"cannot read {args.dcgmi} ({exc.strerror})")


def _multinode(args: argparse.Namespace) -> Result:
    settings = CollectiveSettings(args.min_busbw_gbps, sizes=args.sizes)
    return multinode.check(
        args.self, args.peers, settings, os.environ, not args.no_rdma, args.peer_port, args.peer_timeout
    )


# In this order: the all-reduce before DCGM, so peers waiting at the rendezvous do not wait out a level 3 run.
DEEP_CHECKS: dict[str, Callable[[argparse.Namespace], Result]] = {
    rdma_links.NAME: lambda a: rdma_links.check(Path(a.root), a.expect_rdma_nics, a.min_rdma_gbps, not a.no_rdma),
    multinode.NAME: _multinode,
    dcgm.NAME: _dcgm,
}
ALL_CHECKS = {**CHECKS, **DEEP_CHECKS}


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


Option = tuple[str, dict[str, Any]]  # a flag and its argparse keywords

# What `preflight run` checks and how, in --help order (defaults read from the environment: _environment_defaults).
CHECK_OPTIONS: tuple[Option, ...] = (
    (
        "--check",
        {"action": "append", "metavar": "NAME", "help": f"run only this check (repeatable): {', '.join(ALL_CHECKS)}"},
    ),
    ("--kernel-log", {"metavar": "FILE", "help": "read a saved kernel log instead of dmesg"}),
    ("--nvidia-smi", {"metavar": "FILE", "help": f"read saved output of: {' '.join(nvidia_smi.QUERY)}"}),
    ("--expect-gpus", {"type": int, "help": "GPUs the pool's machine has"}),
    (
        "--window",
        {
            "type": float,
            "default": 3600.0,
            "metavar": "SECONDS",
            "help": "look-back window for kernel log errors (default 3600)",
        },
    ),
    ("--min-driver", {"help": "oldest NVIDIA driver allowed, e.g. 570.124.06"}),
    ("--min-tflops", {"type": float, "help": "compute threshold per device (gkr passes the catalog's)"}),
    ("--min-busbw-gbps", {"type": float, "help": "all-reduce bus bandwidth threshold (gkr passes the catalog's)"}),
    (
        "--sizes",
        {
            "type": _sizes,
            "default": (1 << 20, 16 << 20, 256 << 20),
            "help": "all-reduce sizes in bytes, comma-separated",
        },
    ),
    ("--cpu", {"action": "store_true", "help": "tiny CPU mode of the compute check (tests, machines without GPUs)"}),
    ("--checkpoint-dir", {"help": "where the checkpoint bucket is mounted"}),
    (
        "--no-rdma",
        {"action": "store_true", "help": "the machine has no RDMA NICs: skip the NCCL/gIB and interface checks"},
    ),
    ("--min-shm-gib", {"type": float, "default": 64, "help": "smallest /dev/shm allowed (default 64 GiB)"}),
    ("--root", {"default": "/", "help": argparse.SUPPRESS}),  # a fake /sys, /proc, /usr/local tree for tests
)
# The deep checks' own, shown as their own group.
DEEP_OPTIONS: tuple[Option, ...] = (
    ("--deep", {"action": "store_true", "help": f"also run the deep checks: {', '.join(DEEP_CHECKS)}"}),
    ("--level", {"default": "2", "help": "DCGM diagnostic run level, 1-4 (default 2; 3 for burn-in)"}),
    ("--dcgmi", {"metavar": "FILE", "help": "read saved `dcgmi diag -j` output instead of running dcgmi"}),
    ("--dcgm-host", {"metavar": "HOST", "help": "the nv-hostengine dcgmi talks to (default: its own)"}),
    ("--dcgm-timeout", {"type": float, "help": "seconds before dcgmi is stopped (default: per level)"}),
    ("--peers", {"default": "", "metavar": "HOST,...", "help": "known-good nodes to all-reduce with"}),
    ("--self", {"metavar": "HOST", "help": "how the peers reach this node (default: NODE_NAME, else the host name)"}),
    ("--peer-port", {"default": str(multinode.PORT), "help": f"rendezvous port (default {multinode.PORT})"}),
    (
        "--peer-timeout",
        {"type": float, "default": multinode.TIMEOUT_S, "help": "seconds to wait for the peers and the all-reduce"},
    ),
    (
        "--expect-rdma-nics",
        {"type": int, "default": rdma_links.EXPECTED_NICS, "help": "RDMA NICs the machine has (default 8)"},
    ),
    (
        "--min-rdma-gbps",
        {"type": float, "default": rdma_links.MIN_RATE_GBPS, "help": "slowest RDMA link allowed (default 400)"},
    ),
)


# How `preflight run` reports, after the checks.
REPORT_OPTIONS: tuple[Option, ...] = (
    ("--json", {"action": "store_true", "help": "print the versioned JSON report"}),
    (
        "--termination-log",
        {
            "metavar": "FILE",
            "help": "on failure, write the failing check as JSON here (a pod's terminationMessagePath), for Warden",
        },
    ),
    (
        "--metrics-port",
        {"type": int, "metavar": "PORT", "help": "serve the results as Prometheus metrics here while it runs"},
    ),
    (
        "--metrics-file",
        {"metavar": "FILE", "help": "write the results as Prometheus metrics here (a textfile collector's)"},
    ),
    (
        "--annotate",
        {
            "action": "store_true",
            "help": "on failure, annotate this Node (NODE_NAME) for Warden; needs a service account that may patch Nodes",
        },
    ),
)


def _environment_defaults() -> dict[str, Any]:
    """Defaults a pod sets through its environment, read when the parser is built (not at import)."""
    return {
        "--expect-gpus": int(os.environ.get("PREFLIGHT_EXPECTED_GPUS", "0")) or None,
        "--self": os.environ.get(names.NODE_NAME_ENV) or os.uname().nodename,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="preflight", description="Check the machines a job was given before it trains."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the checks")
    deep = run.add_argument_group("deep checks (burn-in, idle sweeps)")
    from_environment = _environment_defaults()
    for group, options in ((run, CHECK_OPTIONS), (deep, DEEP_OPTIONS), (run, REPORT_OPTIONS)):
        for flag, keywords in options:
            default = {"default": from_environment[flag]} if flag in from_environment else {}
            group.add_argument(flag, **keywords, **default)
    return parser


def _deep_problem(args: argparse.Namespace) -> str | None:
    """One line for bad input to the checks and the deep options (and parse them in place); None when fine."""
    unknown = [name for name in args.check or [] if name not in ALL_CHECKS]
    if unknown:
        return f"unknown check {unknown[0]!r}; use one of {', '.join(ALL_CHECKS)}"
    deep = args.deep or any(name in DEEP_CHECKS for name in args.check or [])
    given = [flag for flag, value in (("--peers", args.peers), ("--dcgmi", args.dcgmi)) if value]
    if args.level != "2":
        given.append("--level")
    if given and not deep:
        return f"{given[0]} is for the deep checks: add --deep (or --check {', --check '.join(DEEP_CHECKS)})"
    if args.level.strip() not in {str(n) for n in dcgm.LEVELS}:
        return f"--level {args.level[:20]!r}: DCGM run levels are 1, 2, 3 and 4 (2 for sweeps, 3 for burn-in)"
    args.level = int(args.level)
    if not args.peer_port.isdigit():
        return f"--peer-port {args.peer_port[:20]!r}: expected a TCP port number"
    args.peer_port = int(args.peer_port)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    try:
        if args.peers:
            multinode.plan(args.self, args.peers, args.peer_port)
    except ValueError as exc:
        return str(exc)
    for flag, value in (("--dcgm-timeout", args.dcgm_timeout), ("--peer-timeout", args.peer_timeout)):
        if value is not None and not 0 < value <= 86400:
            return f"{flag} {value:g}: expected seconds, more than 0 and at most 86400"
    if args.expect_rdma_nics < 0 or args.min_rdma_gbps < 0:
        return "--expect-rdma-nics and --min-rdma-gbps must not be negative"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    problem = _deep_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    selected = args.check or [*CHECKS, *(DEEP_CHECKS if args.deep else ())]
    live = PreflightMetrics()
    if args.metrics_port is not None:
        live.serve(args.metrics_port)
    results = []
    for name in selected:
        results.append(ALL_CHECKS[name](args))
        live.record(results[-1])
    try:
        live.finish(args.metrics_file)
    except OSError as exc:
        print(f"warning: could not write {args.metrics_file} ({exc}); the report below still stands", file=sys.stderr)
    node = os.environ.get(names.NODE_NAME_ENV, os.uname().nodename)
    stamp = datetime.now(UTC)
    now, at = stamp.isoformat(timespec="seconds"), stamp.timestamp()
    print(
        json.dumps(as_json(results, node, now), indent=2) if args.json else lines(results),
        end="" if not args.json else "\n",
    )
    message = termination_message(results, at)
    if args.termination_log and message:
        try:
            Path(args.termination_log).write_text(message, encoding="utf-8")
        except OSError as exc:
            print(
                f"warning: could not write {args.termination_log} ({exc}); the report above still stands",
                file=sys.stderr,
            )
    annotation = node_annotation(results, at)
    if args.annotate and annotation:
        cluster = incluster.discover()
        if cluster is None:
            print("warning: not in a cluster with a service account; the Node was not annotated", file=sys.stderr)
        else:
            try:
                annotate(cluster, node, annotation)
            except incluster.ApiError as exc:  # e.g. 403: this pod's service account may not patch Nodes
                print(
                    f"warning: could not annotate Node {node} ({exc}); the report above still stands", file=sys.stderr
                )
    return exit_code(results)


if __name__ == "__main__":
    raise SystemExit(main())
