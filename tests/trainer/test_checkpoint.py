"""Staged vs durable DCP checkpoints: round trips, event order, one in flight, crashes, retention, GCS, failures."""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec  # type: ignore[import-untyped]
import gcsfs.core  # type: ignore[import-untyped]
import pytest
import torch
from fsspec.implementations.local import LocalFileSystem  # type: ignore[import-untyped]
from fsspec.registry import _registry as fsspec_registry  # type: ignore[import-untyped]
from gcp_storage_emulator.server import create_server  # type: ignore[import-untyped]
from trainer.checkpoint import (
    MARKER,
    Checkpointer,
    CheckpointError,
    CheckpointEvent,
    InvalidCheckpoint,
    nonfinite_tensors,
    parse_marker,
    step_dir,
)

from tests.ports import free_port
from tests.trainer.conftest import assert_same

# Every single-process save says so once; that is the intended mode here.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@dataclass(frozen=True)
class RunInfo:
    """An arbitrary Python object in the state: DCP pickles it."""

    name: str
    tags: frozenset[str]


def trained(seed: int) -> tuple[torch.nn.Sequential, torch.optim.Optimizer]:
    """A small model and an AdamW that has taken one step (so its state exists)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(5, 8)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def committed(root: Path) -> list[int]:
    return sorted(int(p.parent.name.removeprefix("step-")) for p in root.glob(f"step-*/{MARKER}"))


def step_dirs(root: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("step-")) for p in root.glob("step-*"))


def on_local_write(monkeypatch: pytest.MonkeyPatch, hook: Callable[[str], None]) -> None:
    """Run `hook(path)` before the local filesystem opens a DCP data file for writing."""
    original = LocalFileSystem._open

    def _open(fs: Any, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode and path.endswith(".distcp"):
            hook(path)
        return original(fs, path, mode, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "_open", _open)


class Gate:
    """Holds the first data-file write until released: an upload that is slow for as long as a test wants."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._calls = itertools.count()

    def __call__(self, path: str) -> None:
        if next(self._calls) == 0:
            self.entered.set()
            assert self.release.wait(30), "gate never released"


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    on_local_write(monkeypatch, g)
    yield g
    g.release.set()  # never leave an upload thread stuck if the test failed early


def test_round_trip_restores_model_optimizer_counters_and_rng(tmp_path: Path) -> None:
    model, optimizer = trained(seed=0)
    state: dict[str, Any] = {
        "model": model.state_dict(),
        "optim": optimizer.state_dict(),
        "manager": {"step": 7, "batches_committed": 42, "user": {"replica": 3}},
        "data": {"next_batch": 1234, "epoch": 2},
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
    }
    draws = (torch.rand(3), random.random())  # what the saved RNG state produces next
    with Checkpointer(str(tmp_path)) as checkpoints:
        checkpoints.save(100, state)
        checkpoints.wait()
        assert checkpoints.latest() == 100

    fresh_model, fresh_optimizer = trained(seed=1)
    assert not torch.equal(fresh_model.state_dict()["0.weight"], model.state_dict()["0.weight"])
    target: dict[str, Any] = {
        "model": fresh_model.state_dict(),
        "optim": fresh_optimizer.state_dict(),
        "manager": {"step": 0, "batches_committed": 0, "user": {"replica": 0}},
        "data": {"next_batch": 0, "epoch": 0},
        "rng": {"torch": torch.zeros_like(torch.get_rng_state()), "python": None},
    }
    with Checkpointer(str(tmp_path)) as checkpoints:  # a new process would start like this
        assert checkpoints.latest() == 100
        checkpoints.load(100, target)
    fresh_model.load_state_dict(target["model"])
    fresh_optimizer.load_state_dict(target["optim"])

    assert_same(fresh_model.state_dict(), model.state_dict(), "model")
    assert_same(fresh_optimizer.state_dict(), optimizer.state_dict(), "optim")
    assert_same(target["manager"], state["manager"], "manager")
    assert_same(target["data"], state["data"], "data")
    assert_same(target["rng"], state["rng"], "rng")
    torch.set_rng_state(target["rng"]["torch"])
    random.setstate(target["rng"]["python"])
    assert_same((torch.rand(3), random.random()), draws, "draws after restoring RNG")


