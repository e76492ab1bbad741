"""The node agent: kernel ring buffer -> GPUXid / NVSwitchSXid Node conditions, against a local API server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.kernel_log import parse
from tests.warden.fakes import ApiState, FakeApiServer, node, serving
from warden.agent import HEARTBEAT_S, Agent, conditions, read_kmsg
from warden.kube import STRATEGIC, Kube
from warden.observe import parse_codes
from warden.ratelimit import TokenBucket

# /dev/kmsg records: "<priority>,<sequence>,<microseconds since boot>,<flags>;<message>"
KMSG = [
    "6,1001,5000000,-;Linux version 6.6.0 (builder@cos)",
    "3,1702,1200500000,-;NVRM: Xid (PCI:0000:97:00): 13, pid=4411, name=python, Graphics SM Warp Exception",
    "3,1703,1800250000,-;NVRM: Xid (PCI:0000:c6:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "3,1704,1900000000,-;NVRM: Xid (PCI:0000:97:00): 13, pid=4411, name=python, Graphics SM Warp Exception",
    "4,1705,1950000000,-;nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error",
]
BOOTED_AT = 1_764_400_000.0


@pytest.fixture
def api() -> Iterator[tuple[ApiState, Kube]]:
    from kubernetes import client as k8s

    state = ApiState(nodes={"gpu-1": node("gpu-1")})
    with serving(FakeApiServer, state) as url:
        yield state, Kube(k8s.ApiClient(k8s.Configuration(host=url)), TokenBucket(100, 10))


def write(tmp_path: Path, records: list[str], uptime: float) -> tuple[Path, Path]:
    kmsg, proc = tmp_path / "kmsg", tmp_path / "uptime"
    kmsg.write_text("\n".join(records) + "\n")
    proc.write_text(f"{uptime:.2f} 1000.00\n")
    return kmsg, proc


def test_kmsg_records_become_dmesg_lines_the_parser_reads(tmp_path: Path) -> None:
    kmsg, _ = write(tmp_path, KMSG, 3000)
    lines = read_kmsg(str(kmsg))
    assert lines[1].startswith("[ 1200.500000] NVRM: Xid (PCI:0000:97:00): 13")
    events = parse(lines)
    assert [(e.kind, e.code, e.time) for e in events] == [
        ("xid", 13, 1200.5),
        ("xid", 79, 1800.25),
        ("xid", 13, 1900.0),
        ("sxid", 12028, 1950.0),
    ]


def test_conditions_carry_the_latest_time_of_each_code() -> None:
    lines = [f"[{int(r.split(',')[2]) / 1e6:12.6f}] {r.split(';', 1)[1]}" for r in KMSG]
    found = conditions(parse(lines), BOOTED_AT)
    assert found["GPUXid"] == ("True", "XidLogged", f"13@{int(BOOTED_AT + 1900)} 79@{int(BOOTED_AT + 1800.25)}")
    assert parse_codes(found["GPUXid"][2]) == [(13, BOOTED_AT + 1900), (79, float(int(BOOTED_AT + 1800.25)))]
    assert found["NVSwitchSXid"][0] == "True"
    assert conditions([], BOOTED_AT)["GPUXid"] == ("False", "NoXid", "no Xid since boot")


def test_agent_patches_node_status_on_change_and_on_heartbeat(api: tuple[ApiState, Kube], tmp_path: Path) -> None:
    state, kube = api
    kmsg, proc = write(tmp_path, KMSG[:2], 1300)
    agent = Agent(kube, "gpu-1", str(kmsg), str(proc))
    agent.load()
    now = 1_764_500_000.0
    assert agent.step(now)
    patch = [r for r in state.requests if r.method == "PATCH"][-1]
    assert (patch.path, patch.content_type) == ("/api/v1/nodes/gpu-1/status", STRATEGIC)
    sent = {c["type"]: c for c in patch.body["status"]["conditions"]}
    assert sent["GPUXid"]["status"] == "True"
    assert sent["GPUXid"]["message"].startswith("13@")
    assert sent["NVSwitchSXid"]["status"] == "False"
    kinds = [c["type"] for c in state.nodes["gpu-1"]["status"]["conditions"]]
    assert kinds == ["Ready", "GPUXid", "NVSwitchSXid"]  # the kubelet's Ready is left alone
    assert not agent.step(now + 30)  # nothing new: no request
    write(tmp_path, KMSG[:3], 1900)
    assert agent.step(now + 60)  # Xid 79 appeared
    latest = {c["type"]: c for c in state.nodes["gpu-1"]["status"]["conditions"]}
    assert " 79@" in latest["GPUXid"]["message"]
    assert latest["GPUXid"]["lastTransitionTime"] == sent["GPUXid"]["lastTransitionTime"]  # still True: same transition
    assert agent.step(now + 60 + HEARTBEAT_S)  # heartbeat

    # A restarted agent after a reboot: empty ring buffer -> False, with a new transition time.
    write(tmp_path, KMSG[:1], 60)
    fresh = Agent(kube, "gpu-1", str(kmsg), str(proc))
    fresh.load()
    assert fresh.step(now + 1000)
    after = {c["type"]: c for c in state.nodes["gpu-1"]["status"]["conditions"]}
    assert after["GPUXid"]["status"] == "False"
    assert after["GPUXid"]["lastTransitionTime"] != latest["GPUXid"]["lastTransitionTime"]


def test_numbers_of_thousands_of_digits_in_kmsg_are_skipped_not_a_traceback(tmp_path: Path) -> None:
    hostile = [
        "3,1706," + "9" * 5000 + ",-;NVRM: Xid (PCI:0000:97:00): 13, pid=1, name=python",  # a timestamp int() refuses
        "3,1707,\u00b2,-;NVRM: Xid (PCI:0000:97:00): 13, pid=1, name=python",  # a digit that is not ASCII
        "3,1708,2000000000,-;NVRM: Xid (PCI:0000:97:00): " + "7" * 5000 + ", pid=1, name=python",  # the code
    ]
    kmsg, _ = write(tmp_path, [*KMSG, *hostile], 3000)
    lines = read_kmsg(str(kmsg))
    assert len(lines) == len(KMSG) + 1  # the two records without a readable time are skipped
    assert [(e.kind, e.code) for e in parse(lines)][-1] == ("sxid", 12028)  # and the long code is no Xid
    assert parse_codes("7" * 5000 + "@1 13@" + "9" * 5000) == [(13, 0.0)]  # the condition's numbers are bounded too
