"""Network isolation of team namespaces, proved with a real NetworkPolicy analyzer over every cluster's tree.

network-config-analyzer (`nca`, its own virtualenv from requirements/nca.lock) computes who may connect
to whom from every NetworkPolicy Argo CD would apply in each cluster, for representative pods: in each
team namespace a run across regions (Ray head, Ray worker, its Lighthouse); GMP's collector, the KubeRay
operator, Kueue's controller and Warden in their namespaces; a pod in `default`. Its pairwise report
(`--output_format txt_no_fw_rules`) is read back and checked: no path between teams, the run's paths open.

Pods in the other regions are not in a cluster's objects: the analyzer reports them as the address ranges
that reach a pod. Every team's pods in another region take their addresses from that region's one pod
range, so a pod of another team there (and one of the same team) is an address in it; the tests ask which
ports of a run's pods each such address reaches: the run's named ports between regions, nothing else.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from contract.names import (
    CROSS_REGION_PORTS,
    LIGHTHOUSE_PORT,
    MANAGER_PORT,
    RAY_NODE_TYPE_LABEL,
    RING_TLS_PORTS,
    RUN_LABEL,
    TEAM_LABEL,
    TRAINER_METRICS_PORT,
    TRAINER_METRICS_PORTS,
)
from fleet import names
from fleet.gitops.check import ClusterTree
from fleet.gitops.netpol import NAMESPACE_NAME_LABEL, RAY_DASHBOARD_PORT, RAY_HEAD_PORTS
from fleet.gitops.teams import researcher_role
from fleet.gitops.validate import Finding
from fleet.load import load
from fleet.model import Fleet
from fleet.planner import peer_pod_ranges
from tests.conftest import SHIPPED

NCA = Path(sys.executable).parent / "nca"
pytestmark = pytest.mark.skipif(not NCA.is_file(), reason="network-config-analyzer (nca) is absent: run make setup")

# Platform pods, as their charts label them (the policies' selectors must match these, not the reverse).
PLATFORM_PODS = {
    "collector": ("gmp-system", {"app.kubernetes.io/name": "collector", "app": "managed-prometheus-collector"}),
    "kuberay": ("ray-system", {"app.kubernetes.io/name": "kuberay-operator"}),
    "kueue": ("kueue-system", {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"}),
    "warden": (names.WARDEN_NAMESPACE, {"app.kubernetes.io/name": "warden"}),
    "stranger": ("default", {"app": "anything"}),
}
# The ports a run serves to other regions (contract.names: the Lighthouse, heal transfers, Managers, the ring).
CROSS_REGION = frozenset(port for ports in CROSS_REGION_PORTS for port in ports)
# Ports of a run that must stay in its region: plain servers and sockets chosen at run time.
PLAIN_PORTS = {
    "ray": (*RAY_HEAD_PORTS, 8080, 52365),  # GCS, dashboard, client; metrics export, dashboard agent
    "metrics": tuple(TRAINER_METRICS_PORTS),
    "stores": tuple(range(RING_TLS_PORTS.start - len(RING_TLS_PORTS), RING_TLS_PORTS.start)),  # tls_ring's TCPStores
    "rendezvous": (29500,),  # torch's MASTER_PORT: a sharded group's own store
    "any": (
        1,
        22,
        80,
        443,
        29509,
        29511,
        29664,
        32768,
        40000,
        60999,
        65535,
    ),  # e.g. gloo, NCCL, a heal server on port 0
}
# A sample: Ray's head ports, the Lighthouse's, the trainer's metrics, a Manager's, a rendezvous, an ephemeral one.
SAMPLE_PORTS = (*RAY_HEAD_PORTS, LIGHTHOUSE_PORT, TRAINER_METRICS_PORT, MANAGER_PORT, 29500, 40000)
LINE = re.compile(r"^(?P<src>\S+) => (?P<dst>\S+) : (?P<conn>.+)$")
Trees = dict[str, tuple[ClusterTree, list[Finding]]]


@dataclass(frozen=True)
class Conn:
    """One line of nca's report: all traffic, or TCP to some ports (None: every TCP port)."""

    everything: bool
    tcp_ports: frozenset[int] | None = None

    def allows(self, port: int) -> bool:
        return self.everything or self.tcp_ports is None or port in self.tcp_ports

    @classmethod
    def parse(cls, text: str) -> Conn:
        """ "All connections" or "{protocols:TCP,dst_ports:8265-8266,9464}" (nca's txt output)."""
        if text == "All connections":
            return cls(True)
        fields: dict[str, list[str]] = {}
        key = ""
        for token in text.strip("{}").split(","):
            if ":" in token:
                key, token = token.split(":", 1)
            fields.setdefault(key, []).append(token)
        assert fields.get("protocols") == ["TCP"], f"nca reported a connection this test does not read: {text}"
        if "dst_ports" not in fields:
            return cls(False, None)
        ports: set[int] = set()
        for item in fields["dst_ports"]:
            low, _, high = item.partition("-")
            ports.update(range(int(low), int(high or low) + 1))
        return cls(False, frozenset(ports))


