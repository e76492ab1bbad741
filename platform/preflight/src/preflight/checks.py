"""The checks that judge saved or live outputs. Each returns one Result."""

from __future__ import annotations

from contract import kernel_log
from preflight import nvidia_smi
from preflight.report import Result


def check_kernel_log(text: str, window_s: float, uptime: float | None = None, now: float | None = None) -> Result:
    found = kernel_log.scan(kernel_log.lines(text))
    events = kernel_log.recent(found.events, window_s, now=now, uptime=uptime, newest_line=found.newest_boot)
    fatal = [e for e in events if e.severity == kernel_log.FATAL]
    warn = [e for e in events if e.severity == kernel_log.WARN]
    evidence = [f"{e.line} [{e.problem}]" if e.problem else e.line for e in fatal + warn]
    if fatal:
        kinds = sorted({f"{e.kind}{' ' + str(e.code) if e.code is not None else ''}" for e in fatal})
        return Result(
            "kernel-log",
            "fail",
            f"{len(fatal)} hardware error(s) in the last {window_s:.0f} s: {', '.join(kinds)}",
            evidence,
        )
    if warn:
        return Result(
            "kernel-log",
            "pass",
            f"{len(warn)} application-level GPU error(s) in the last {window_s:.0f} s, no hardware fault",
            evidence,
        )
    return Result("kernel-log", "pass", f"no GPU or host hardware errors in the last {window_s:.0f} s")


def check_gpu_state(text: str, expected_gpus: int | None, min_driver: str | None = None) -> Result:
    try:
        gpus = nvidia_smi.parse(text)
    except nvidia_smi.ParseError as exc:
        return Result("gpu-state", "error", str(exc))
    problems = [p for gpu in gpus for p in gpu.problems()]
    # The report names the failing GPU when the first problem is one GPU's (not a count or a driver mismatch).
    first_gpu = next((gpu.index for gpu in gpus if gpu.problems()), None)
    if expected_gpus is not None and len(gpus) != expected_gpus:
        problems.insert(0, f"{len(gpus)} GPUs visible, the pool's machine has {expected_gpus}")
        first_gpu = None
    drivers = sorted({g.driver for g in gpus})
    if len(drivers) > 1:
        problems.append(f"GPUs report different drivers: {', '.join(drivers)}")
    if min_driver and drivers and nvidia_smi.version_tuple(drivers[0]) < nvidia_smi.version_tuple(min_driver):
        problems.append(f"driver {drivers[0]} is older than {min_driver}")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return Result("gpu-state", "fail", problems[0] + more, problems, first_gpu)
    cuda = nvidia_smi.cuda_version(text) or "unknown"
    return Result(
        "gpu-state", "pass", f"{len(gpus)} GPUs healthy, driver {', '.join(drivers) or 'unknown'}, CUDA {cuda}"
    )