def test_a_checkpoint_holding_an_arbitrary_object_does_not_verify(tmp_path: Path) -> None:
    """DCP pickles any object in the state; loading one would unpickle it, so such a step is never trusted
    (issue 27: tensors and plain values only; tests/trainer/test_dcp_pickle.py has the attacks)."""
    with Checkpointer(str(tmp_path)) as checkpoints:
        checkpoints.save(100, {"w": torch.ones(2), "run": RunInfo("alpha", frozenset({"a", "b"}))})
    with Checkpointer(str(tmp_path)) as checkpoints:  # as a new process: the writer trusts its own steps
        assert checkpoints.verify(100) == (
            "run is not a plain value or tensor (Unsupported global: GLOBAL "
            "tests.trainer.test_checkpoint.RunInfo was not an allowed global by default)"
        )
        assert checkpoints.latest() is None


def test_staged_and_durable_are_separate_and_the_snapshot_ignores_later_mutation(tmp_path: Path, gate: Gate) -> None:
    events: list[CheckpointEvent] = []
    weights = torch.arange(4096, dtype=torch.float32)
    state: dict[str, Any] = {"w": weights, "meta": {"lrs": [0.1, 0.2]}}
    checkpoints = Checkpointer(str(tmp_path), on_event=events.append)

    checkpoints.save(3, state)
    assert gate.entered.wait(10)  # the upload runs, held before writing any data
    weights.mul_(-1)  # training resumes and changes everything in place
    state["meta"]["lrs"].append(9.9)
    assert [(e.kind, e.step) for e in events] == [("staged", 3)]
    assert checkpoints.latest() is None
    assert not (tmp_path / step_dir(3) / MARKER).exists()

    gate.release.set()
    checkpoints.wait()
    assert [(e.kind, e.step) for e in events] == [("staged", 3), ("durable", 3)]
    assert 0 <= events[0].seconds <= events[1].seconds
    assert checkpoints.latest() == 3

    loaded: dict[str, Any] = {"w": torch.zeros(4096), "meta": {"lrs": None}}
    checkpoints.load(3, loaded)
    assert torch.equal(loaded["w"], torch.arange(4096, dtype=torch.float32))
    assert loaded["meta"]["lrs"] == [0.1, 0.2]
    checkpoints.close()


def test_durable_is_never_reported_or_committed_before_staged(tmp_path: Path) -> None:
    seen: list[tuple[str, bool]] = []

    def slow_listener(event: CheckpointEvent) -> None:
        if event.kind == "staged":
            time.sleep(0.3)  # the tiny upload finishes meanwhile
        seen.append((event.kind, (tmp_path / step_dir(event.step) / MARKER).exists()))

    with Checkpointer(str(tmp_path), on_event=slow_listener) as checkpoints:
        checkpoints.save(1, {"w": torch.ones(4)})
    assert seen == [("staged", False), ("durable", True)]


def test_second_save_waits_for_the_first_upload(tmp_path: Path, gate: Gate) -> None:
    checkpoints = Checkpointer(str(tmp_path))
    checkpoints.save(1, {"w": torch.ones(16)})
    assert gate.entered.wait(10)

    blocked: list[float] = []
    second = threading.Thread(target=lambda: blocked.append(checkpoints.save(2, {"w": torch.full((16,), 2.0)})))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "a second checkpoint started while the first was still being written"
    assert checkpoints.latest() is None  # the in-flight step is not reported before its marker exists
    assert not (tmp_path / step_dir(2)).exists()

    gate.release.set()
    second.join(10)
    assert not second.is_alive()
    assert blocked[0] >= 0.5  # the wait for the first upload counts as blocked time
    checkpoints.wait()
    assert committed(tmp_path) == [1, 2]
    assert checkpoints.latest() == 2
    checkpoints.close()


