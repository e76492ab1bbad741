"""Benchmark: how fast gkr answers, and its CPU beside xpk's on the same job.

Wall clock (target: a dry-run median of at most 250 ms on an idle machine): `gkr --help` and
`gkr submit -f <example> --dry-run` as a researcher runs them (a fresh process each time, from
the checkout, so gkr finds generated/registry.json upward), medians over --runs runs. Without a
generated/ folder (before `make generate`), the registry is built into a temporary folder from
fleet.yaml and passed with --registry.

CPU beside xpk (target: gkr at most a sixth of xpk): one H200 x 2 nodes job, gkr's
`submit --dry-run` (from a job file, and from flags) and xpk 1.16's `workload create --dry-run`
of the same job (device h200-141gb-8, 2 nodes, and the project, cluster, zone and image gkr
resolves it to), --runs rounds, the order alternating, each run a fresh process in the same
empty folder with the same environment. CPU is user + system time of the process and its
children (getrusage RUSAGE_CHILDREN). xpk runs from its own virtualenv, .cache/bench/xpk/, built
once from requirements/xpk.lock (pinned, hash-checked: PyPI must be reachable that once). xpk's
dry run prints the gcloud and kubectl commands it would run; stubs of gcloud, kubectl, crane and
docker, in the benchmark's folder only and first on PATH, record any call, and the benchmark
stops if one is made.

    .venv/bin/python scripts/bench_gkr.py [--runs 15] [--no-xpk]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GKR = Path(sys.executable).parent / "gkr"
TARGET_MS = 250.0
TARGET_RATIO = 1 / 6  # gkr's CPU against xpk's (issue 40)
XPK_LOCK = REPO / "requirements" / "xpk.lock"
XPK_ENV = REPO / ".cache" / "bench" / "xpk"
STUBBED = ("gcloud", "kubectl", "crane", "docker")
# The job: gkr's keys, and what xpk calls the machine (its device type for A3 Ultra).
JOB: dict[str, Any] = {
    "name": "bench-h200",
    "team": "research",
    "pods": 2,
    "gpus_per_pod": 8,
    "command": "python train.py",
}
XPK_DEVICE = "h200-141gb-8"


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=REPO, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


def cpu_seconds(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """User + system CPU of one run of `command` and its children; a failed run stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"error: {Path(command[0]).name} exited {done.returncode}: {tail[0]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def registry_folder(scratch: Path) -> Path:
    """The checkout's generated registry folder, or one built here from fleet.yaml."""
    from contract import registry as contract

    generated = REPO / contract.GENERATED_DIR
    if (generated / contract.FILE).is_file():
        return generated
    from fleet.gitops.schemas import crd_schemas
    from fleet.load import load
    from fleet.registry import registry_of

    loaded = load(REPO / "fleet.yaml")
    (scratch / contract.SCHEMAS_DIR).mkdir(parents=True)
    (scratch / contract.FILE).write_text(contract.dumps(registry_of(loaded)), encoding="utf-8")
    for path, text in crd_schemas(loaded.fleet, REPO).items():
        (scratch / contract.SCHEMAS_DIR / Path(path).name).write_text(text, encoding="utf-8")
    return scratch


def wall_clock(runs: int, registry: list[str]) -> None:
    cases = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "gkr --help": [str(GKR), "--help"],
        "gkr submit --dry-run (128-node RayJob)": [
            str(GKR), "submit", *registry, "-f", "platform/gkr/examples/pretrain-128-nodes.yaml", "--dry-run",
        ],
    }  # fmt: skip
    medians = {}
    for name, command in cases.items():
        timed(command)  # warm the file cache
        times = [timed(command) for _ in range(runs)]
        medians[name] = statistics.median(times)
        print(f"{name:42} median {medians[name]:6.0f} ms  (min {min(times):.0f}, max {max(times):.0f}, {runs} runs)")
    dry_run = medians["gkr submit --dry-run (128-node RayJob)"]
    print(
        f"dry-run: {dry_run:.0f} ms = {dry_run / TARGET_MS:.2f} x the {TARGET_MS:.0f} ms target: {'met' if dry_run <= TARGET_MS else 'NOT met'}"
    )


