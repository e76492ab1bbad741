"""What Google Cloud Managed Service for Prometheus (GMP) scrapes in each cluster, beside GKE's own packages.

GKE collects its managed DCGM and kube-state-metrics packages itself once the cluster enables them (infra:
cluster.py monitoring_config DCGM and POD); these objects add the trainer, Warden, Kueue and KubeRay. GMP
scrapes with PodMonitoring / ClusterPodMonitoring (monitoring.googleapis.com/v1), not the Prometheus
operator's ServiceMonitor: the charts' ServiceMonitor switches stay off.

A port given by number is scraped whether or not the pod declares it (prometheus-engine v0.17.2
pkg/operator/apis/monitoring/v1/pod_config.go: a numeric port rewrites __address__ to the pod IP): gkr's pods
declare no metrics port, and neither do the Kueue and KubeRay charts.
"""

from __future__ import annotations

from typing import Any

from contract import names
from contract.metrics import RL, TRAINER
from fleet.gitops.objects import Obj, obj

API = "monitoring.googleapis.com/v1"
INTERVAL = "30s"
KUEUE_NAMESPACE = "kueue-system"
KUBERAY_NAMESPACE = "ray-system"
# Kueue serves its metrics over HTTPS on :8443 behind Kubernetes authentication and authorization
# (kueue v0.19.2 cmd/kueue/main.go: SecureServing, filters.WithAuthenticationAndAuthorization): GMP presents this
# account's token, which may only GET /metrics.
KUEUE_SCRAPER = "gmp-kueue-scraper"
KUEUE_SCRAPER_TOKEN = f"{KUEUE_SCRAPER}-token"
KUEUE_METRICS_PORT = 8443  # charts/kueue/values.yaml v0.19.2: managerConfig metrics.bindAddress
KUBERAY_METRICS_PORT = 8080  # helm-chart/kuberay-operator values.yaml: metrics.enabled, service.port
WARDEN_METRICS_PORT = 9090  # kustomize/base/warden/deployment.yaml, port "metrics"
# The namespaces of the platform's PodMonitorings below: what they store carries one of these as `namespace`.
PLATFORM_NAMESPACES = (names.WARDEN_NAMESPACE, KUEUE_NAMESPACE, KUBERAY_NAMESPACE)
METRICS_READER = "meridian-metrics-reader"
# GMP's collectors run as this account and read the secret a PodMonitoring names themselves (prometheus-engine
# v0.17.2 examples/inference-optimized-gateway/secret.yaml grants them get, list and watch on it).
GMP_COLLECTOR = {"kind": "ServiceAccount", "name": "collector", "namespace": "gmp-system"}
RAY_NODE_TYPE_LABEL = names.RAY_NODE_TYPE_LABEL


def _endpoint(port: int, **extra: Any) -> dict[str, Any]:
    return {"port": port, "interval": INTERVAL, **extra}


TEAM_NAMESPACE_PREFIX = names.team_namespace("")
# The team label every trainer series gets: the scraped pod's namespace without its prefix, never what the pod or
# the exporter claims. `namespace` is the one label neither can forge: GMP sets it from the pod's real namespace
# and refuses metric relabelling onto it (prometheus-engine v0.17.2 pod_config.go: protectedLabel, and
# "Force target labels, so they cannot be overwritten by metric labels"); with honor_labels off, an exporter's own
# `namespace` or `pod` label is renamed exported_<name> (Prometheus configuration docs, honor_labels).
TEAM = "team"
# gkr's job label on the pod (contract.names.JOB_LABEL), as every trainer series carries it: the run alerts keep it, so a
# runbook selects the run's pods with `-l meridian.dev/job=...` (a run's name is the team's config, not a pod label).
JOB = "meridian_job"


# What a team pod may put in the store: the families the trainer and the RL controller (served by the process that
# commits the steps, trainer.rl.metrics) export. Everything else a team pod serves on these ports is dropped at the
# scrape, so no team can write a series named like Warden's, Kueue's or kube-state-metrics' (issue 39).
TEAM_CATALOGS = (TRAINER, RL)


def team_series() -> tuple[str, ...]:
    """Every series name the team's families expose, as prometheus_client 0.26 (requirements/*.lock) writes them.

    A counter is exposed as the catalog's `_total` name, a histogram as `_bucket`, `_sum` and `_count`
    (Metric.series); `_created` is not exposed (telemetry turns it off), so it is not kept either.
    """
    return tuple(s for catalog in TEAM_CATALOGS for m in catalog for s in m.series())


def team_names() -> dict[str, Any]:
    """The `keep` on `__name__`: an alternation of the exact names (Prometheus anchors relabel regexes).

    The GMP CRD's field: ClusterPodMonitoring v1 spec.endpoints[].metricRelabeling, whose `action` enum admits
    keep (and replace, lowercase, uppercase, drop, keepequal, dropequal, hashmod, labeldrop, labelkeep; never
    labelmap) and whose `regex` is at most 10,000 characters (prometheus-engine v0.17.2
    monitoring.googleapis.com_clusterpodmonitorings.yaml; pod_config.go convertRelabelingRule accepts a keep
    unconditionally: it changes no label). Prometheus applies metric relabelling to every scraped sample but not
    to the series it adds itself (scrape.go mutateReportSampleLabels): a team's target still has its own `up`.
    """
    return {"action": "keep", "sourceLabels": ["__name__"], "regex": "|".join(team_series())}