def _ip_range(endpoint: str) -> tuple[int, int] | None:
    """An address range endpoint ("10.16.0.0-10.23.255.255") as integers; None for a pod."""
    if "[" in endpoint:
        return None
    low, high = endpoint.split("-")
    return int(ipaddress.IPv4Address(low)), int(ipaddress.IPv4Address(high))


@dataclass
class Report:
    pods: dict[tuple[str, str], Conn]  # ("ns/pod", "ns/pod") -> what may pass; absent: nothing
    from_ips: dict[str, list[tuple[tuple[int, int], Conn]]]  # "ns/pod" -> the address ranges that reach it
    text: str

    def conn(self, src: str, dst: str) -> Conn | None:
        return self.pods.get((src, dst))

    def reachers(self, dst: str, port: int) -> list[tuple[int, int]]:
        return sorted(span for span, conn in self.from_ips.get(dst, []) if conn.allows(port))

    def ports_from(self, address: int, dst: str) -> frozenset[int] | None:
        """The TCP ports of ``dst`` that ``address`` reaches (None: every port, or more than TCP)."""
        ports: set[int] = set()
        for (low, high), conn in self.from_ips.get(dst, []):
            if low <= address <= high:
                if conn.everything or conn.tcp_ports is None:
                    return None
                ports |= conn.tcp_ports
        return frozenset(ports)


def parse_report(text: str) -> Report:
    report = Report({}, {}, text)
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if match is None:
            continue
        conn = Conn.parse(match["conn"])
        src, dst = (e.removesuffix("[Pod]") for e in (match["src"], match["dst"]))
        span = _ip_range(match["src"])
        if span is not None:
            report.from_ips.setdefault(dst, []).append((span, conn))
        elif _ip_range(match["dst"]) is None:
            report.pods[(src, dst)] = conn
    return report


def _namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    # The API server puts the name label on every Namespace; namespaceSelectors match it.
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**(labels or {}), NAMESPACE_NAME_LABEL: name}},
    }


def _pod(name: str, namespace: str, labels: dict[str, str]) -> dict[str, object]:
    container = {"name": "main", "image": "example"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [container]},
    }


def team_pods(fleet: Fleet) -> dict[str, dict[str, str]]:
    """team -> role -> "ns/pod": a run across regions in every team namespace, and a pod of no run ("job")."""
    roles = ("head", "worker", "lighthouse", "job")
    return {t.name: {role: f"{names.team_namespace(t.name)}/{t.name}-{role}" for role in roles} for t in fleet.teams}


