"""Every invalid spec gives one clear line (file:line: path: what; how to fix), exit 2, and nothing else."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.cli import main

Spec = dict[str, Any]
DIGEST = "@sha256:" + "ab" * 32


def _rename_region(spec: Spec, old: str, new: str) -> None:
    for region in spec["regions"]:
        if region["name"] == old:
            region["name"] = new
    for team in spec["teams"]:
        team["quota"] = {new if k == old else k: v for k, v in team["quota"].items()}


def _set(path: str, value: Any) -> Callable[[Spec], None]:
    """Set a value at a dotted path such as 'regions.0.gpu_pools.1.zone'."""

    def mutate(spec: Spec) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _delete(path: str) -> Callable[[Spec], None]:
    def mutate(spec: Spec) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return mutate


def _both(*mutations: Callable[[Spec], None]) -> Callable[[Spec], None]:
    def mutate(spec: Spec) -> None:
        for m in mutations:
            m(spec)

    return mutate


# (id, mutation, path printed, words the line must contain)
CASES: list[tuple[str, Callable[[Spec], None], str, str]] = [
    (
        "unknown region",
        lambda s: _rename_region(s, "us-east4", "us-east-4"),
        "regions[1].name",
        "unknown region 'us-east-4'; did you mean us-east4?",
    ),
    (
        "zone outside its region",
        _set("regions.0.zones.2", "us-east4-c"),
        "regions[0].zones[2]",
        "zone 'us-east4-c' is not in us-central1",
    ),
    (
        "pool zone not listed",
        _set("regions.0.gpu_pools.0.zone", "us-central1-f"),
        "regions[0].gpu_pools[0].zone",
        "is not one of the zones of us-central1",
    ),
    (
        "unknown machine type",
        _set("regions.1.gpu_pools.0.machine_type", "a3-ultragpu-9g"),
        "regions[1].gpu_pools[0].machine_type",
        "unknown machine type 'a3-ultragpu-9g'; did you mean a3-ultragpu-8g?",
    ),
    (
        "machine not offered in zone",
        _both(_set("regions.1.gpu_pools.0.zone", "us-east4-a")),
        "regions[1].gpu_pools[0].zone",
        "a3-ultragpu-8g is not offered in us-east4-a; in us-east4 it is offered in us-east4-b",
    ),
    (
        "CPU machine in a GPU pool",
        _set("regions.1.gpu_pools.0.machine_type", "n2-standard-32"),
        "regions[1].gpu_pools[0].machine_type",
        "has no GPUs",
    ),
    (
        "GPU machine as system pool",
        _set("regions.2.system_pool.machine_type", "a3-megagpu-8g"),
        "regions[2].system_pool.machine_type",
        "the system pool needs a CPU type",
    ),
    (
        "team quota above region",
        _set("teams.0.quota.us-east4", 4000),
        "teams[0].quota.us-east4",
        "quota of 4,000 GPUs is above the 3,072 GPUs that us-east4 holds",
    ),
    (
        "quotas add up above region",
        _set("teams.1.quota.us-east4", 1024),
        "regions[1].name",
        "teams' quotas in us-east4 add up to 3,328 GPUs but the region holds 3,072",
    ),
    (
        "quota in a region the fleet lacks",
        _set("teams.2.quota.asia-south1", 8),
        "teams[2].quota.asia-south1",
        "quota for region 'asia-south1', which the fleet does not have",
    ),
    (
        "duplicate pool name",
        _set("regions.0.gpu_pools.1.name", "h200-a"),
        "regions[0].gpu_pools[0].name",
        "pool 'h200-a' is used 2 times",
    ),
    ("duplicate team name", _set("teams.2.name", "research"), "teams[1].name", "team 'research' is used 2 times"),
    (
        "invalid DNS-1035 name",
        _set("regions.0.gpu_pools.0.name", "H200_A"),
        "regions[0].gpu_pools[0].name",
        "'H200_A' is not a valid name",
    ),
    (
        "pool name too long for GKE",
        _set("regions.0.gpu_pools.0.name", "h" * 41),
        "regions[0].gpu_pools[0].name",
        "use at most 40 lowercase letters",
    ),
    (
        "explicit range overlaps a planned one",
        _set("regions.1.network", {"nodes": "10.8.128.0/20"}),
        "regions[1].network.nodes",
        "10.8.128.0/20 overlaps us-central1 nodes 10.8.128.0/20 (planned)",
    ),
    (
        "two explicit ranges overlap",
        _set("regions.2.network", {"gvnic": "10.200.0.0/20", "nodes": "10.200.8.0/21"}),
        "regions[2].network.nodes",
        "overlaps europe-west1 gvnic 10.200.0.0/20 (given)",
    ),
    (
        "pod range too small",
        _set("regions.0.network", {"pods": "10.200.0.0/20"}),
        "regions[0].network.pods",
        "10.200.0.0/20 holds 4,096 addresses but 518 nodes at their max pods per node need 34,304 (a /16); write a larger range",
    ),
    (
        "planned RDMA subnets too small",
        _set("network.rdma_subnet_prefix", 24),
        "network.rdma_subnet_prefix",
        "planned /24 rdma ranges hold 256 addresses but 512 RDMA nodes in us-central1-b need 516; set rdma_subnet_prefix to 22 or less",
    ),
    (
        "explicit RDMA subnets too small",
        _set("regions.1.network", {"rdma": {"us-east4-b": [f"10.200.{n}.0/24" for n in range(8)]}}),
        "regions[1].network.rdma.us-east4-b",
        "10.200.0.0/24 holds 256 addresses but 384 RDMA nodes in us-east4-b need 388 (a /23)",
    ),
    (
        "control plane not a /28",
        _set("regions.0.network", {"control_plane": "10.200.0.0/27"}),
        "regions[0].network.control_plane",
        "is not a /28",
    ),
    (
        "range with host bits set",
        _set("regions.0.network", {"gvnic": "10.200.0.1/20"}),
        "regions[0].network.gvnic",
        "'10.200.0.1/20' has host bits set; write 10.200.0.0/20",
    ),
    (
        "range that is not a range",
        _set("regions.0.network", {"gvnic": "10.300.0.0/20"}),
        "regions[0].network.gvnic",
        "is not an IPv4 range",
    ),
    (
        "wrong number of RDMA ranges",
        _set("regions.0.network", {"rdma": {"us-central1-b": ["10.200.0.0/22"]}}),
        "regions[0].network.rdma.us-central1-b",
        "1 RDMA ranges given; an A3 Ultra zone needs exactly 8",
    ),
    (
        "RDMA ranges for a zone without RDMA pools",
        _set("regions.0.network", {"rdma": {"us-central1-a": ["10.200.0.0/22"] * 8}}),
        "regions[0].network.rdma.us-central1-a",
        "has no pool with RDMA NICs",
    ),
    (
        "supernet too small for the regions",
        _set("network.supernet", "10.0.0.0/11"),
        "regions[2].network",
        "the supernet 10.0.0.0/11 holds 2 regions of /12",
    ),
    (
        "region block too small for its ranges",
        _set("network.region_prefix", 14),
        "network.region_prefix",
        "one region's ranges need",
    ),
    (
        "image on a floating tag",
        _set("versions.trainer_image", "us-docker.pkg.dev/meridian-train-prod/meridian/trainer:latest"),
        "versions.trainer_image",
        "is not a pinned image",
    ),
    (
        "image without a version",
        _set("versions.nccl_installer_image", "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib"),
        "versions.nccl_installer_image",
        "is not a pinned image",
    ),
    (
        "image outside the fleet registry",
        _set("versions.warden_image", "docker.io/library/warden:0.1.0" + DIGEST),
        "versions.warden_image",
        "must come from the fleet's registry us-docker.pkg.dev/meridian-train-prod/meridian/",
    ),
    (
        "unpinned component version",
        _set("versions.kueue", "latest"),
        "versions.kueue",
        "'latest' is not a pinned version",
    ),
    (
        "flex-start with a reservation",
        _set("regions.0.gpu_pools.1.capacity.reservation", "r1"),
        "regions[0].gpu_pools[1].capacity.reservation",
        "queued provisioning (flex-start) cannot consume a reservation",
    ),
    (
        "spot with a reservation",
        _set("regions.2.gpu_pools.1.capacity.reservation", "r1"),
        "regions[2].gpu_pools[1].capacity.reservation",
        "spot capacity cannot consume a reservation",
    ),
    (
        "reservation block on flex-start",
        _set("regions.0.gpu_pools.1.capacity.block", "b1"),
        "regions[0].gpu_pools[1].capacity.block",
        "a reservation block does not apply",
    ),
    (
        "reservation mode without a reservation",
        _delete("regions.1.gpu_pools.0.capacity.reservation"),
        "regions[1].gpu_pools[0].capacity.reservation",
        "mode reservation needs the reservation's name",
    ),
    (
        "unknown capacity mode",
        _set("regions.1.gpu_pools.0.capacity.mode", "preemptible"),
        "regions[1].gpu_pools[0].capacity.mode",
        "Input should be 'reservation', 'flex_start', 'spot' or 'on_demand'",
    ),
    (
        "misspelled field",
        _set("regions.0.gpu_pools.0.machine_typ", "a3-ultragpu-8g"),
        "regions[0].gpu_pools[0].machine_typ",
        "unknown field; did you mean machine_type?",
    ),
    ("missing field", _delete("project.state_bucket"), "project.state_bucket", "is required; add it"),
    ("unknown team priority", _set("teams.0.priority", "urgent"), "teams[0].priority", "unknown priority 'urgent'"),
    (
        "unknown priority ceiling",
        _set("teams.1.max_priority", "urgent"),
        "teams[1].max_priority",
        "unknown priority 'urgent'",
    ),
    (
        "priority ceiling below the default",
        _set("teams.1.max_priority", "preemptible"),
        "teams[1].max_priority",
        "preemptible is below the team's default priority standard",
    ),
    (
        "pool for an unknown team",
        _set("regions.2.gpu_pools.0.team", "pretrain"),
        "regions[2].gpu_pools[0].team",
        "unknown team 'pretrain'; did you mean pretraining?",
    ),
    ("team group is not an email", _set("teams.1.group", "research"), "teams[1].group", "is not an email address"),
    (
        "maintenance window too short",
        _set("regions.0.cluster.maintenance_window", {"days": ["SA"], "hours": 4, "start_utc": "04:00"}),
        "regions[0].cluster.maintenance_window",
        "GKE needs at least 48 hours of maintenance availability",
    ),
    (
        "exclusion ends before it starts",
        _set(
            "regions.0.cluster.maintenance_exclusions",
            [{"name": "launch", "start": "2026-12-20T00:00:00Z", "end": "2026-12-10T00:00:00Z"}],
        ),
        "regions[0].cluster.maintenance_exclusions[0].end",
        "the exclusion ends before it starts",
    ),
    (
        "NO_UPGRADES exclusion over 30 days",
        _set(
            "regions.0.cluster.maintenance_exclusions",
            [
                {
                    "name": "launch",
                    "start": "2026-12-01T00:00:00Z",
                    "end": "2027-01-15T00:00:00Z",
                    "scope": "NO_UPGRADES",
                }
            ],
        ),
        "regions[0].cluster.maintenance_exclusions[0].end",
        "lasts at most 30 days in GKE, this one 45",
    ),
    (
        "exclusion time without a zone",
        _set(
            "regions.0.cluster.maintenance_exclusions",
            [{"name": "launch", "start": "2026-12-01T00:00:00", "end": "2026-12-02T00:00:00Z"}],
        ),
        "regions[0].cluster.maintenance_exclusions[0].start",
        "Input should have timezone info",
    ),
    (
        "duplicate priority value",
        _set("priorities.3.value", 1000),
        "priorities[2].value",
        "priority value '1000' is used 2 times",
    ),
    (
        "negative node count",
        _set("regions.0.gpu_pools.0.nodes", -1),
        "regions[0].gpu_pools[0].nodes",
        "greater than or equal to 1",
    ),
    # Address ranges GKE cannot use (issue 15); the regions' own in RESERVED_RANGES below.
    (
        "everything as supernet",
        _set("network.supernet", "0.0.0.0/0"),
        "network.supernet",
        "0.0.0.0/0 overlaps 0.0.0.0/8",
    ),
    (
        "range written as a number",
        _set("regions.0.network", {"nodes": 167772160}),
        "regions[0].network.nodes",
        "is not an IPv4 range; write it in CIDR form as text",
    ),
    # Names the APIs would refuse.
    (
        "team namespace too long",
        _set("teams.2.name", "e" * 60),
        "teams[2].name",
        f"the derived namespace 'team-{'e' * 60}' is longer than Kubernetes' DNS-1123 label's 63 characters",
    ),
    (
        "team service account too long",
        _set("teams.2.name", "evaluation-team-x"),
        "teams[2].name",
        "service account id 'meridian-team-evaluation-team-x' is longer than IAM's 30 characters (31)",
    ),
    (
        "checkpoint bucket too long for a region",
        _set("buckets.checkpoint_prefix", "c" * 55),
        "buckets.checkpoint_prefix",
        "-us-central1' is longer than Cloud Storage's 63 characters (67)",
    ),
    (
        "bucket starting with goog",
        _set("project.state_bucket", "goog-tfstate"),
        "project.state_bucket",
        "Cloud Storage refuses bucket names that start with 'goog' or contain 'google'",
    ),
    (
        "bucket containing google",
        _set("buckets.datasets.0.name", "my-google-data"),
        "buckets.datasets[0].name",
        "Cloud Storage refuses bucket names that start with 'goog' or contain 'google'",
    ),
    (
        "maintenance day listed twice",
        _set("regions.0.cluster.maintenance_window.days", ["SA", "SU", "SA"]),
        "regions[0].cluster.maintenance_window.days[2]",
        "SA is listed twice; list each day once",
    ),
    # Strings where numbers are meant: no silent conversion.
    (
        "node count as a string",
        _set("regions.0.gpu_pools.0.nodes", "384"),
        "regions[0].gpu_pools[0].nodes",
        "must be a whole number, not str '384'; write it without quotes",
    ),
    (
        "prefix as a boolean",
        _set("network.pod_prefix", True),
        "network.pod_prefix",
        "must be a whole number, not bool True; write a whole number",
    ),
    (
        "switch as a string",
        _set("warden.dry_run", "yes"),
        "warden.dry_run",
        "must be true or false, not str 'yes'; write it without quotes",
    ),
    (
        "share as a string",
        _set("warden.unhealthy_share_limit", "0.05"),
        "warden.unhealthy_share_limit",
        "must be a number, not str '0.05'",
    ),
    (
        "quota as a string",
        _set("teams.0.quota.us-central1", "2560"),
        "teams[0].quota.us-central1",
        "must be a whole number, not str '2560'",
    ),
    (
        "priority value as a float",
        _set("priorities.0.value", 100000.0),
        "priorities[0].value",
        "must be a whole number, not float 100000.0",
    ),
    # GitOps revisions that git or Argo CD would misread.
    (
        "revision with a control character",
        _set("gitops.revision", "main\x1b[2J"),
        "gitops.revision",
        "is not a git revision",
    ),
    ("revision with a space", _set("gitops.revision", "main branch"), "gitops.revision", "is not a git revision"),
    (
        "revision that reads as an option",
        _set("gitops.revision", "--upload-pack=touch /tmp/x"),
        "gitops.revision",
        "not starting with '-'",
    ),
    ("revision with a newline", _set("gitops.revision", "main\nHEAD"), "gitops.revision", "is not a git revision"),
]

# A region's range that overlaps what GKE or the host reserves (issue 15): region, range, value, the message.
RESERVED_RANGES = [
    (0, "nodes", "127.0.0.0/20", "127.0.0.0/20 overlaps 127.0.0.0/8, loopback"),
    (0, "gvnic", "169.254.0.0/20", "overlaps 169.254.0.0/16, link-local"),
    (1, "pods", "224.0.0.0/13", "overlaps 224.0.0.0/4, multicast"),
    (0, "services", "0.0.0.0/20", "overlaps 0.0.0.0/8"),
    (0, "control_plane", "255.255.255.240/28", "overlaps 255.255.255.255/32, the broadcast address"),
    (2, "nodes", "172.17.0.0/20", "overlaps 172.17.0.0/16, the Docker bridge range GKE reserves"),
]
CASES += [
    (f"{kind} range {cidr}", _set(f"regions.{i}.network", {kind: cidr}), f"regions[{i}].network.{kind}", words)
    for i, kind, cidr, words in RESERVED_RANGES
]


@pytest.mark.parametrize(("mutate", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_spec_gives_one_clear_line(
    spec: Spec,
    write_spec: Callable[[Spec], Path],
    capsys: pytest.CaptureFixture[str],
    mutate: Callable[[Spec], None],
    path: str,
    words: str,
) -> None:
    mutate(spec)
    file = write_spec(spec)
    assert main(["plan", "--fleet", str(file)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    prefix = f"error: {file}:"
    assert lines[0].startswith(prefix), lines[0]
    line_no, _, rest = lines[0].removeprefix(prefix).partition(": ")
    assert line_no.isdigit()
    assert rest.startswith(f"{path}: "), rest
    assert words in rest


def test_at_least_fifteen_distinct_invalid_specs() -> None:
    assert len({c[2] for c in CASES}) >= 15


def test_line_number_points_at_the_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import SHIPPED

    text = SHIPPED.read_text().replace("zone: us-east4-b", "zone: us-east4-z")
    file = tmp_path / "fleet.yaml"
    file.write_text(text)
    bad_line = next(n for n, line in enumerate(text.splitlines(), 1) if "us-east4-z" in line)
    assert main(["plan", "--fleet", str(file)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {file}:{bad_line}: regions[1].gpu_pools[0].zone: ")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "the spec must be a YAML mapping"),
        ("", "the spec must be a YAML mapping"),
        ("name: a\nname: b\n", "name: key appears twice"),
    ],
    ids=["syntax error", "a list", "empty file", "duplicate key"],
)
def test_unreadable_documents(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str) -> None:
    file = tmp_path / "fleet.yaml"
    file.write_text(text)
    assert main(["plan", "--fleet", str(file)]) == 2
    err = capsys.readouterr().err
    assert words in err
    assert "Traceback" not in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--fleet", str(tmp_path / "nope.yaml")]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {tmp_path / 'nope.yaml'}: no such file; pass the fleet spec's path (FLEET=path/to/fleet.yaml)\n"
    )


def test_installed_command_exits_2_without_traceback(spec: Spec, write_spec: Callable[[Spec], Path]) -> None:
    spec["regions"][0]["zones"][0] = "us-central1-q"
    file = write_spec(spec)
    meridian = Path(sys.executable).parent / "meridian"
    result = subprocess.run([meridian, "plan", "--fleet", file], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert "regions[0].zones[0]: zone 'us-central1-q' is not in us-central1" in result.stderr


def test_rdma_pools_in_two_zones_are_rejected(
    spec: Spec, write_spec: Callable[[Spec], Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from fleet import catalog

    ultra = catalog.MACHINE_TYPES["a3-ultragpu-8g"]
    wider = dataclasses.replace(ultra, zones=frozenset({*(ultra.zones or ()), "us-central1-c"}))
    monkeypatch.setitem(catalog.MACHINE_TYPES, "a3-ultragpu-8g", wider)
    spec["regions"][0]["gpu_pools"][1]["zone"] = "us-central1-c"
    assert main(["plan", "--fleet", str(write_spec(spec))]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "regions[0].gpu_pools[1].zone: A3 Ultra pools of us-central1 span zones us-central1-b, us-central1-c" in line
