"""A real run's metrics, scraped over HTTP while it trains, match the catalog; W&B offline gets the same values."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract import metrics
from telemetry.exposition import check
from tests.trainer.conftest import CONFIG, TRAIN, overrides, start
from tests.waiting import until

pytestmark = pytest.mark.live  # the driver, scraped while it trains

RUN_LABELS = set(metrics.RUN_LABELS)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text: str = response.read().decode()
        return text


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert found, f"{name} {labels} not exposed"
    return sum(found)


def _scrape_while_running(tmp_path: Path, name: str, groups: int) -> dict[int, str]:
    """Each group's exposition, once it shows a committed step and some productive time; the run still going."""
    # Steps enough that it is still training when scraped; its own session, so the groups are stopped with it.
    extra = (f"ft.replica_groups={groups}", "run.steps=2000", "run.metrics_port=0")
    command = [sys.executable, str(TRAIN), str(CONFIG), *overrides(tmp_path, name, *extra)]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    scraped: dict[int, str] = {}

    def every_group_scraped() -> bool:
        for group in set(range(groups)) - set(scraped):
            port_file = tmp_path / "runs" / name / f"metrics-{group}.port"
            if not port_file.is_file():
                continue
            text = _scrape(int(port_file.read_text()))
            if any(n == "meridian_trainer_loss" for n, _ in _samples(text)):  # a window closed: all values are in
                scraped[group] = text
        return len(scraped) == groups

    try:
        until(every_group_scraped, 240, "every group exposed a committed step", proc, every_s=0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    return scraped


def test_a_running_groups_metrics_are_scraped_and_match_the_catalog(tmp_path: Path) -> None:
    scraped = _scrape_while_running(tmp_path, "scrape", groups=2)
    for group, text in scraped.items():
        # Every family the trainer declares (the MFU gauge stays absent on CPU: no peak to divide by).
        assert check(metrics.TRAINER, text) == []
        samples = _samples(text)
        assert not [n for n, _ in samples if n == "meridian_trainer_mfu_ratio"]  # declared, no value on CPU
        labels = {"run": "scrape", "region": "local", "group": str(group)}
        for (sample_name, sample_labels), _ in samples.items():
            assert {k for k, _ in sample_labels} >= RUN_LABELS, sample_name
        assert _value(samples, "meridian_trainer_step", **labels) > 0
        assert _value(samples, "meridian_trainer_participants", **labels) >= 1
        assert _value(samples, "meridian_trainer_tokens_per_second", **labels) > 0
        assert _value(samples, "meridian_trainer_loss", **labels) > 0
        assert _value(samples, "meridian_trainer_last_commit_timestamp_seconds", **labels) > time.time() - 3600
        assert _value(samples, "meridian_trainer_goodput_seconds_total", **labels, category="productive") > 0
        assert _value(samples, "meridian_trainer_goodput_seconds_total", **labels, category="startup") > 0
        # Present from the start; a group that joins after the first step heals once, so not always 0.
        assert _value(samples, "meridian_trainer_heals_total", **labels) >= 0


def _wandb_history(path: Path) -> list[dict[str, object]]:
    """The history rows of an offline run's .wandb file: wandb's protobuf records in its LevelDB-style log.

    wandb 0.31 ships no Python reader (its core is Go): 32 KiB blocks of chunks, each with a 7-byte header
    (CRC, length, type: 1 full, 2 first, 3 middle, 4 last) after the file's 7-byte ":W&B" header.
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    rows, pos, chunk = [], 7, b""
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = chunk + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(chunk)
            chunk = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


def test_wandb_offline_logs_each_window_of_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The launcher passes its environment on to the groups; offline: nothing leaves the machine.
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(key, value)
    extra = ("ft.replica_groups=1", "run.steps=20", "run.metrics_port=-1", "logging.wandb=true")
    proc = start(tmp_path, "wandb", *extra)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    files = list(tmp_path.glob("wandb/offline-run-*-wandb-group-0/run-wandb-group-0.wandb"))
    assert len(files) == 1
    rows = _wandb_history(files[0])
    assert [row["step"] for row in rows] == [10, 20]  # one row per logging window (run.log_every=10)
    last = rows[-1]
    assert last["_step"] == 20
    assert last["loss"] > 0  # type: ignore[operator]
    assert last["tokens_per_second"] > 0  # type: ignore[operator]
    assert last["goodput_seconds/productive"] > 0  # type: ignore[operator]
    assert last["participants"] == 1
    assert last["heals"] == 0