def _resources(fleet: Fleet, tree: ClusterTree) -> list[dict[str, object]]:
    built = {o["metadata"]["name"]: o for _, o in tree.objects() if o.get("kind") == "Namespace"}
    namespaces = [_namespace(n, o["metadata"].get("labels")) for n, o in sorted(built.items())]
    namespaces += [_namespace(ns) for ns in sorted({ns for ns, _ in PLATFORM_PODS.values()} - set(built))]
    pods = [_pod(name, ns, labels) for name, (ns, labels) in PLATFORM_PODS.items()]
    for team in fleet.teams:
        namespace = names.team_namespace(team.name)
        run = {TEAM_LABEL: team.name, RUN_LABEL: f"{team.name}-run"}
        pods += [
            _pod(f"{team.name}-head", namespace, {**run, RAY_NODE_TYPE_LABEL: "head"}),
            _pod(f"{team.name}-worker", namespace, {**run, RAY_NODE_TYPE_LABEL: "worker"}),
            _pod(f"{team.name}-lighthouse", namespace, run),
            _pod(f"{team.name}-job", namespace, {TEAM_LABEL: team.name}),
        ]
    return namespaces + pods


def analyzer_reports(fleet: Fleet, trees: Trees, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Report]:
    """region -> nca's connectivity report over every NetworkPolicy in that cluster's built tree (conftest's
    `reports`: one analysis per session, read by this module and test_warden_network.py)."""
    out = {}
    for region in fleet.regions:
        tree, _ = trees[region.name]
        folder = tmp_path_factory.mktemp(f"nca-{region.name}")
        policies = [o for _, o in tree.objects() if o.get("kind") == "NetworkPolicy"]
        (folder / "policies.yaml").write_text(yaml.safe_dump_all(policies))
        (folder / "resources.yaml").write_text(yaml.safe_dump_all(_resources(fleet, tree)))
        command = [
            str(NCA),
            "--connectivity",
            "policies.yaml",
            "-r",
            "resources.yaml",
            "--output_format",
            "txt_no_fw_rules",
        ]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"nca failed in {region.name}: {done.stderr[-2000:]}"
        out[region.name] = parse_report(done.stdout)
    return out


def test_the_report_covers_every_cluster_and_pod(fleet: Fleet, reports: dict[str, Report]) -> None:
    """The analyzer saw the pods: a report that lists nothing would pass every 'closed' check below."""
    assert set(reports) == {r.name for r in fleet.regions}
    for region, report in reports.items():
        for pods in team_pods(fleet).values():
            assert report.conn(pods["head"], pods["worker"]) is not None, f"{region}: {report.text}"


def test_no_path_from_one_team_to_another(fleet: Fleet, reports: dict[str, Report]) -> None:
    pods = team_pods(fleet)
    for region, report in reports.items():
        for a in pods:
            for b in pods:
                if a == b:
                    continue
                open_ = [(s, d, c) for s in pods[a].values() for d in pods[b].values() if (c := report.conn(s, d))]
                assert not open_, f"{region}: team {a} reaches team {b}: {open_}"


def test_a_runs_own_paths_stay_open(fleet: Fleet, reports: dict[str, Report]) -> None:
    """Head and workers on every port (GCS, dashboard, client, raylets, NCCL, gloo); the Lighthouse's port."""
    for region, report in reports.items():
        for team, pods in team_pods(fleet).items():
            for src, dst in [("head", "worker"), ("worker", "head"), ("worker", "lighthouse"), ("head", "lighthouse")]:
                conn = report.conn(pods[src], pods[dst])
                assert conn == Conn(True), f"{region}/{team}: {src} -> {dst} is {conn}"


def test_platform_pods_reach_only_what_they_need(fleet: Fleet, reports: dict[str, Report]) -> None:
    """GMP's collector: the metrics port of every team pod; KubeRay: the head's dashboard; the rest: nothing."""
    for region, report in reports.items():
        for team, pods in team_pods(fleet).items():
            where = f"{region}/{team}"
            for role, pod in pods.items():
                scrape = report.conn("gmp-system/collector", pod)
                assert scrape == Conn(False, frozenset(TRAINER_METRICS_PORTS)), (
                    f"{where}: collector -> {role}: {scrape}"
                )
                for other in ("kueue", "warden", "stranger"):
                    ns = PLATFORM_PODS[other][0]
                    assert report.conn(f"{ns}/{other}", pod) is None, f"{where}: {other} reaches {role}"
            assert report.conn("ray-system/kuberay", pods["head"]) == Conn(False, frozenset({RAY_DASHBOARD_PORT}))
            assert report.conn("ray-system/kuberay", pods["worker"]) is None, where


