"""The torchft Manager's port (issue 39): a run across regions names it, so the cross-region rules can admit it.

A group healing from a group in another region dials the source's Manager (gRPC CheckpointMetadata), so its
port must be one the network rules name (contract.names.MANAGER_PORTS). The Ray driver gives each group on a
node its own slot (ray_supervisor.node_slot), decided in the one process that places every group: no probing,
no race between the groups of a pod.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist
from trainer.config import Config, compose
from trainer.distributed.regions import manager_port
from trainer.launch.ray_supervisor import Slot, Supervisor, metrics_port, node_slot
from trainer.observe.runs import EventLog

from contract.names import HEAL_TLS_PORTS, MANAGER_PORTS, RING_TLS_PORTS
from tests.ports import free_port
from tests.threads import gloo_threads
from tests.trainer.conftest import CONFIG
from tests.trainer.test_lighthouse_heal import honest_group
from tests.waiting import until


def test_the_manager_ports_are_clear_of_the_heal_ports_and_the_stores() -> None:
    stores = range(RING_TLS_PORTS.start - len(RING_TLS_PORTS), RING_TLS_PORTS.start)  # tls_ring.RENDEZVOUS_OFFSET
    assert len(MANAGER_PORTS) == 8  # one group per GPU of an 8-GPU node
    for other in (HEAL_TLS_PORTS, stores, RING_TLS_PORTS):
        assert not set(MANAGER_PORTS) & set(other), other


def test_each_group_of_a_node_gets_its_own_slot_and_another_node_starts_again() -> None:
    assert node_slot("a", set()) == 0
    assert node_slot("a", {("a", 0), ("b", 1)}) == 1
    assert node_slot("a", {("a", 0), ("a", 1)}) == 2
    assert node_slot("b", {("a", 0)}) == 0
    assert metrics_port(9464, 2) == 9466
    assert metrics_port(0, 2) == 0  # any free port: the group's metrics-<g>.port says which
    assert metrics_port(-1, 2) == -1  # off


def test_a_run_across_regions_takes_the_named_ports_and_any_other_run_any_port(tmp_path: Path) -> None:
    base = ["run.name=r", f"checkpoint.dir={tmp_path}"]
    tls = compose(CONFIG, [*base, "ft.lighthouse=http://lh:29510", f"ft.lighthouse_tls={tmp_path}"])
    plain = compose(CONFIG, base)
    assert [manager_port(tls, slot) for slot in range(8)] == list(MANAGER_PORTS)
    assert manager_port(tls, 8) == 0  # more groups on a node than an 8-GPU node holds (CPU nodes): any port
    assert manager_port(plain, 0) == 0  # in one region nothing outside reaches it: torchft's own choice
    assert manager_port(compose(CONFIG, [*base, "ft.manager_port=29999"]), 3) == 29999


@pytest.fixture
def lighthouse() -> Iterator[str]:
    from torchft.coordination import LighthouseServer

    server = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
    try:
        yield server.address()
    finally:
        server.shutdown()


def test_the_group_s_manager_serves_on_the_configured_port(lighthouse: str, tmp_path: Path) -> None:
    port = free_port("")  # a free port on this shared machine; a pod uses MANAGER_PORTS
    ft = honest_group(lighthouse, tmp_path, f"ft.manager_port={port}")
    try:
        address = ft.manager._manager.address()  # what torchft stores under manager_addr for its peers
        assert address.rsplit(":", 1)[1] == str(port), address
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        ft.shutdown()


def test_a_groups_shutdown_ends_its_cross_group_process_group(lighthouse: str, tmp_path: Path) -> None:
    """Stop 51: a rank whose torchft gloo group was still held when it exited aborted while Python finalized
    ("terminate called without an active exception", exit -6), in 9 of 60 processes here; a group that finished
    then counted as failed and was restarted. ft.shutdown() lets the group go, its worker threads stopped."""
    before = gloo_threads()
    ft = honest_group(lighthouse, tmp_path)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # type: ignore[attr-defined]
    ft.pg.configure(f"127.0.0.1:{store.port}/quorum/1", "victim", 0, 1)  # as torchft's quorum does
    until(lambda: gloo_threads() > before, 30, "the group's worker threads")  # each names itself once running
    ft.shutdown()
    assert gloo_threads() == before


def _driver(cfg: Config, out: Path, started: list[tuple[int, int, int]]) -> Any:
    """The Ray driver's own bookkeeping without Ray: its groups, events and console; actors that record what
    each group is started with (group, ft.manager_port, run.metrics_port)."""
    driver: Any = object.__new__(Supervisor)
    driver.cfg, driver.out, driver.address, driver.groups = cfg, out, "http://lighthouse:29510", {}
    driver.events, driver.console = EventLog(out / "supervisor.jsonl"), SimpleNamespace(print=lambda _: None)
    driver.started = started
    return driver


def _group(driver: Any, group: int, node: str) -> None:
    def train(config: dict[str, Any], g: int, env: dict[str, str], lighthouse: str) -> str:
        driver.started.append((g, config["ft"]["manager_port"], config["run"]["metrics_port"]))
        return "ref"

    actor = SimpleNamespace(train=SimpleNamespace(remote=train))
    placed = [{"node": node, "ip": "10.0.0.1", "pid": 1, "port": 0}]
    driver.groups[group] = slot = Slot(None, [actor], [], placed=placed, group=group)
    driver._start(slot)


def test_the_driver_starts_each_group_of_a_node_on_its_own_manager_port(tmp_path: Path) -> None:
    base = ["run.name=r", f"checkpoint.dir={tmp_path}", "ft.lighthouse=http://lh:29510"]
    started: list[tuple[int, int, int]] = []
    driver = _driver(compose(CONFIG, [*base, f"ft.lighthouse_tls={tmp_path}"]), tmp_path, started)
    for group, node in enumerate(["a", "a", "b", "a"]):
        _group(driver, group, node)
    assert started == [(0, 29528, 9464), (1, 29529, 9465), (2, 29528, 9464), (3, 29530, 9466)]
    del driver.groups[1]  # lost: its replacement takes the slot it left on its node
    _group(driver, 1, "a")
    assert started[-1] == (1, 29529, 9465)
    started.clear()
    _group(_driver(compose(CONFIG, base), tmp_path, started), 0, "a")
    assert started == [(0, 0, 9464)]  # one region: torchft's own choice