def xpk_bin() -> Path:
    """xpk's own virtualenv, (re)built from its lock when it is missing or the lock changed."""
    stamp = XPK_ENV / "lock.sha256"
    digest = hashlib.sha256(XPK_LOCK.read_bytes()).hexdigest()
    if not (stamp.is_file() and stamp.read_text(encoding="utf-8") == digest):
        shutil.rmtree(XPK_ENV, ignore_errors=True)
        print(f"building xpk's virtualenv in {XPK_ENV.relative_to(REPO)} from {XPK_LOCK.relative_to(REPO)}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(XPK_ENV)], check=True)
        pip = [str(XPK_ENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        done = subprocess.run(
            [*pip, "--require-hashes", "--no-deps", "-r", str(XPK_LOCK)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise SystemExit(f"error: cannot build xpk's virtualenv in {XPK_ENV} (PyPI must be reachable once): {why}")
        stamp.write_text(digest, encoding="utf-8")
    return XPK_ENV / "bin"


def stub_tools(folder: Path) -> Path:
    """gcloud, kubectl, crane and docker that record their call in calls.log and fail: a dry run calls none."""
    folder.mkdir()
    for tool in STUBBED:
        stub = folder / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{folder / "calls.log"}"\nexit 1\n', encoding="utf-8")
        stub.chmod(0o755)
    return folder


def commands(registry: Path, work: Path, xpk: Path | None) -> dict[str, list[str]]:
    """The H200 x 2 job as gkr takes it (a file, flags) and as xpk does, where gkr resolves it."""
    from gkr.registry import load
    from gkr.resolve import resolve
    from gkr.spec import parse_job

    found = load(registry)
    spec, problems = parse_job(JOB)
    resolved, problems = resolve(spec, found.registry) if spec is not None else (None, problems)
    if resolved is None or problems:
        raise SystemExit(f"error: the benchmark's job does not resolve in {registry}: {problems[0].line()}")
    machine = resolved.pool.machine
    if (machine.gpu_model, machine.gpus) != ("H200", 8):  # what XPK_DEVICE names
        raise SystemExit(f"error: the benchmark's job lands on {machine.name}, not an 8 x H200 machine")
    (work / "job.yaml").write_text("".join(f"{k}: {v}\n" for k, v in JOB.items()), encoding="utf-8")
    gkr = [str(GKR), "submit", "--registry", str(registry), "--dry-run"]
    flags = ["--name", JOB["name"], "--team", JOB["team"], "--pods", "2", "--gpus-per-pod", "8"]
    out = {"gkr submit -f job.yaml --dry-run": [*gkr, "-f", "job.yaml"]}
    out["gkr submit (flags) --dry-run"] = [*gkr, *flags, "--", *JOB["command"].split()]
    if xpk is not None:
        out["xpk workload create --dry-run"] = [
            str(xpk / "xpk"), "workload", "create", "--workload", JOB["name"], "--device-type", XPK_DEVICE,
            "--num-nodes", "2", "--command", JOB["command"], "--docker-image", resolved.image,
            "--project", found.registry.project, "--cluster", resolved.region.cluster, "--zone", resolved.pool.zone,
            "--dry-run",
        ]  # fmt: skip
    return out


def paired(cases: dict[str, list[str]], rounds: int, run: Callable[[list[str]], float]) -> dict[str, list[float]]:
    """Every case once per round, the order reversed every other round; one warm-up round first (file cache, .pyc)."""
    for command in cases.values():
        run(command)
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for index in range(rounds):
        order = list(cases) if index % 2 == 0 else list(reversed(cases))
        for name in order:
            seconds[name].append(run(cases[name]))
    return seconds


def against_xpk(rounds: int, registry: Path, with_xpk: bool) -> None:
    xpk = xpk_bin() if with_xpk else None
    with tempfile.TemporaryDirectory(prefix="bench-gkr-cpu-") as scratch:
        work, home = Path(scratch) / "work", Path(scratch) / "home"
        work.mkdir()
        home.mkdir()
        stubs = stub_tools(Path(scratch) / "stubs")
        path = ":".join(str(p) for p in (stubs, *([xpk] if xpk else []), "/usr/bin", "/bin"))
        env = {"HOME": str(home), "PATH": path, "TMPDIR": scratch, "LANG": "C.UTF-8"}
        env |= {"XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache")}
        cases = commands(registry, work, xpk)
        seconds = paired(cases, rounds, lambda command: cpu_seconds(command, work, env))
        if (stubs / "calls.log").exists():
            raise SystemExit(f"error: a dry run called {(stubs / 'calls.log').read_text().splitlines()[0]!r}")
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    pinned = re.search(r"^xpk==(\S+)", XPK_LOCK.read_text(encoding="utf-8"), re.M)
    against = f" beside xpk {pinned.group(1) if pinned else '?'}" if with_xpk else ""
    print(
        f"CPU of one dry run, {JOB['pods']} x {JOB['gpus_per_pod']} H200{against}, {rounds} rounds, order alternating:"
    )
    for name, values in seconds.items():
        print(f"  {name:36} median {medians[name]:.3f} s  (min {min(values):.3f}, max {max(values):.3f})")
    xpk_median = medians.get("xpk workload create --dry-run")
    if xpk_median is None:
        return
    for name in (n for n in medians if n.startswith("gkr")):
        ratio = medians[name] / xpk_median
        verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
        print(
            f"{name}: {ratio:.3f} of xpk's CPU ({1 / ratio:.1f}x less); target at most 1/6 = {TARGET_RATIO:.3f}: {verdict}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="runs per case (wall clock), rounds (CPU beside xpk)")
    parser.add_argument("--no-xpk", action="store_true", help="gkr alone: no xpk virtualenv, no ratio")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gkr-") as scratch:
        registry = registry_folder(Path(scratch))
        wall_clock(args.runs, [] if registry.parent == REPO else ["--registry", str(registry)])
        against_xpk(args.runs, registry, not args.no_xpk)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