def test_other_teams_never_reach_a_ray_heads_control_ports(fleet: Fleet, reports: dict[str, Report]) -> None:
    """The Ray head's GCS, dashboard (job API) and client ports: from the own namespace only (and KubeRay)."""
    pods = team_pods(fleet)
    for region, report in reports.items():
        for a, own in pods.items():
            for port in RAY_HEAD_PORTS:
                assert report.reachers(own["head"], port) == [], f"{region}: addresses reach {a}'s head on {port}"
                for b, theirs in pods.items():
                    for src in theirs.values() if b != a else ():
                        conn = report.conn(src, own["head"])
                        assert conn is None or not conn.allows(port), f"{region}: {src} -> {a} head:{port}"


def _spans(cidrs: list[ipaddress.IPv4Network]) -> list[tuple[int, int]]:
    return sorted((int(c.network_address), int(c.broadcast_address)) for c in cidrs)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for low, high in sorted(spans):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def test_a_run_across_regions_is_reachable_from_the_other_regions_only(
    fleet: Fleet, reports: dict[str, Report]
) -> None:
    """Other regions' pod ranges reach a run's Lighthouse and replica groups on its named ports; no other address does."""
    addresses = load(SHIPPED).addresses
    for region in fleet.regions:
        report = reports[region.name]
        peers = _merged(_spans(peer_pod_ranges(addresses, region.name)))
        for team, pods in team_pods(fleet).items():
            for role in ("lighthouse", "worker"):
                for port in SAMPLE_PORTS:
                    reached = _merged(report.reachers(pods[role], port))
                    want = peers if port in CROSS_REGION else []
                    assert reached == want, f"{region.name}/{team} {role}:{port} from {reached}, want {want}"
            for role in ("head", "job"):
                for port in SAMPLE_PORTS:
                    assert report.reachers(pods[role], port) == [], f"{region.name}/{team}: addresses reach {role}"


def other_regions_pods(fleet: Fleet, region: str) -> dict[str, int]:
    """ "<team>@<region>" -> an address: a pod of every team (this one's too) in each other region's pod range."""
    addresses = load(SHIPPED).addresses
    out = {}
    for peer in peer_pod_ranges(addresses, region):
        for i, team in enumerate(fleet.teams):
            out[f"{team.name}@{peer}"] = int(peer.network_address) + 10 + i
    return out


def test_pods_in_other_regions_reach_only_a_run_s_named_ports(fleet: Fleet, reports: dict[str, Report]) -> None:
    """Any team's pod in another region (the same team's too: an address tells no team) reaches exactly the
    ports a run across regions serves there, every one behind the run's mTLS but the Manager's (trainer README),
    on the run's Lighthouse and groups; nothing on the Ray head, on a pod of no run, or on any plain port."""
    for region in fleet.regions:
        report = reports[region.name]
        strangers = other_regions_pods(fleet, region.name)
        assert len(strangers) == len(fleet.teams) * (len(fleet.regions) - 1)
        for team, pods in team_pods(fleet).items():
            for stranger, address in strangers.items():
                where = f"{region.name}: {stranger} -> {team}"
                for role in ("lighthouse", "worker"):
                    reached = report.ports_from(address, pods[role])
                    assert reached == CROSS_REGION, f"{where} {role}: {_shown(reached)}"
                    for kind, ports in PLAIN_PORTS.items():
                        assert not set(ports) & reached, f"{where} {role}: {kind} ports {set(ports) & reached}"
                for role in ("head", "job"):
                    assert report.ports_from(address, pods[role]) == frozenset(), f"{where} {role}"


def _shown(ports: frozenset[int] | None) -> str:
    return "every port" if ports is None else f"{len(ports)} ports, extra {sorted(ports - CROSS_REGION)[:20]}"


def test_teams_cannot_change_their_network_policies() -> None:
    """The researcher role grants nothing in networking.k8s.io: the policies are the platform's."""
    groups = {group for rule in researcher_role()["rules"] for group in rule["apiGroups"]}
    assert "networking.k8s.io" not in groups
