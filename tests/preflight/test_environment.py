"""Environment checks against a fake /sys, /usr/local and mount tree."""

from __future__ import annotations

from pathlib import Path

from preflight.environment import (
    RDMA_INTERFACES,
    Settings,
    check_checkpoint_mount,
    check_nccl,
    check_rdma_interfaces,
    check_shm,
)

GOOD_ENV = {
    "NCCL_NET": "gIB",
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_IB_ADAPTIVE_ROUTING": "1",
    "LD_LIBRARY_PATH": "/usr/local/gib/lib64:/usr/local/nvidia/lib64",
}


def node_tree(root: Path, mtu: int = 8896, missing: str | None = None) -> Path:
    for name in RDMA_INTERFACES:
        if name == missing:
            continue
        device = root / "sys/class/net" / name
        device.mkdir(parents=True)
        (device / "mtu").write_text(f"{mtu}\n")
        (device / "operstate").write_text("up\n")
    (root / "usr/local/nvidia/lib64").mkdir(parents=True)
    (root / "usr/local/nvidia/lib64/libnccl.so.2.27.7").write_bytes(b"")
    (root / "usr/local/gib/lib64").mkdir(parents=True)
    (root / "usr/local/gib/lib64/libnccl-net_internal.so").write_bytes(b"")
    (root / "dev/shm").mkdir(parents=True)
    (root / "ckpt").mkdir()
    return root


def test_a_good_node_passes(tmp_path: Path) -> None:
    settings = Settings(root=node_tree(tmp_path), checkpoint_dir="/ckpt", min_shm_bytes=1)
    results = [
        check_checkpoint_mount(settings),
        check_nccl(settings, GOOD_ENV),
        check_rdma_interfaces(settings),
        check_shm(settings),
    ]
    assert [r.status for r in results] == ["pass"] * 4
    assert results[1].summary == "NCCL 2.27.7 with the gIB plugin, NCCL_NET=gIB"
    assert not list((tmp_path / "ckpt").iterdir())  # the write probe cleans up


def test_wrong_mtu_and_missing_interface(tmp_path: Path) -> None:
    result = check_rdma_interfaces(Settings(root=node_tree(tmp_path, mtu=1460, missing="eth5")))
    assert result.status == "fail"
    assert result.evidence[0] == "eth2 has MTU 1460, expected 8896"
    assert "eth5 is missing: the pod needs the networking.gke.io/interfaces annotation for rdma-0..7" in result.evidence
    assert len(result.evidence) == 8


def test_nccl_environment_and_plugin(tmp_path: Path) -> None:
    root = node_tree(tmp_path)
    (root / "usr/local/gib/lib64/libnccl-net_internal.so").unlink()
    result = check_nccl(Settings(root=root), {"NCCL_NET": "Socket"})
    assert result.status == "fail"
    assert result.evidence == [
        "the gIB plugin (libnccl-net*.so) is not in /usr/local/gib/lib64: is the nccl-rdma-installer DaemonSet running?",
        "NCCL_NET=Socket, expected gIB",
        "gIB environment not set (NCCL_CROSS_NIC, NCCL_NET_GDR_LEVEL, NCCL_IB_ADAPTIVE_ROUTING): source /usr/local/gib/scripts/set_nccl_env.sh",
        "LD_LIBRARY_PATH lacks /usr/local/nvidia/lib64",
    ]
    assert check_nccl(Settings(root=root, rdma=False), {}).status == "skip"


def test_checkpoint_mount_missing_or_read_only(tmp_path: Path) -> None:
    root = node_tree(tmp_path)
    assert check_checkpoint_mount(Settings(root=root, checkpoint_dir="/missing")).summary == "/missing is not mounted"
    (root / "ckpt").chmod(0o500)
    try:
        result = check_checkpoint_mount(Settings(root=root, checkpoint_dir="/ckpt"))
        # root ignores permission bits; as any other user the probe must fail
        assert result.status == ("pass" if __import__("os").geteuid() == 0 else "fail")
    finally:
        (root / "ckpt").chmod(0o700)
    assert check_checkpoint_mount(Settings(root=root)).status == "skip"


def test_small_shm_fails(tmp_path: Path) -> None:
    settings = Settings(root=node_tree(tmp_path))
    result = check_shm(settings, size=64 * 2**20)
    assert result.status == "fail"
    assert result.summary.startswith("/dev/shm holds 0.1 GiB, at least 64 GiB needed")
    assert check_shm(settings, size=128 * 2**30).status == "pass"