def test_retention_keeps_the_newest_committed_steps(tmp_path: Path) -> None:
    seen = []
    with Checkpointer(str(tmp_path), keep=2) as checkpoints:
        for step in range(1, 6):
            checkpoints.save(step * 10, {"w": torch.full((8,), float(step))})
            checkpoints.wait()
            seen.append(step_dirs(tmp_path))
        assert checkpoints.latest() == 50
    assert seen == [[10], [10, 20], [20, 30], [30, 40], [40, 50]]
    assert committed(tmp_path) == [40, 50]


def test_failed_upload_surfaces_and_never_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(path: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    on_local_write(monkeypatch, disk_full)
    events: list[CheckpointEvent] = []
    checkpoints = Checkpointer(str(tmp_path), on_event=events.append)

    checkpoints.save(1, {"w": torch.ones(8)})  # staging works; the write fails in the background
    with pytest.raises(CheckpointError, match="No space left on device"):
        checkpoints.wait()
    checkpoints.wait()  # reported once
    assert [e.kind for e in events] == ["staged"]
    assert committed(tmp_path) == []
    assert checkpoints.latest() is None

    checkpoints.save(2, {"w": torch.ones(8)})
    with pytest.raises(CheckpointError, match="No space left on device"):
        checkpoints.save(3, {"w": torch.ones(8)})  # the next save re-raises what failed in flight
    assert not (tmp_path / step_dir(3)).exists()

    monkeypatch.undo()  # the disk has room again
    checkpoints.save(4, {"w": torch.full((8,), 4.0)})
    checkpoints.wait()
    assert committed(tmp_path) == [4]
    checkpoints.close()


def test_state_that_cannot_be_staged_fails_the_save_itself(tmp_path: Path) -> None:
    with Checkpointer(str(tmp_path)) as checkpoints:
        with pytest.raises(TypeError, match="pickle"):
            checkpoints.save(1, {"w": torch.ones(4), "lock": threading.Lock()})
        checkpoints.wait()  # nothing left in flight, no second report
        checkpoints.save(2, {"w": torch.ones(4)})
    assert committed(tmp_path) == [2]


class EmulatorGCS(gcsfs.core.GCSFileSystem):  # type: ignore[misc]
    """gcsfs against gcp-storage-emulator, which lacks the moveTo API.

    gcsfs retries moveTo for ~30 s before falling back to copy + delete; DCP renames `.metadata.tmp`
    once per checkpoint. Registering the core class also skips the experimental ExtendedGcsFileSystem,
    whose gRPC bucket-type probe the emulator cannot answer either.
    """

    async def _mv_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        await self._cp_file(path1, path2)
        await self._rm_file(path1)


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A local, in-memory GCS JSON API with a bucket `ckpt`; yields the fsspec storage options."""
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        monkeypatch.setitem(fsspec_registry, "gs", EmulatorGCS)
        options = {"endpoint_url": f"http://127.0.0.1:{port}", "token": "anon"}
        fsspec.filesystem("gs", **options).mkdir("ckpt")
        yield options
    finally:
        EmulatorGCS.clear_instance_cache()
        server.stop()


def test_durable_checkpoints_through_gcs(gcs: dict[str, Any]) -> None:
    events: list[CheckpointEvent] = []
    checkpoints = Checkpointer("gs://ckpt/run", keep=2, storage_options=gcs, on_event=events.append)
    assert checkpoints.latest() is None
    weights = torch.randn(256, 256)
    for step in (10, 20, 30):
        weights.fill_(float(step))
        checkpoints.save(step, {"w": weights, "data": {"next_batch": step * 4}})
        weights.fill_(-1.0)  # after staging: must not reach the bucket
    checkpoints.wait()
    checkpoints.close()
    assert [(e.kind, e.step) for e in events] == [(k, s) for s in (10, 20, 30) for k in ("staged", "durable")]

    fs = fsspec.filesystem("gs", **gcs)
    fs.invalidate_cache()
    markers = sorted(fs.glob(f"ckpt/run/step-*/{MARKER}"))
    assert markers == [f"ckpt/run/{step_dir(s)}/{MARKER}" for s in (20, 30)]
    record = json.loads(fs.cat(markers[-1]))
    assert record["step"] == 30
    assert record["bytes"] > weights.numel() * 4

    restarted = Checkpointer("gs://ckpt/run", storage_options=gcs)
    assert restarted.latest() == 30
    loaded: dict[str, Any] = {"w": torch.zeros(256, 256), "data": {"next_batch": 0}}
    restarted.load(30, loaded)
    assert torch.equal(loaded["w"], torch.full((256, 256), 30.0))
    assert loaded["data"] == {"next_batch": 120}
    restarted.close()


# -- checkpoints you can trust: checksums, hostile markers, retention, non-finite state -------------


def ones(value: float) -> dict[str, Any]:
    return {"w": torch.full((1024,), value), "data": {"next_batch": int(value)}}


def flip_a_float(path: Path, value: float) -> None:
    """Flip one bit of one stored float equal to `value`: the file still loads, with one wrong number."""
    data = bytearray(path.read_bytes())
    at = data.find(struct.pack("<f", value) * 4)
    assert at >= 0, "the tensor's bytes are not where expected"
    data[at + 2] ^= 0x01
    path.write_bytes(bytes(data))


def saved(root: Path, *steps: int, keep: int = 3) -> None:
    with Checkpointer(str(root), keep=keep) as checkpoints:
        for step in steps:
            checkpoints.save(step, ones(float(step)))


def test_the_marker_lists_every_file_with_its_size_and_sha256(tmp_path: Path) -> None:
    saved(tmp_path, 1)
    folder = tmp_path / step_dir(1)
    record = json.loads((folder / MARKER).read_text())
    assert record["schema"] == 1
    assert record["step"] == 1
    on_disk = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != MARKER}
    assert set(record["files"]) == set(on_disk) == {".metadata", "__0_0.distcp"}
    for name, data in on_disk.items():
        assert record["files"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert record["bytes"] == sum(len(d) for d in on_disk.values())


def test_a_flipped_float_in_a_committed_shard_is_skipped_for_the_newest_that_verifies(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    flip_a_float(tmp_path / step_dir(20) / "__0_0.distcp", 20.0)
    skipped: list[tuple[int, str]] = []
    checkpoints = Checkpointer(str(tmp_path))
    assert checkpoints.latest(on_skip=lambda step, why: skipped.append((step, why))) == 10
    assert skipped == [(20, "__0_0.distcp does not match its sha256 (flipped or rewritten bytes)")]
    with pytest.raises(CheckpointError, match=r"step 20 .* does not verify: __0_0\.distcp does not match"):
        checkpoints.load(20, ones(0.0))
    loaded = ones(0.0)
    checkpoints.load(10, loaded)
    assert torch.equal(loaded["w"], torch.full((1024,), 10.0))
    checkpoints.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("delete", "__0_0.distcp is missing"),
        ("extra", "'__9_9.distcp' is not listed in the marker"),
        ("truncate", "__0_0.distcp has 100 bytes, the marker says"),
        ("subdir", "'sub/x' is not listed in the marker"),
        ("marker-dir", "could not be read: IsADirectoryError"),
    ],
)
def test_missing_unlisted_or_resized_files_fail_verification(tmp_path: Path, damage: str, reason: str) -> None:
    saved(tmp_path, 10, 20)
    folder = tmp_path / step_dir(20)
    shard = folder / "__0_0.distcp"
    if damage == "delete":
        shard.unlink()
    elif damage == "extra":
        (folder / "__9_9.distcp").write_bytes(b"x")
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:100])
    elif damage == "subdir":
        (folder / "sub").mkdir()
        (folder / "sub" / "x").write_bytes(b"x")
    else:
        (folder / MARKER).unlink()
        (folder / MARKER).mkdir()
    with Checkpointer(str(tmp_path)) as checkpoints:
        why = checkpoints.verify(20)
        assert why is not None
        assert why.startswith(reason), why
        assert checkpoints.latest() == 10


def good_marker(step: int = 7) -> dict[str, Any]:
    digest = "0" * 64
    files = {".metadata": {"size": 10, "sha256": digest}, "__0_0.distcp": {"size": 20, "sha256": digest}}
    return {"schema": 1, "step": step, "time": 1.7e9, "bytes": 30, "files": files}


def forged(**changes: Any) -> bytes:
    record = good_marker()
    for key, value in changes.items():
        if key.startswith("file_"):
            record["files"]["__0_0.distcp"][key.removeprefix("file_")] = value
        else:
            record[key] = value
    return json.dumps(record).encode()


def renamed(name: str) -> bytes:
    record = good_marker()
    record["files"][name] = record["files"].pop("__0_0.distcp")
    return json.dumps(record).encode()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "marker is not JSON"),
        (b"\xff\xfe{", "marker is not JSON"),
        (b"[1, 2]", "marker is not a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "marker is not JSON"),  # deep nesting
        (b" " * (5 << 20), "marker is 5242880 bytes"),
        (json.dumps({"step": 7, "time": 1.0, "bytes": 30}).encode(), "marker schema is None"),  # before checksums
        (forged(schema=True), "marker schema is True"),
        (forged(schema="1"), "marker schema is '1'"),
        (forged(step=8), "marker step 8 is not the directory's step 7"),
        (forged(step="7"), "marker step '7'"),
        (forged(step=7.0), "marker step 7.0"),
        (forged(step=10**400), "marker step 1000"),
        (b'{"schema": 1, "step": 1' + b"0" * 5000 + b"}", "marker is not JSON"),  # over Python's int digits limit
        (forged(time="now"), "marker time 'now'"),
        (forged(time=-1), "marker time -1"),
        (forged(time=1e308).replace(b"1e+308", b"1e999"), "marker time inf"),
        (forged(time=0).replace(b'"time": 0', b'"time": NaN'), "marker is not JSON: NaN is not a JSON number"),
        (forged(files={}), "marker lists no files"),
        (forged(files=["__0_0.distcp"]), "marker lists no files"),
        (renamed("../x"), "marker lists the file name '../x'"),
        (renamed("/etc/passwd"), "marker lists the file name '/etc/passwd'"),
        (renamed("sub/x"), "marker lists the file name 'sub/x'"),
        (renamed(".."), "marker lists the file name '..'"),
        (renamed(MARKER), "marker lists the file name 'COMMITTED'"),
        (renamed("a\x00b"), "marker lists the file name 'a\\x00b'"),
        (renamed("x" * 300), "marker lists the file name 'xxx"),
        (forged(file_size=-1), "marker entry of __0_0.distcp has a bad size"),
        (forged(file_size=True), "marker entry of __0_0.distcp has a bad size"),
        (forged(file_size=2**64), "marker entry of __0_0.distcp has a bad size"),
        (forged(file_size="20"), "marker entry of __0_0.distcp has a bad size"),
        (forged(file_sha256="ab"), "marker entry of __0_0.distcp has a bad size or sha256"),
        (forged(file_sha256="Z" * 64), "marker entry of __0_0.distcp has a bad size or sha256"),
        (forged(file_extra=1), "marker entry of __0_0.distcp is not {size, sha256}"),
        (forged(bytes=31), "marker bytes 31 is not the sum"),
        (forged(bytes=None), "marker bytes None"),
        (forged().replace(b'"step": 7', b'"step": 7, "step": 7'), "marker is not JSON: duplicate key"),
    ],
)
def test_hostile_marker_json_is_invalid(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidCheckpoint) as error:
        parse_marker(raw, 7)
    assert str(error.value).startswith(reason), str(error.value)
    assert "\n" not in str(error.value)
    assert len(str(error.value)) < 300


def test_a_well_formed_marker_parses() -> None:
    digests = parse_marker(json.dumps(good_marker()).encode(), 7)
    assert {name: d.size for name, d in digests.items()} == {".metadata": 10, "__0_0.distcp": 20}


def test_a_marker_pointing_outside_its_directory_is_skipped_without_reading_there(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    marker = tmp_path / step_dir(20) / MARKER
    record = json.loads(marker.read_text())
    record["files"]["../step-000000010/__0_0.distcp"] = record["files"].pop("__0_0.distcp")
    marker.write_text(json.dumps(record))
    skipped: list[int] = []
    with Checkpointer(str(tmp_path)) as checkpoints:
        assert checkpoints.latest(on_skip=lambda step, why: skipped.append(step)) == 10
        assert "'../step-000000010/__0_0.distcp'" in (checkpoints.verify(20) or "")
    assert skipped == [20]


def test_retention_keeps_verified_checkpoints_rather_than_newer_corrupt_ones(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20, 30)
    for step in (20, 30):  # then corrupted: a restart resumes from 10, the run goes on from there
        flip_a_float(tmp_path / step_dir(step) / "__0_0.distcp", float(step))
    with Checkpointer(str(tmp_path), keep=2) as checkpoints:
        assert checkpoints.latest() == 10
        checkpoints.save(15, ones(15.0))
        checkpoints.wait()
        # The window is the newest `keep` committed steps up to the one just committed; the corrupt
        # newer ones neither count nor push out the verified ones (they are left for inspection).
        assert committed(tmp_path) == [10, 15, 20, 30]
        assert checkpoints.latest() == 15
        checkpoints.save(17, ones(17.0))
        checkpoints.wait()
        assert committed(tmp_path) == [15, 17, 20, 30]
    with Checkpointer(str(tmp_path), keep=1) as checkpoints:
        checkpoints.save(18, ones(18.0))
        checkpoints.wait()
        assert committed(tmp_path) == [18, 20, 30]  # keep=1 still keeps the one just committed
        assert checkpoints.latest() == 18


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_nonfinite_state_is_refused_before_anything_is_written(
    tmp_path: Path, bad: float, dtype: torch.dtype
) -> None:
    weights = torch.ones(64, dtype=dtype)
    weights[17] = bad
    state = {"model": {"w": torch.ones(4), "layers": [torch.zeros(2), weights]}, "rng": torch.get_rng_state()}
    with Checkpointer(str(tmp_path)) as checkpoints:
        with pytest.raises(
            CheckpointError, match=r"refusing to checkpoint step 5: non-finite values in model.layers\[1\]"
        ):
            checkpoints.save(5, state)
        assert not (tmp_path / step_dir(5)).exists()
        checkpoints.save(6, ones(6.0))  # nothing stuck in flight
    assert committed(tmp_path) == [6]


def test_nonfinite_tensors_names_every_bad_tensor_and_ignores_integers() -> None:
    state = {"a": torch.tensor([1.0, float("nan")]), "b": [torch.tensor([float("inf")])], "c": torch.arange(3)}
    assert nonfinite_tensors(state) == ["a", "b[0]"]
    assert nonfinite_tensors({"x": torch.empty(0), "y": 3, "z": torch.tensor([1 + 2j])}) == []
    assert nonfinite_tensors({"z": torch.tensor([complex(1, float("nan"))])}) == ["z"]
