"""Per-NIC RDMA link state against a fake /sys/class/infiniband tree."""

from __future__ import annotations

from pathlib import Path

from preflight import rdma_links


def _nic(
    root: Path, device: str, state: str = "4: ACTIVE", phys: str = "5: LinkUp", rate: str = "400 Gb/sec (4X NDR)"
) -> None:
    port = root / rdma_links.SYSFS / device / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    (port / "phys_state").write_text(phys + "\n")
    (port / "rate").write_text(rate + "\n")


def _machine(root: Path, **overrides: dict[str, str]) -> None:
    for i in range(8):
        _nic(root, f"mlx5_{i}", **overrides.get(f"mlx5_{i}", {}))


def test_all_eight_up_at_400(tmp_path: Path) -> None:
    _machine(tmp_path)
    result = rdma_links.check(tmp_path, 8, 400)
    assert (result.status, result.summary) == ("pass", "8 RDMA device(s), 8 port(s) ACTIVE/LinkUp at >= 400 Gb/s")


def test_one_link_down(tmp_path: Path) -> None:
    _machine(tmp_path, mlx5_4={"state": "1: DOWN", "phys": "3: Disabled"})
    result = rdma_links.check(tmp_path, 8, 400)
    assert result.status == "fail"
    assert result.evidence == [
        "mlx5_4 port 1: state DOWN, expected ACTIVE",
        "mlx5_4 port 1: physical state Disabled, expected LinkUp",
    ]
    assert result.summary == "mlx5_4 port 1: state DOWN, expected ACTIVE (+1 more)"


def test_one_link_at_a_lower_rate(tmp_path: Path) -> None:
    _machine(tmp_path, mlx5_6={"rate": "200 Gb/sec (4X HDR)"})
    result = rdma_links.check(tmp_path, 8, 400)
    assert (result.status, result.evidence) == ("fail", ["mlx5_6 port 1: rate 200 Gb/s, below 400 Gb/s"])


def test_a_missing_nic_and_an_unreadable_rate(tmp_path: Path) -> None:
    for i in range(7):
        _nic(tmp_path, f"mlx5_{i}", rate="fast" if i == 2 else "400 Gb/sec (4X NDR)")
    result = rdma_links.check(tmp_path, 8, 400)
    assert result.evidence == [
        "7 RDMA device(s) visible, the machine has 8",
        "mlx5_2 port 1: rate unreadable, expected 400 Gb/s",
    ]


def test_no_infiniband_class_at_all(tmp_path: Path) -> None:
    result = rdma_links.check(tmp_path, 8, 400)
    assert result.status == "fail"
    assert result.summary.startswith("no /sys/class/infiniband: no RDMA device is visible (expected 8)")


def test_a_device_without_ports_and_hostile_values(tmp_path: Path) -> None:
    _machine(tmp_path, mlx5_1={"state": "4: ACTIVE" + "x" * 100_000, "phys": "\x00\xff"})
    (tmp_path / rdma_links.SYSFS / "mlx5_8").mkdir()
    result = rdma_links.check(tmp_path, 8, 400)
    assert result.status == "fail"
    assert all(len(line) < 400 for line in result.evidence)
    assert any(line.startswith("mlx5_8 port -: state unreadable") for line in result.evidence)


def test_a_machine_without_rdma_is_skipped(tmp_path: Path) -> None:
    assert rdma_links.check(tmp_path, 0, 0, rdma=False).status == "skip"
