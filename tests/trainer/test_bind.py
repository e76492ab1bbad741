"""The servers a run's pods start listen on the pod's address only (issue 39, item 1: "servers bind only to the
interfaces they serve"). 127.0.0.2 stands for the pod's IP and 127.0.0.1 for any other interface of the pod (its
loopback, gVNIC, the RDMA NICs of a GPU pod): a server bound where it serves is not reachable on the other one.
Heal transfers: test_heal_tls.py. What torchft and torch.distributed bind themselves: the trainer README."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
from trainer import mtls
from trainer.goodput import Goodput
from trainer.metrics import RunMetrics

from contract.names import ADVERTISE_HOST_ENV
from gkr.run_tls import mint
from tests.trainer.test_lighthouse_mtls import identity_folder

POD_IP, OTHER = "127.0.0.2", "127.0.0.1"


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def test_the_lighthouse_sidecar_listens_only_on_the_pod_s_ip(tmp_path: Path) -> None:
    """It listened on 0.0.0.0: every interface of the Lighthouse's pod took the run's Lighthouse port."""
    identity = identity_folder(tmp_path / "lh", mint("victim"), "lighthouse")
    flags = ["--listen-port", "0", "--upstream", "127.0.0.1:29511", "--identity", str(identity)]
    proxy = mtls.start(["--listen-host", POD_IP, *flags])
    try:
        assert reachable(POD_IP, proxy.port)
        assert not reachable(OTHER, proxy.port)
    finally:
        proxy.close()
    with pytest.raises(mtls.MtlsError, match=r"^--listen-host 192\.0\.2\.254: cannot listen .*; give the pod's IP$"):
        mtls.start(["--listen-host", "192.0.2.254", *flags])  # TEST-NET-1: no address of this machine


def test_a_group_s_metrics_listen_only_on_the_pod_s_ip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Under Ray (the pod's IP in names.ADVERTISE_HOST_ENV) the scrape arrives there; it listened on 0.0.0.0."""
    monkeypatch.setenv(ADVERTISE_HOST_ENV, POD_IP)
    live = RunMetrics("r", "local", 0, Goodput())
    live.serve(0, tmp_path / "metrics-0.port")
    try:
        with urllib.request.urlopen(f"http://{POD_IP}:{live.port}/metrics", timeout=5) as response:
            assert b"meridian_" in response.read()
        assert not reachable(OTHER, live.port)
    finally:
        live.finish(tmp_path / "metrics.prom")
