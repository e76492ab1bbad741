"""The servers a run's pods start listen on the pod's address only (issue 39, item 1: "servers bind only to the
interfaces they serve"). 127.0.0.2 stands for the pod's IP and 127.0.0.1 for any other interface of the pod (its
loopback, gVNIC, the RDMA NICs of a GPU pod): a server bound where it serves is not reachable on the other one.
Heal transfers: test_heal_tls.py. What torchft and torch.distributed bind themselves: the trainer README."""

from __future__ import annotations

import socket
import threading
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from trainer.distributed import mtls
from trainer.observe.goodput import Goodput
from trainer.observe.metrics import RunMetrics

from contract.names import ADVERTISE_HOST_ENV
from gkr.run_tls import mint
from tests.ports import free_port
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


def test_torch_s_store_listens_on_every_interface_whatever_its_host() -> None:
    """Why trainer.distributed.listen exists (torch 2.13): if this fails, torch binds its host now and store_on can go."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    store = TCPStore(POD_IP, 0, is_master=True, wait_for_workers=False)
    assert reachable(OTHER, store.port)


def test_a_one_process_group_s_store_listens_only_on_the_pod_s_ip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """torchft hands this store's address to the other groups (the quorum's store_address); it listened on all."""
    from torchft.coordination import LighthouseServer

    from tests.trainer.test_lighthouse_heal import honest_group

    monkeypatch.setenv(ADVERTISE_HOST_ENV, POD_IP)
    server = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
    ft = honest_group(server.address(), tmp_path)
    try:
        assert ft.store.host == POD_IP
        assert reachable(POD_IP, ft.store.port)
        assert not reachable(OTHER, ft.store.port)
    finally:
        ft.shutdown()
        server.shutdown()


def test_a_sharded_group_s_store_listens_only_on_rank_0_s_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group's rendezvous (MASTER_ADDR, rank 0's pod IP under Ray), which torchft's Manager uses as its store."""
    from trainer.distributed.group import group_store

    port = free_port(POD_IP)
    monkeypatch.setenv("MASTER_ADDR", POD_IP)
    monkeypatch.setenv("MASTER_PORT", str(port))
    stores: dict[int, object] = {}
    rank0 = threading.Thread(target=lambda: stores.__setitem__(0, group_store(0, 2, timedelta(seconds=30))))
    rank0.start()
    stores[1] = group_store(1, 2, timedelta(seconds=30))  # rank 0's waits for it
    rank0.join(timeout=30)
    assert set(stores) == {0, 1}
    assert reachable(POD_IP, port)
    assert not reachable(OTHER, port)


def test_the_rl_controller_s_store_listens_only_where_its_server_does() -> None:
    """Under Ray the controller's server and store are on the head pod's IP (ray_train); the store listened on all."""
    from trainer.rl.controller import Controller
    from trainer.rl.grpo import make_task
    from trainer.rl.service import Service
    from trainer.rl.settings import RL

    settings = RL(group_size=2, prompts_per_step=2, lease_prompts=2)
    service = Service(Controller(settings, make_task(settings, 256), vocab=256, steps=4), host=POD_IP)
    try:
        assert not reachable(OTHER, service.server.server_address[1])
        assert reachable(POD_IP, service.store.port)
        assert not reachable(OTHER, service.store.port)
    finally:
        service.close()