def trainer_relabeling() -> list[dict[str, Any]]:
    """metricRelabeling of the trainer's series: team from namespace, and nothing a tenant wrote that says otherwise.

    A run's name stays the exporter's (the team chooses it); every query that keys on `run` also keys on
    `namespace` (queries.run_scoping), so two teams' runs of one name never merge.
    """
    team_namespace = f"{TEAM_NAMESPACE_PREFIX}(.+)"
    return [
        # Only the trainer's and the RL controller's names: first, so nothing else costs a relabelling step.
        team_names(),
        # A pod outside a team namespace that carries the team label is nobody's trainer.
        {"action": "keep", "sourceLabels": ["namespace"], "regex": team_namespace},
        # Overwrites any `team` the exporter wrote (replace always writes when its regex matched, as here).
        {"action": "replace", "sourceLabels": ["namespace"], "regex": team_namespace, "targetLabel": TEAM},
        # The exporter's copies of target labels (exported_namespace, exported_pod...) claim nothing but confuse.
        {"action": "labeldrop", "regex": "exported_.+"},
    ]


def trainer() -> Obj:
    """Every team pod but Ray heads (the trainer's groups report from the workers), in every namespace.

    The pod's namespace and name stay on each series: the stuck-run alert joins them with kube-state-metrics'
    pod phase. `team` comes from the namespace (trainer_relabeling), never from the pod's team label, which its
    author writes; the job label gkr sets travels along as `meridian_job` (a name inside the namespace only).
    """
    return obj(
        API,
        "ClusterPodMonitoring",
        "meridian-trainer",
        spec={
            "selector": {
                "matchExpressions": [
                    {"key": names.TEAM_LABEL, "operator": "Exists"},
                    {"key": RAY_NODE_TYPE_LABEL, "operator": "NotIn", "values": ["head"]},
                ]
            },
            # One endpoint per slot: each replica group of a node serves on its own port (names.TRAINER_METRICS_PORTS).
            "endpoints": [
                _endpoint(port, metricRelabeling=trainer_relabeling()) for port in names.TRAINER_METRICS_PORTS
            ],
            "targetLabels": {
                "metadata": ["namespace", "pod", "node"],
                "fromPod": [{"from": names.JOB_LABEL, "to": JOB}],
            },
        },
    )


def _pod_monitoring(name: str, namespace: str, labels: dict[str, str], endpoint: dict[str, Any]) -> Obj:
    return obj(
        API,
        "PodMonitoring",
        name,
        namespace,
        spec={
            "selector": {"matchLabels": labels},
            "endpoints": [endpoint],
            "targetLabels": {"metadata": ["pod", "container"]},
        },
    )


def kueue_access() -> list[Obj]:
    """The scraper account, its long-lived token, its right to GET /metrics, and GMP's right to read the token."""
    rbac = "rbac.authorization.k8s.io/v1"
    scraper = {"kind": "ServiceAccount", "name": KUEUE_SCRAPER, "namespace": KUEUE_NAMESPACE}
    return [
        obj("v1", "ServiceAccount", KUEUE_SCRAPER, KUEUE_NAMESPACE, automountServiceAccountToken=False),
        obj(
            "v1",
            "Secret",
            KUEUE_SCRAPER_TOKEN,
            KUEUE_NAMESPACE,
            annotations={"kubernetes.io/service-account.name": KUEUE_SCRAPER},
            type="kubernetes.io/service-account-token",
        ),
        obj(rbac, "ClusterRole", METRICS_READER, rules=[{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        obj(
            rbac,
            "ClusterRoleBinding",
            KUEUE_SCRAPER,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER},
            subjects=[scraper],
        ),
        obj(
            rbac,
            "Role",
            "gmp-read-kueue-scraper-token",
            KUEUE_NAMESPACE,
            rules=[
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": [KUEUE_SCRAPER_TOKEN],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        ),
        obj(
            rbac,
            "RoleBinding",
            "gmp-read-kueue-scraper-token",
            KUEUE_NAMESPACE,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gmp-read-kueue-scraper-token"},
            subjects=[GMP_COLLECTOR],
        ),
    ]


def scrape_objects() -> list[Obj]:
    kueue = _endpoint(
        KUEUE_METRICS_PORT,
        scheme="https",
        # The serving certificate is Kueue's self-signed one (no cert-manager here); the token still authenticates.
        tls={"insecureSkipVerify": True},
        authorization={"type": "Bearer", "credentials": {"secret": {"name": KUEUE_SCRAPER_TOKEN, "key": "token"}}},
    )
    return [
        trainer(),
        _pod_monitoring(
            "warden", names.WARDEN_NAMESPACE, {"app.kubernetes.io/name": "warden"}, _endpoint(WARDEN_METRICS_PORT)
        ),
        _pod_monitoring(
            "kueue",
            KUEUE_NAMESPACE,
            {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"},
            kueue,
        ),
        _pod_monitoring(
            "kuberay-operator",
            KUBERAY_NAMESPACE,
            {"app.kubernetes.io/name": "kuberay-operator"},
            _endpoint(KUBERAY_METRICS_PORT),
        ),
        *kueue_access(),
    ]
