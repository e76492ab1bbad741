"""GPU state from `nvidia-smi --query-gpu=... --format=csv` output.

The query preflight runs (QUERY) asks for identity, driver, uncorrectable ECC
errors, page retirement and row remapping state, and the active clock event
(throttle) reasons. Values such as `[N/A]` (retired pages on GPUs that remap
rows instead) count as "not reported", never as a failure.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

FIELDS = (
    "index",
    "pci.bus_id",
    "name",
    "driver_version",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks_event_reasons.active",
)
QUERY = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv"]

# Clock event reasons that mean the hardware is protecting itself (nvml's bit values).
BAD_CLOCK_REASONS = {
    0x0000000000000008: "hardware slowdown",
    0x0000000000000020: "software thermal slowdown",
    0x0000000000000040: "hardware thermal slowdown",
    0x0000000000000080: "hardware power brake",
}


@dataclass(frozen=True)
class Gpu:
    index: int
    pci: str
    name: str
    driver: str
    ecc_uncorrected: int | None
    retired_pending: bool | None
    remap_pending: bool | None
    remap_failed: bool | None
    clock_reasons: int | None

    def problems(self) -> list[str]:
        where = f"GPU {self.index} ({self.pci})"
        out = []
        if self.ecc_uncorrected:
            out.append(f"{where}: {self.ecc_uncorrected} uncorrectable ECC errors")
        if self.retired_pending:
            out.append(f"{where}: retired pages pending (needs a reset)")
        if self.remap_pending:
            out.append(f"{where}: row remapping pending (needs a reset)")
        if self.remap_failed:
            out.append(f"{where}: row remapping failed (replace the GPU)")
        for bit, reason in BAD_CLOCK_REASONS.items():
            if self.clock_reasons is not None and self.clock_reasons & bit:
                out.append(f"{where}: throttled: {reason}")
        return out


class ParseError(ValueError):
    pass


def _number(value: str) -> int | None:
    value = value.strip()
    if not value or value.startswith("[") or value.lower() in ("n/a", "not supported"):
        return None
    return int(value, 16) if value.lower().startswith("0x") else int(value)


def _flag(value: str) -> bool | None:
    value = value.strip().lower()
    if value in ("yes", "1", "true"):
        return True
    if value in ("no", "0", "false"):
        return False
    return None


BANNER = ["nvidia-smi"]  # the plain banner carries the CUDA version the driver supports
_CUDA = re.compile(r"CUDA Version:\s*(\d+\.\d+)")


def cuda_version(text: str) -> str | None:
    """The CUDA version from `nvidia-smi`'s banner (a saved file may hold it after the CSV)."""
    match = _CUDA.search(text)
    return match[1] if match else None


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def parse(text: str) -> list[Gpu]:
    """GPUs from CSV with or without its header line; a malformed row is an error, not a guess.

    Lines that are not CSV rows (an appended banner, with its box drawing) are left out.
    """
    csv_lines = [
        line for line in text.splitlines() if line.strip() and "," in line and not line.lstrip().startswith(("|", "+"))
    ]
    rows = [r for r in csv.reader(csv_lines) if r]
    if rows and rows[0][0].strip() == "index":
        header = [h.strip().split(" [")[0] for h in rows[0]]
        missing = [f for f in FIELDS if f not in header]
        if missing:
            raise ParseError(f"nvidia-smi output lacks {', '.join(missing)}; run {' '.join(QUERY)}")
        rows = [[row[header.index(f)] for f in FIELDS] for row in rows[1:] if len(row) == len(header)]
    gpus = []
    for row in rows:
        if len(row) != len(FIELDS):
            raise ParseError(f"nvidia-smi row has {len(row)} fields, expected {len(FIELDS)}: {','.join(row)[:80]}")
        index, pci, name, driver, ecc, retired, remap_pending, remap_failed, reasons = (v.strip() for v in row)
        try:
            gpus.append(
                Gpu(
                    int(index),
                    pci,
                    name,
                    driver,
                    _number(ecc),
                    _flag(retired),
                    _flag(remap_pending),
                    _flag(remap_failed),
                    _number(reasons),
                )
            )
        except ValueError as exc:
            raise ParseError(f"nvidia-smi row for GPU {index!r} is malformed ({exc})") from None
    return gpus
