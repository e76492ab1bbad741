"""Who reaches Warden's ports, by network-config-analyzer over every cluster's built tree (issue 39).

The attack: Warden's NetworkPolicy admitted 8080 (health) and 9090 (metrics) from anywhere, so a team pod
held a thousand idle connections to its health port. Now the metrics port admits Managed Prometheus's
collectors only and the health port no pod at all: the kubelet's probes come from the node, which a
NetworkPolicy never filters (Kubernetes, "Network Policies": traffic to and from the node where a pod
runs is always allowed; GKE Dataplane V2 is Cilium, whose `allow-localhost` "auto" becomes "always" on
Kubernetes, cilium daemon/cmd/daemon.go). nca has no node to model, so that path is the one not shown here.
"""

from __future__ import annotations

import pytest

from fleet import names
from fleet.gitops.netpol import GMP_COLLECTOR, GMP_NAMESPACE
from fleet.model import Fleet
from tests.tenancy.test_network import NCA, PLATFORM_PODS, Conn, Report, team_pods

pytestmark = pytest.mark.skipif(not NCA.is_file(), reason="network-config-analyzer (nca) is absent: run make setup")

WARDEN = f"{names.WARDEN_NAMESPACE}/warden"
METRICS_PORT, HEALTH_PORT = 9090, 8080  # kustomize/base/warden/deployment.yaml, ports "metrics" and "health"


def test_the_collector_is_managed_prometheus_as_the_team_policies_name_it() -> None:
    namespace, labels = PLATFORM_PODS["collector"]
    assert namespace == GMP_NAMESPACE
    assert GMP_COLLECTOR.items() <= labels.items()


def test_no_team_pod_reaches_wardens_ports(fleet: Fleet, reports: dict[str, Report]) -> None:
    for region, report in reports.items():
        for team, pods in team_pods(fleet).items():
            for role, pod in pods.items():
                conn = report.conn(pod, WARDEN)
                assert conn is None or not (conn.allows(METRICS_PORT) or conn.allows(HEALTH_PORT)), (
                    f"{region}: {team}'s {role} reaches Warden: {conn}"
                )


def test_only_the_collector_reaches_wardens_metrics_and_nothing_its_health(reports: dict[str, Report]) -> None:
    for region, report in reports.items():
        assert report.conn(f"{GMP_NAMESPACE}/collector", WARDEN) == Conn(False, frozenset({METRICS_PORT})), region
        for other in ("kuberay", "kueue", "stranger"):
            namespace = PLATFORM_PODS[other][0]
            assert report.conn(f"{namespace}/{other}", WARDEN) is None, f"{region}: {other} reaches Warden"
        for port in (METRICS_PORT, HEALTH_PORT):
            assert report.reachers(WARDEN, port) == [], f"{region}: addresses outside the cluster reach :{port}"
