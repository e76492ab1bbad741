"""A run across regions: the example's dry run, its checks, and submit/status/logs/delete against one fake API server per cluster.

Each fake cluster keeps what was applied to it (server-side apply echoes the object), lists by label
selector, gives the Lighthouse Service an internal load balancer IP after a few reads, and can be told
to refuse one request: enough to check the exact requests, their order, the wait and the rollback.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import Result

from contract import names
from fleet.load import load
from gkr import launch, lighthouse
from tests.conftest import REPO, SHIPPED
from tests.gkr.conftest import EXAMPLES, registry_folder, use_contexts
from tests.gkr.test_kube import FakeApiServer

EXAMPLE = str(EXAMPLES / "cross-region.yaml")
CENTRAL = "gke_meridian-train-prod_us-central1_meridian-us-central1"
EAST4 = "gke_meridian-train-prod_us-east4_meridian-us-east4"
NS = "/namespaces/team-research"
RUN = "llama-8b-xregion"
IP = "10.0.7.9"
SERVICE_PATH = f"/api/v1{NS}/services/{RUN}-lighthouse"
DEPLOYMENT_PATH = f"/apis/apps/v1{NS}/deployments/{RUN}-lighthouse"
RAYJOB_PATH = f"/apis/ray.io/v1{NS}/rayjobs/{RUN}"
LIGHTHOUSE_TLS_PATH = f"/api/v1{NS}/secrets/{RUN}-lighthouse-tls"
MEMBER_TLS_PATH = f"/api/v1{NS}/secrets/{RUN}-member-tls"
LIGHTHOUSE_PATHS = [LIGHTHOUSE_TLS_PATH, DEPLOYMENT_PATH, SERVICE_PATH]  # in the order submit creates them
MEMBER_PATHS = [MEMBER_TLS_PATH, RAYJOB_PATH]


class Cluster(ThreadingHTTPServer):
    """One fake cluster's state."""

    def __init__(self, context: str, log: list[dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), RunServer)
        self.context, self.log = context, log
        self.store: dict[str, dict[str, Any]] = {}
        self.reads_before_ip = 2  # the Service has no IP for this many reads (-1: never)
        self.refuse: str | None = None  # a path whose PATCH fails with 500


class RunServer(FakeApiServer):
    server: Cluster

    def _note(self) -> dict[str, Any]:
        request = self._record()
        FakeApiServer.requests.pop()  # kept per cluster instead, in one ordered log
        request["cluster"] = self.server.context
        self.server.log.append(request)
        return request

    def _status(self, code: int, reason: str) -> None:
        self._reply({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}, code)

    def do_PATCH(self) -> None:
        request = self._note()
        if self.server.refuse == request["path"]:
            self._status(500, "InternalError")
            return
        self.server.store[request["path"]] = request["body"]
        self._reply(request["body"])

    def do_GET(self) -> None:
        request = self._note()
        path, store = request["path"], self.server.store
        if path in store:
            obj = json.loads(json.dumps(store[path]))
            if obj["kind"] == "Service":
                reads = self.server.reads_before_ip
                self.server.reads_before_ip = reads - 1 if reads > 0 else reads
                obj["status"] = {"loadBalancer": {"ingress": [{"ip": IP}]} if reads == 0 else {}}
            if obj["kind"] == "RayJob":
                obj["status"] = {"jobDeploymentStatus": "Running"}
            self._reply(obj)
        elif path.endswith(("/rayjobs", "/deployments", "/services", "/pods", "/secrets")):
            selector = request["query"].get("labelSelector", [""])[0]
            wanted = dict(s.split("=", 1) for s in selector.split(",") if "=" in s)
            items = [
                o
                for p, o in store.items()
                if p.rsplit("/", 1)[0] == path
                and all(o["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
            ]
            self._reply({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})
        elif path.endswith("/log"):
            data = f"step 1 in {self.server.context}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._status(404, "NotFound")

    def do_DELETE(self) -> None:
        request = self._note()
        if self.server.store.pop(request["path"], None) is None:
            self._status(404, "NotFound")
        else:
            self._reply({"kind": "Status", "apiVersion": "v1", "status": "Success"})


@pytest.fixture
def clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Cluster]]:
    """us-central1 and us-east4, each its own fake server, both in one kubeconfig under GKE's context names."""
    log: list[dict[str, Any]] = []
    found = {context: Cluster(context, log) for context in (CENTRAL, EAST4)}
    for cluster in found.values():
        threading.Thread(target=cluster.serve_forever, daemon=True).start()
    use_contexts(tmp_path, monkeypatch, {c: f"http://127.0.0.1:{s.server_port}" for c, s in found.items()})
    monkeypatch.setattr(launch, "POLL_S", 0.01)
    yield found
    for cluster in found.values():
        cluster.shutdown()


