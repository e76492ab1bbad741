"""A run across regions, the pure parts: settings and gkr's environment, replica ids, the cross-group backend,
which other regions' checkpoint directories resume reads. (The processes: test_cross_region.py.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from trainer.checkpoint.resume import Root, other_regions
from trainer.config import ConfigError, compose
from trainer.distributed.regions import cross_group_backend, cross_group_environment, replica_id

from contract.names import LIGHTHOUSE_ENV, REGION_ENV, RESUME_FROM_ENV
from tests.trainer.conftest import CONFIG

GKR = {LIGHTHOUSE_ENV: "http://lighthouse.research:29510", REGION_ENV: "us-east4", RESUME_FROM_ENV: "/b, gs://c/x ,"}


def test_settings_default_to_gkrs_environment_and_the_command_line_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in GKR.items():
        monkeypatch.setenv(key, value)
    cfg = compose(CONFIG, ["run.name=x"])
    assert (cfg.ft.lighthouse, cfg.ft.region) == ("http://lighthouse.research:29510", "us-east4")
    assert cfg.checkpoint.resume_from == ("/b", "gs://c/x")  # comma-separated, blanks dropped
    cfg = compose(CONFIG, ["run.name=x", "ft.region=europe-west4", "checkpoint.resume_from=[/d]"])
    assert (cfg.ft.region, cfg.checkpoint.resume_from) == ("europe-west4", ("/d",))


def test_without_gkrs_environment_a_run_is_one_region(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in GKR:
        monkeypatch.delenv(key, raising=False)
    cfg = compose(CONFIG, ["run.name=x"])
    assert (cfg.ft.lighthouse, cfg.ft.region, cfg.checkpoint.resume_from) == ("", "", ())
    assert replica_id(cfg, 1) == "x-1"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("ft.region=US East", "ft.region: 'US East' is not a region name"),
        ("ft.lighthouse=lighthouse:29510", "ft.lighthouse: 'lighthouse:29510' is not an address"),
        ("ft.lighthouse='http://a b'", "is not an address"),
        ("ft.cross_group_backend=nccl", "ft.cross_group_backend: nccl needs ft.device=cuda"),
        ("ft.cross_group_backend=mpi", "ft.cross_group_backend: 'mpi' is not one of 'auto', 'nccl', 'gloo'"),
        ("checkpoint.resume_from=['a,b']", "checkpoint.resume_from[0]: 'a,b' is not a checkpoint directory"),
        ("checkpoint.resume_from=['']", "checkpoint.resume_from[0]: '' is not a checkpoint directory"),
        ("checkpoint.resume_from=/b", "checkpoint.resume_from: '/b' is not a list"),
    ],
)
def test_malformed_settings_are_one_line(setting: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in GKR:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError) as error:
        compose(CONFIG, ["run.name=x", setting])
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_malformed_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESUME_FROM_ENV, "/b,/c\n/d")
    with pytest.raises(ConfigError, match=r"checkpoint.resume_from\[1\]"):
        compose(CONFIG, ["run.name=x"])


@pytest.mark.parametrize(
    ("device", "region", "setting", "backend"),
    [
        ("cpu", "", "auto", "gloo"),
        ("cpu", "us-east4", "gloo", "gloo"),
        ("cuda", "", "auto", "nccl"),  # one region: torchft's NCCL across groups, as before
        ("cuda", "us-east4", "auto", "gloo"),  # across regions: the pod network, never RDMA
        ("cuda", "us-east4", "nccl", "nccl"),  # forced (e.g. regions joined by a network NCCL can use)
        ("cuda", "", "gloo", "gloo"),
    ],
)
def test_the_cross_group_backend(
    device: str, region: str, setting: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in GKR:
        monkeypatch.delenv(key, raising=False)
    overrides = [f"ft.device={device}", f"ft.region={region}", f"ft.cross_group_backend={setting}"]
    cfg = compose(CONFIG, ["run.name=x", *overrides])
    assert cross_group_backend(cfg) == backend
    expected = {"GLOO_SOCKET_IFNAME": "eth0"} if (device, backend) == ("cuda", "gloo") else {}
    assert cross_group_environment(cfg) == expected
    assert replica_id(cfg, 3) == (f"{region}/3" if region else "x-3")


def test_other_regions_are_every_group_directory_found(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for d in ("b/group-0", "b/group-3", "b/group-x", "b/other", "c/group-1"):
        (tmp_path / d).mkdir(parents=True)
    own = str(tmp_path / "a")
    resume_from = [str(tmp_path / "b"), own, "nosuch://elsewhere", str(tmp_path / "missing"), f"{tmp_path}/c/"]
    cfg = compose(CONFIG, ["run.name=x", f"checkpoint.dir={own}", f"checkpoint.resume_from=[{','.join(resume_from)}]"])
    with caplog.at_level(logging.WARNING, logger="trainer"):
        roots = other_regions(cfg)
    assert roots == [Root(str(tmp_path / "b"), 0), Root(str(tmp_path / "b"), 3), Root(f"{tmp_path}/c/", 1)]
    assert roots[2].url == f"{tmp_path}/c/group-1"
    # An unreadable region is one warning, never a reason not to start.
    assert [r.message for r in caplog.records if "nosuch://elsewhere" in r.message]