def calls(clusters: dict[str, Cluster]) -> list[tuple[str, str, str]]:
    log = next(iter(clusters.values())).log
    return [(r["cluster"].split("_")[2], r["method"], r["path"]) for r in log]


def each(region: str, method: str, paths: list[str]) -> list[tuple[str, str, str]]:
    """The calls `calls` lists for these paths in one region, in this order."""
    return [(region, method, path) for path in paths]


def rolled_back(*regions: str) -> list[tuple[str, str, str]]:
    """The deletes of a rollback, newest first: each region's members (latest region first), then the Lighthouse."""
    members = [call for region in regions for call in each(region, "DELETE", MEMBER_PATHS[::-1])]
    return members + each("us-central1", "DELETE", LIGHTHOUSE_PATHS[::-1])


def env_of(rayjob: dict[str, Any]) -> dict[str, str]:
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in head["env"]}


# --- the dry run ---------------------------------------------------------------------------------


def test_dry_run_prints_every_cluster_and_validates_against_the_pinned_schemas(gkr: Callable[..., Result]) -> None:
    result = gkr("submit", "-f", EXAMPLE, "--dry-run", "-o", "json")
    assert result.exit_code == 0, result.stderr
    per_cluster = json.loads(result.stdout)
    assert {c: [o["kind"] for o in objs] for c, objs in per_cluster.items()} == {
        CENTRAL: ["Secret", "Deployment", "Service", "Secret", "RayJob"],
        EAST4: ["Secret", "RayJob"],
    }
    # gkr checked each RayJob against the pinned KubeRay schema of the registry; the built-in kinds against
    # Kubernetes' own schemas of the fleet's version here (strict: no unknown field).
    version = load(SHIPPED).fleet.versions.kubernetes
    for objects in per_cluster.values():
        for obj in objects:
            if obj["kind"] in ("Deployment", "Service", "Secret"):
                kubernetes_validate.validate(obj, version, strict=True)
    lighthouse_tls, deployment, service, central_tls, central = per_cluster[CENTRAL]
    east_tls, east = per_cluster[EAST4]
    # A dry run shows where the run's certificates go, never a key: they are minted when the run is applied.
    for secret in (lighthouse_tls, central_tls, east_tls):
        assert set(secret["stringData"].values()) == {"<minted by gkr at submit>"}
    # One Lighthouse, CPU only, non-root, read-only, in the team's queue; an internal LB with global access.
    # It listens on its pod's loopback; the Service port is the mTLS proxy's, with the Lighthouse's identity.
    pod = deployment["spec"]["template"]["spec"]
    container, proxy = pod["containers"]
    assert container["command"] == ["torchft_lighthouse", "--min_replicas", "1", "--bind", "127.0.0.1:29511"]
    assert "ports" not in container
    assert proxy["command"][:5] == [
        "python",
        "-m",
        "trainer.distributed.mtls",
        "--listen-host",
        f"$({names.POD_IP_ENV})",
    ]
    assert proxy["env"] == [{"name": names.POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    assert proxy["ports"][0]["containerPort"] == names.LIGHTHOUSE_PORT
    assert pod["volumes"] == [
        {"name": "run-tls", "secret": {"secretName": f"{RUN}-lighthouse-tls", "defaultMode": 0o444}}
    ]
    assert "nvidia.com/gpu" not in json.dumps(pod["containers"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["nodeSelector"] == {names.NODE_POOL_LABEL: "cpu"}
    assert deployment["spec"]["template"]["metadata"]["labels"][names.QUEUE_LABEL] == "research"
    assert service["metadata"]["annotations"] == {
        names.INTERNAL_LB_ANNOTATION: "Internal",
        names.GLOBAL_ACCESS_ANNOTATION: "true",
    }
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/13", "10.16.0.0/13"]  # the two regions' pods
    # Each region's RayJob: the run id, its region, the (placeholder) Lighthouse, the other region's checkpoints.
    for rayjob, region, other in ((central, "us-central1", "us-east4"), (east, "us-east4", "us-central1")):
        labels = rayjob["metadata"]["labels"]
        assert (labels[names.RUN_LABEL], labels[names.REGION_LABEL]) == (RUN, region)
        env = env_of(rayjob)
        assert env[names.RUN_ID_ENV] == RUN
        assert env[names.REGION_ENV] == region
        assert env[names.LIGHTHOUSE_ENV] == f"http://{lighthouse.PLACEHOLDER_HOST}:29510"
        assert env[names.RESUME_FROM_ENV] == f"gs://meridian-ckpt-{other}/teams/research/{RUN}"
        assert env[names.RUN_TLS_ENV] == names.RUN_TLS_DIR  # the members' identity, mounted from the region's Secret
        assert {"name": "run-tls", "secret": {"secretName": f"{RUN}-member-tls", "defaultMode": 0o444}} in (
            rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"]
        )
    workers = [g["replicas"] for r in (central, east) for g in r["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
    assert workers == [5, 3]  # replica groups of one 8-GPU pod each, and each region's spare group (spare_groups: 1)
    assert "lighthouse llama-8b-xregion-lighthouse -> " + CENTRAL in result.stderr


def test_flags_make_a_run_and_one_region_stays_as_before(gkr: Callable[..., Result]) -> None:
    command = ["--", "python", "train.py", "configs/config.yaml", "optim=diloco", "run.name=x"]
    base = ("submit", "--name", "x", "--team", "research", "--dry-run", "-o", "json")
    run = gkr(*base, "--region", "us-east4=2", "--region", "europe-west1=1", "--home", "europe-west1", *command)
    assert run.exit_code == 0, run.stderr
    per_cluster = json.loads(run.stdout)
    assert [o["kind"] for o in per_cluster["gke_meridian-train-prod_europe-west1_meridian-europe-west1"]] == [
        "Secret",
        "Deployment",
        "Service",
        "Secret",
        "RayJob",
    ]
    one = gkr(*base, "--region", "us-east4", *command)
    assert one.exit_code == 0, one.stderr
    assert json.loads(one.stdout)["kind"] == "RayJob"
    assert names.RUN_LABEL not in json.loads(one.stdout)["metadata"]["labels"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ("--region", "us-central1=1", "--region", "us-east4=1", "--", "train.py", "run.name=x"),
            "error: flag the command after --: optimizer ddp synchronizes every step, across regions a WAN round trip each time; "
            "add optim=diloco or optim=streaming_diloco to the command, or set allow_per_step_sync: true "
            "(--force-per-step-sync)",
        ),
        (
            ("--region", "us-central1=1", "--region", "mars-north1=1", "--", "train.py", "optim=diloco", "run.name=x"),
            "error: flag --region: unknown region 'mars-north1'; use one of europe-west1, us-central1, us-east4",
        ),
        (
            ("--region", "us-central1=1", "--region", "us-central1=2", "--", "train.py", "optim=diloco", "run.name=x"),
            "error: flag --region: us-central1 is given twice; give each region once",
        ),
        (
            (
                "--region",
                "us-central1=1",
                "--region",
                "us-east4=1",
                "--home",
                "europe-west1",
                "--",
                "train.py",
                "optim=diloco",
                "run.name=x",
            ),
            "error: flag --home: 'europe-west1' is not one of the run's regions; use one of us-central1, us-east4",
        ),
        (
            (
                "--region",
                "us-central1=3",
                "--region",
                "us-east4=2",
                "--group-size",
                "4",
                "--",
                "train.py",
                "optim=diloco",
                "run.name=x",
            ),
            "error: flag --region: in us-central1: 3 replica groups x 4 GPUs = 12 GPUs do not fill whole pods of "
            "8 GPUs; use a multiple of 2",
        ),
        (
            (
                "--region",
                "us-central1=1",
                "--region",
                "us-east4=1",
                "--group-size",
                "12",
                "--",
                "train.py",
                "optim=diloco",
                "run.name=x",
            ),
            "error: flag --group-size: group_size 12 would take part of two pods of 8 GPUs; a group fits in one pod "
            "or is whole pods: use a divisor or a multiple of 8",
        ),
        (
            ("--region", "us-central1=200", "--region", "us-east4=1", "--", "train.py", "optim=diloco", "run.name=x"),
            "error: flag --region: in us-central1: 200 pods x 8 GPUs = 1,600 GPUs, above team research's quota "
            "of 1,024 in us-central1",
        ),
        (
            ("--region", "us-central1=1", "--", "train.py", "optim=diloco", "run.name=x"),
            "error: flag --region: a run across regions names at least two; for one, use region: and pods:",
        ),
        (
            ("--region", "us-central1=1", "--region", "us-east4=x", "--", "train.py", "optim=diloco"),
            "error: flag --region: 'us-east4=x' is not REGION=REPLICA_GROUPS; give one region alone or each as R=N",
        ),
        (
            (
                "--region",
                "us-central1=1",
                "--region",
                "us-east4=1",
                "--pods",
                "2",
                "--",
                "train.py",
                "optim=diloco",
                "run.name=x",
            ),
            "error: flag --pods: comes from each region's replica_groups in a run across regions; drop it",
        ),
        (
            ("--region", "us-central1=1", "--region", "us-east4=1", "--", "train.py", "optim=diloco"),
            "error: flag the command after --: set run.name=<name> in the command: every region's checkpoint folder is named by it",
        ),
    ],
)
def test_bad_runs_are_one_line_and_exit_2(gkr: Callable[..., Result], args: tuple[str, ...], error: str) -> None:
    result = gkr("submit", "--name", "x", "--team", "research", "--dry-run", *args)
    assert (result.exit_code, result.stderr, result.stdout) == (2, error + "\n", "")


def test_per_step_sync_only_when_forced(gkr: Callable[..., Result]) -> None:
    args = ("--region", "us-central1=1", "--region", "us-east4=1", "--", "train.py", "run.name=x")
    forced = gkr("submit", "--name", "x", "--team", "research", "--dry-run", "--force-per-step-sync", *args)
    assert forced.exit_code == 0, forced.stderr
    assert "optimizer ddp" in forced.stderr


def test_job_file_errors_name_the_line(gkr: Callable[..., Result], tmp_path: Path) -> None:
    job = yaml.safe_load(Path(EXAMPLE).read_text())
    job["regions"]["us-east4"] = {"replica_groups": 0}
    job["kind"] = "raycluster"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    result = gkr("submit", "-f", str(path), "--dry-run")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert all(line.startswith(f"error: {path}:") for line in lines), lines
    assert any("regions.us-east4.replica_groups: must be at least 1 (got 0)" in line for line in lines), lines


def test_a_team_without_quota_in_a_region_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gkr: Callable[..., Result]
) -> None:
    fleet = (
        (REPO / "fleet.yaml")
        .read_text()
        .replace(
            "quota: {us-central1: 512, us-east4: 256, europe-west1: 256}", "quota: {us-central1: 512, us-east4: 256}"
        )
    )
    (tmp_path / "fleet.yaml").write_text(fleet)
    folder = registry_folder(tmp_path / "fleet.yaml")
    args = ("--region", "us-central1=1", "--region", "europe-west1=1", "--", "train.py", "optim=diloco", "run.name=x")
    from typer.testing import CliRunner

    from gkr.commands.group import app

    result = CliRunner().invoke(
        app, ["submit", "--registry", str(folder), "--name", "x", "--team", "evals", "--dry-run", *args]
    )
    assert (result.exit_code, result.stderr) == (
        2,
        "error: flag --region: team evals has no GPU quota in europe-west1; pick another region\n",
    )


# --- submit, status, logs, delete against the fake clusters --------------------------------------


def test_submit_creates_the_lighthouse_waits_for_its_ip_then_each_rayjob(
    gkr: Callable[..., Result], clusters: dict[str, Cluster]
) -> None:
    result = gkr("submit", "-f", EXAMPLE)
    assert result.exit_code == 0, result.stderr
    reads = [("us-central1", "GET", SERVICE_PATH)] * 3  # no IP, no IP, then the IP
    assert calls(clusters) == [
        *each("us-central1", "PATCH", LIGHTHOUSE_PATHS),
        *reads,
        *each("us-central1", "PATCH", MEMBER_PATHS),
        *each("us-east4", "PATCH", MEMBER_PATHS),
    ]
    log = clusters[CENTRAL].log
    assert all(r["content_type"] == "application/apply-patch+yaml" for r in log if r["method"] == "PATCH")
    for context in (CENTRAL, EAST4):
        assert env_of(clusters[context].store[RAYJOB_PATH])[names.LIGHTHOUSE_ENV] == f"http://{IP}:29510"
    # What was applied is exactly the dry run, with the address in place of the placeholder.
    dry = json.loads(gkr("submit", "-f", EXAMPLE, "--dry-run", "-o", "json").stdout)
    assert clusters[CENTRAL].store[DEPLOYMENT_PATH] == dry[CENTRAL][1]
    assert lighthouse.with_host(dry[EAST4][1], IP) == clusters[EAST4].store[RAYJOB_PATH]
    # The certificates were minted: one CA for the run in every Secret, the Lighthouse's for its TLS name,
    # the same member identity in each region, and no CA key anywhere.
    tls = {
        k: {f: base64.b64decode(v).decode() for f, v in clusters[c].store[p]["data"].items()}
        for k, c, p in (
            ("lighthouse", CENTRAL, LIGHTHOUSE_TLS_PATH),
            ("central", CENTRAL, MEMBER_TLS_PATH),
            ("east", EAST4, MEMBER_TLS_PATH),
        )
    }
    assert len({t["ca.crt"] for t in tls.values()}) == 1
    assert tls["central"] == tls["east"] != tls["lighthouse"]
    assert all(set(t) == {"ca.crt", "tls.crt", "tls.key"} and "PRIVATE KEY" not in t["ca.crt"] for t in tls.values())
    assert f"lighthouse {RUN}-lighthouse in us-central1: http://{IP}:29510" in result.stderr
    assert result.stderr.endswith(
        f"submitted run {RUN} to team-research in us-central1 ({CENTRAL}), us-east4 ({EAST4})\n"
    )


def test_no_ip_in_time_rolls_back_in_one_line(
    gkr: Callable[..., Result], clusters: dict[str, Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    clusters[CENTRAL].reads_before_ip = -1
    monkeypatch.setattr(launch, "WAIT_S", 0.05)
    result = gkr("submit", "-f", EXAMPLE)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: waiting for the Lighthouse's load balancer in us-central1 failed: service {RUN}-lighthouse got no "
        f"internal load balancer IP within 0.05 s (`kubectl describe service {RUN}-lighthouse -n team-research` "
        f"shows GKE's events); deleted service {RUN}-lighthouse in us-central1, deployment {RUN}-lighthouse in us-central1, "
        f"secret {RUN}-lighthouse-tls in us-central1"
    )
    assert [c for c in calls(clusters) if c[1] == "DELETE"] == rolled_back()
    assert not any(r[1] == "PATCH" and "rayjobs" in r[2] for r in calls(clusters))
    assert clusters[CENTRAL].store == clusters[EAST4].store == {}


def test_a_refused_rayjob_rolls_back_every_region(gkr: Callable[..., Result], clusters: dict[str, Cluster]) -> None:
    clusters[EAST4].refuse = RAYJOB_PATH
    result = gkr("submit", "-f", EXAMPLE)
    assert result.exit_code == 1
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: applying rayjob {RUN} in us-east4 failed: ")
    assert line.endswith(
        f"deleted secret {RUN}-member-tls in us-east4, rayjob {RUN} in us-central1, secret {RUN}-member-tls in "
        f"us-central1, service {RUN}-lighthouse in us-central1, deployment {RUN}-lighthouse in us-central1, "
        f"secret {RUN}-lighthouse-tls in us-central1"
    )
    # us-east4's refused RayJob may have landed: it is deleted too (404 here).
    assert [c for c in calls(clusters) if c[1] == "DELETE"] == rolled_back("us-east4", "us-central1")
    assert clusters[CENTRAL].store == clusters[EAST4].store == {}


def test_a_missing_context_applies_nothing(
    gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_contexts(tmp_path, monkeypatch, {CENTRAL: "http://127.0.0.1:9"})
    result = gkr("submit", "-f", EXAMPLE)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith(f"error: no context {EAST4} in ")
    assert "gcloud container clusters get-credentials meridian-us-east4 --region us-east4" in result.stderr


def test_status_logs_and_delete_treat_the_run_as_one(gkr: Callable[..., Result], clusters: dict[str, Cluster]) -> None:
    assert gkr("submit", "-f", EXAMPLE).exit_code == 0
    for context in (CENTRAL, EAST4):  # the pods KubeRay would create, with the template's labels
        cluster = clusters[context]
        template = cluster.store[RAYJOB_PATH]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
        meta = {"name": f"{RUN}-head-{context[-5:]}", **template["metadata"]}
        meta["labels"] = {**meta["labels"], "ray.io/node-type": "head"}
        cluster.store[f"/api/v1{NS}/pods/{meta['name']}"] = {"kind": "Pod", "metadata": meta}
    status = gkr("status", RUN, "--team", "research", "--region", "us-east4", "-o", "json")
    assert status.exit_code == 0, status.stderr
    assert json.loads(status.stdout) == {
        "run": RUN,
        "home": "us-central1",
        "regions": {
            "us-central1": {
                f"rayjob/{RUN}": "Pending",
                f"secret/{RUN}-lighthouse-tls": "present",
                f"secret/{RUN}-member-tls": "present",
                f"deployment/{RUN}-lighthouse": "0/1 ready",
                f"service/{RUN}-lighthouse": "no load balancer IP yet",
            },
            "us-east4": {f"rayjob/{RUN}": "Pending", f"secret/{RUN}-member-tls": "present"},
        },
    }
    logs = gkr("logs", RUN, "--team", "research", "--region", "us-central1")
    assert logs.exit_code == 0, logs.stderr
    assert logs.stdout.splitlines() == [
        f"[us-central1/{RUN}-head-{CENTRAL[-5:]}] step 1 in {CENTRAL}",
        f"[us-east4/{RUN}-head-{EAST4[-5:]}] step 1 in {EAST4}",
    ]
    deleted = gkr("delete", RUN, "--team", "research", "--region", "us-east4")
    assert deleted.exit_code == 0, deleted.stderr
    assert deleted.stderr.splitlines()[-1] == f"deleted run {RUN} in us-central1, us-east4"
    assert {p for c in clusters.values() for p in c.store if "/pods/" not in p} == set()


def test_delete_names_a_region_it_cannot_reach(
    gkr: Callable[..., Result], clusters: dict[str, Cluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gkr("submit", "-f", EXAMPLE).exit_code == 0
    use_contexts(tmp_path, monkeypatch, {CENTRAL: f"http://127.0.0.1:{clusters[CENTRAL].server_port}"})
    result = gkr("delete", RUN, "--team", "research", "--region", "us-central1")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(f"error: run {RUN} not wholly deleted: us-east4: unreachable: ")
    assert clusters[CENTRAL].store == {}
    assert list(clusters[EAST4].store) == [MEMBER_TLS_PATH, RAYJOB_PATH]
