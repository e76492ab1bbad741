"""The pods KubeRay v1.7.0 would build from gkr's shipped RayJobs and RayCluster (twin.kuberay, pure).

Expected strings are written from KubeRay's source at 59d663ae (pod.go, job.go, rayjob_controller.go),
not from this module's output: a change in how the twin builds a command line fails here.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from typing import Any

import pytest

import safeyaml
from contract.quantity import QuantityError, ceil_value, parse
from tests.conftest import REPO
from twin.golang import ALPHANUMS, json_float, quote, version_at_least
from twin.kuberay import (
    ClusterPods,
    JobPods,
    KubeRayError,
    Rejected,
    Unsupported,
    cluster_pods,
    rayjob_pods,
)
from twin.kuberay.start import convert_param_map

GOLDEN = REPO / "tests" / "gkr" / "golden"
NS = "team-research"
ULIMIT = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; "
SUFFIX = f"[{ALPHANUMS}]{{5}}"


def golden(name: str) -> dict[str, Any]:
    loaded = safeyaml.load(safeyaml.read_text(GOLDEN / f"{name}.yaml"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def tiny() -> JobPods:
    return rayjob_pods(golden("grpo-tiny-cpu"))


@pytest.fixture(scope="module")
def grpo8b() -> JobPods:
    return rayjob_pods(golden("grpo-8b"))


def ray(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def pods_of(name: str) -> ClusterPods:
    obj = golden(name)
    if obj["kind"] == "RayCluster":
        return cluster_pods(obj, obj["metadata"]["namespace"])
    return rayjob_pods(obj).cluster


@pytest.mark.parametrize(
    ("name", "groups"),
    [
        ("grpo-tiny-cpu", {"trainer": 1, "generators": 1}),
        ("grpo-8b", {"trainer": 3, "generators": 1}),
        ("persistent-raycluster", {"workers": 2}),
        ("pretrain-spares", {"workers": 34}),
    ],
)
def test_one_head_and_each_groups_replicas(name: str, groups: dict[str, int]) -> None:
    cluster = pods_of(name)
    assert {group: len(pods) for group, pods in cluster.workers.items()} == groups
    assert len(cluster.pods) == 1 + sum(groups.values())
    assert len({p["metadata"]["name"] for p in cluster.pods}) == len(cluster.pods)
    assert cluster.head["metadata"]["labels"]["ray.io/node-type"] == "head"
    assert cluster.head["metadata"]["labels"]["ray.io/group"] == "headgroup"
    for group, pods in cluster.workers.items():
        for index, pod in enumerate(pods):
            labels = pod["metadata"]["labels"]
            assert (labels["ray.io/node-type"], labels["ray.io/group"]) == ("worker", group)
            assert labels["ray.io/cluster"] == cluster.name
            assert labels["ray.io/worker-group-replica-index"] == str(index)
            assert re.fullmatch(f"{cluster.name}-{group}-worker-{SUFFIX}", pod["metadata"]["name"])
            assert labels["meridian.dev/team"] == "research" or name == "pretrain-spares"


def test_the_rayjobs_cluster_is_named_with_a_suffix_that_does_not_change(tiny: JobPods) -> None:
    assert re.fullmatch(f"grpo-tiny-cpu-{SUFFIX}", tiny.cluster.name)
    assert re.fullmatch(f"grpo-tiny-cpu-{SUFFIX}", tiny.submission_id or "")
    again = rayjob_pods(golden("grpo-tiny-cpu"))
    assert [p["metadata"]["name"] for p in again.pods] == [p["metadata"]["name"] for p in tiny.pods]
    labels = tiny.raycluster["metadata"]["labels"]
    assert labels["ray.io/originated-from-cr-name"] == "grpo-tiny-cpu"
    assert labels["ray.io/job-submission-mode"] == "K8sJobMode"
    assert labels["kueue.x-k8s.io/queue-name"] == "research"  # the RayJob's labels travel to its cluster


def test_head_runs_ray_start_head_with_kuberays_parameters(tiny: JobPods) -> None:
    head = ray(tiny.cluster.head)
    start = (
        "ray start --head  --block  --dashboard-agent-listen-port=52365  --dashboard-host=0.0.0.0 "
        " --memory=34359738368  --metrics-export-port=8080  --num-cpus=0 "
    )
    assert head["command"] == ["/bin/bash", "-c", "--"]
    assert head["args"] == [ULIMIT + start]  # gkr's num-cpus 0: no task or actor on the head
    assert env(head)["KUBERAY_GEN_RAY_START_CMD"] == start
    job = golden("grpo-tiny-cpu")
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"] = {}
    derived = env(ray(rayjob_pods(job).cluster.head))["KUBERAY_GEN_RAY_START_CMD"]
    assert derived == start.replace("--num-cpus=0", "--num-cpus=8")  # without it, the container's 8 CPUs


@pytest.mark.parametrize(("group", "resource"), [("trainer", "meridian_trainer"), ("generators", "meridian_generator")])
def test_worker_joins_the_head_service_with_its_custom_resource(tiny: JobPods, group: str, resource: str) -> None:
    worker = ray(tiny.cluster.workers[group][0])
    address = f"{tiny.cluster.name}-head-svc.{NS}.svc.cluster.local:6379"
    start = (
        f"ray start  --address={address}  --block  --dashboard-agent-listen-port=52365  --memory=8589934592 "
        f' --metrics-export-port=8080  --num-cpus=2  --resources="{{\\"{resource}\\": 2}}" '
    )
    assert worker["args"] == [ULIMIT + start]
    # bash reads the unquoted value KubeRay writes: Ray receives the JSON object.
    flag = next(w for w in shlex.split(worker["args"][0]) if w.startswith("--resources="))
    assert json.loads(flag.removeprefix("--resources=")) == {resource: 2}


def test_a_template_command_runs_before_ray_start(grpo8b: JobPods) -> None:
    worker = ray(grpo8b.cluster.workers["trainer"][0])
    written = golden("grpo-8b")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    generated = env(worker)["KUBERAY_GEN_RAY_START_CMD"]
    assert worker["args"] == [f" {written['command'][0]}  && {ULIMIT}{generated}"]


def test_an_escaped_resources_param_keeps_kuberay_from_deriving_num_gpus(grpo8b: JobPods) -> None:
    # getResourcesMap cannot read `"{\"a\": 8}"` as JSON, so addWellKnownAcceleratorResources adds nothing
    # (pod_test.go "HeadNode with invalid resources string"); Ray then counts the node's GPUs itself.
    generated = env(ray(grpo8b.cluster.workers["trainer"][0]))["KUBERAY_GEN_RAY_START_CMD"]
    assert "--num-gpus" not in generated
    job = golden("grpo-8b")
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]["resources"] = "'{\"meridian_trainer\": 8}'"
    fixed = rayjob_pods(job).cluster.workers["trainer"][0]
    assert " --num-gpus=8 " in env(ray(fixed))["KUBERAY_GEN_RAY_START_CMD"]


def test_kuberays_env_follows_the_templates(tiny: JobPods) -> None:
    fqdn = f"{tiny.cluster.name}-head-svc.{NS}.svc.cluster.local"
    head, worker = ray(tiny.cluster.head), ray(tiny.cluster.workers["trainer"][0])
    names = [e["name"] for e in worker["env"]]
    assert names[: names.index("FQ_RAY_IP")] == [e["name"] for e in golden_worker_env()]
    assert env(head)["RAY_ADDRESS"] == "127.0.0.1:6379"
    assert env(worker)["RAY_ADDRESS"] == f"{fqdn}:6379"
    assert (env(worker)["FQ_RAY_IP"], env(worker)["RAY_IP"]) == (fqdn, f"{tiny.cluster.name}-head-svc")
    assert "FQ_RAY_IP" not in env(head)
    for container in (head, worker):
        found = env(container)
        assert found["RAY_PORT"] == "6379"
        assert found["RAY_USAGE_STATS_KUBERAY_IN_USE"] == "1"
        assert found["RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE"] == "1"
        assert found["RAY_CLUSTER_NAME"] == {"fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}}
        assert found["RAY_CLOUD_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert found["RAY_NODE_TYPE_NAME"] == {"fieldRef": {"fieldPath": "metadata.labels['ray.io/group']"}}
    assert env(head)["RAY_USAGE_STATS_EXTRA_TAGS"] == "kuberay_version=v1.7.0;kuberay_crd=RayJob"
    assert {"name": "metrics", "containerPort": 8080} in head["ports"]


def golden_worker_env() -> list[dict[str, Any]]:
    spec = golden("grpo-tiny-cpu")["spec"]["rayClusterSpec"]
    found: list[dict[str, Any]] = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]
    return found


def test_workers_wait_for_the_gcs_after_their_own_init_containers(grpo8b: JobPods) -> None:
    fqdn = f"{grpo8b.cluster.name}-head-svc.{NS}.svc.cluster.local"
    worker = grpo8b.cluster.workers["trainer"][0]
    preflight, wait = worker["spec"]["initContainers"]
    assert (preflight["name"], wait["name"]) == ("preflight", "wait-gcs-ready")
    assert wait["command"] == ["/bin/bash", "-c", "--"]
    script = wait["args"][0]
    assert f"\t\t\t\t\t\t\tif ray health-check --address {fqdn}:6379 > /dev/null 2>&1; then\n" in script
    assert script.startswith("\n\t\t\t\t\tSECONDS=0\n")
    assert script.endswith("\t\t\t\t\tdone\n\t\t\t\t")
    assert wait["image"] == ray(worker)["image"]
    assert wait["resources"]["limits"] == {"cpu": "200m", "memory": "256Mi"}
    assert env(wait)["FQ_RAY_IP"] == fqdn
    assert env(preflight)["FQ_RAY_IP"] == fqdn
    assert "KUBERAY_GEN_RAY_START_CMD" not in env(wait)  # a copy of the template's env, before KubeRay's
    assert all(c["name"] != "wait-gcs-ready" for c in grpo8b.cluster.head["spec"].get("initContainers") or [])


def test_probes_check_the_raylet_and_on_the_head_the_gcs(tiny: JobPods) -> None:
    raylet = "wget --tries 1 -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success"
    gcs = "wget --tries 1 -T 10 -q -O- http://localhost:8265/api/gcs_healthz | grep success"
    old = golden("grpo-tiny-cpu")  # as gkr rendered it before it declared rayVersion: KubeRay's wget probes
    del old["spec"]["rayClusterSpec"]["rayVersion"]
    before = rayjob_pods(old)
    head, worker = ray(before.cluster.head), ray(before.cluster.workers["generators"][0])
    assert head["readinessProbe"]["exec"]["command"] == ["bash", "-c", f"{raylet} && {gcs}"]
    assert worker["livenessProbe"]["exec"]["command"] == ["bash", "-c", raylet]
    assert (head["livenessProbe"]["timeoutSeconds"], worker["livenessProbe"]["timeoutSeconds"]) == (5, 2)
    assert worker["livenessProbe"]["failureThreshold"] == 120
    assert worker["readinessProbe"]["failureThreshold"] == 10
    job = golden("grpo-tiny-cpu")
    job["spec"]["rayClusterSpec"]["rayVersion"] = "2.53.0"
    http = ray(rayjob_pods(job).cluster.head)["livenessProbe"]
    assert http["httpGet"] == {"path": "/api/healthz", "port": 52365}
    assert "exec" not in http
    assert ray(tiny.cluster.head)["livenessProbe"] == http  # gkr's rayVersion (2.60.0): the HTTP probes


def test_shared_memory_is_added_only_where_the_template_has_none(tiny: JobPods) -> None:
    assert [v["name"] for v in tiny.cluster.head["spec"]["volumes"]] == ["shm", "checkpoints"]
    job = golden("grpo-tiny-cpu")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][0]["volumeMounts"] = []
    head["volumes"] = []
    built = rayjob_pods(job).cluster.head
    assert built["spec"]["volumes"] == [{"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
    assert ray(built)["volumeMounts"] == [{"mountPath": "/dev/shm", "name": "shared-mem"}]


def test_the_submitter_job_waits_for_the_dashboard_then_submits_once(tiny: JobPods) -> None:
    dashboard = f"{tiny.cluster.name}-head-svc.{NS}.svc.cluster.local:8265"
    address, job_id = f"http://{dashboard}", tiny.submission_id
    entrypoint = "python train.py configs/grpo.yaml run.launcher=ray run.name=grpo-tiny-cpu model=tiny ft.device=cpu"
    health = (
        f"python -c \"import urllib.request; r=urllib.request.urlopen('{address}/api/gcs_healthz', timeout=10); "
        "exit(0 if b'success' in r.read() else 1)\""
    )
    expected = (
        f'until {health} >/dev/null 2>&1 ; do echo "Waiting for Ray Dashboard GCS to become healthy at {address} ..." ;'
        f" sleep 2 ; done ; if ! ray job status --address {address} {job_id} >/dev/null 2>&1 ; then"
        f" ray job submit --address {address} --no-wait --submission-id {job_id} -- {entrypoint} ; fi ;"
        f" ray job logs --address {address} --follow {job_id}"
    )
    assert tiny.submitter is not None
    assert tiny.submitter_job is not None
    container = ray(tiny.submitter)
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    assert container["args"] == [expected]
    assert container["name"] == "ray-job-submitter"
    assert container["image"] == ray(tiny.cluster.head)["image"]
    assert env(container) == {
        "PYTHONUNBUFFERED": "1",
        "RAY_DASHBOARD_ADDRESS": dashboard,
        "RAY_JOB_SUBMISSION_ID": job_id,
    }
    assert tiny.submitter["spec"]["restartPolicy"] == "Never"
    assert tiny.submitter_job["metadata"]["name"] == "grpo-tiny-cpu"
    assert tiny.submitter_backoff_limit == 2
    assert tiny.submitter["metadata"]["labels"]["job-name"] == "grpo-tiny-cpu"
    assert tiny.dashboard_url == dashboard
    assert tiny.pods[-1] is tiny.submitter
    # gkr's default retries (gkr.render.DEFAULT_BACKOFF_LIMIT) and no TTL (refused under Kueue).
    assert (tiny.shutdown_after_job_finishes, tiny.ttl_seconds_after_finished, tiny.backoff_limit) == (True, 0, 2)


def test_every_head_service_name_resolves_to_the_head_pod(tiny: JobPods) -> None:
    head = tiny.cluster.head["metadata"]["name"]
    for service in (f"{tiny.cluster.name}-head-svc", "grpo-tiny-cpu-head-svc"):
        for name in (service, f"{service}.{NS}", f"{service}.{NS}.svc.cluster.local"):
            assert tiny.services[name] == head
    assert len(tiny.services) == 6
    assert dict(tiny.cluster.service_ports) == {
        "client": 10001,
        "dashboard": 8265,
        "gcs-server": 6379,
        "metrics": 8080,
        "serve": 8000,
    }
    persistent = pods_of("persistent-raycluster")
    assert persistent.services[f"research-dev-head-svc.{NS}.svc.cluster.local"] == persistent.head["metadata"]["name"]


def test_interactive_and_sidecar_modes() -> None:
    job = golden("grpo-tiny-cpu")
    job["spec"].update(submissionMode="InteractiveMode", backoffLimit=0)  # no retries there, as gkr renders it
    interactive = rayjob_pods(job)
    assert interactive.submitter is None
    assert interactive.submission_id is None
    job["spec"]["submissionMode"] = "SidecarMode"
    sidecar = rayjob_pods(job)
    containers = sidecar.cluster.head["spec"]["containers"]
    assert [c["name"] for c in containers] == ["ray-head", "ray-job-submitter"]
    assert sidecar.cluster.head["spec"]["restartPolicy"] == "Never"
    assert sidecar.submitter is None
    args = containers[1]["args"][0]
    assert "http://localhost:8265/api/gcs_healthz" in args
    assert "--no-wait" not in args
    assert f"ray job submit --address http://127.0.0.1:8265 --submission-id {sidecar.submission_id} -- python" in args


def test_the_runtime_environment_and_entrypoint_resources_reach_ray_job_submit() -> None:
    job = golden("grpo-tiny-cpu")
    job["spec"].update(runtimeEnvYAML="working_dir: gs://b/w/1.zip\n", entrypointNumCpus=1, jobId="fixed")
    job["spec"]["metadata"] = {"team": "research"}
    args = ray(rayjob_pods(job).submitter or {})["args"][0]
    expected = (
        ' --no-wait --runtime-env-json "{\\"working_dir\\":\\"gs://b/w/1.zip\\"}"'
        ' --metadata-json "{\\"team\\":\\"research\\"}" --submission-id fixed --entrypoint-num-cpus 1.000000 -- python'
    )
    assert expected in args
    # bash -c hands ray the JSON itself
    words = shlex.split(args[args.index("--runtime-env-json") :])
    assert json.loads(words[1]) == {"working_dir": "gs://b/w/1.zip"}


def test_a_huge_replica_count_is_refused_before_any_pod_is_built() -> None:
    cluster = golden("persistent-raycluster")
    cluster["spec"]["workerGroupSpecs"][0].update(replicas=10**9, maxReplicas=2**31 - 1)
    with pytest.raises(Unsupported, match=r"spec\.workerGroupSpecs: asks for more than 999 worker pods"):
        cluster_pods(cluster, NS)


def test_hostile_documents_end_in_one_line() -> None:
    with pytest.raises(Rejected, match="is a list, not a mapping"):
        rayjob_pods(["not", "a", "rayjob"])  # type: ignore[arg-type]
    with pytest.raises(Rejected, match="kind: is 'RayJob', not RayCluster"):
        cluster_pods(golden("grpo-tiny-cpu"), NS)


def test_group_resources_and_labels_become_ray_start_parameters() -> None:
    cluster = golden("persistent-raycluster")
    cluster["spec"]["workerGroupSpecs"][0]["resources"] = {"cpu": "2500m", "memory": "1Gi", "TPU-v6e": "0.5"}
    cluster["spec"]["workerGroupSpecs"][0]["labels"] = {"zone": "b", "accel": "none"}
    generated = env(ray(cluster_pods(cluster, NS).workers["workers"][0]))["KUBERAY_GEN_RAY_START_CMD"]
    assert " --num-cpus=3 " in generated
    assert " --memory=1073741824 " in generated
    assert " --resources='{\"TPU-v6e\":0.5}' " in generated
    assert " --labels=accel=none,zone=b " in generated


def test_replicas_are_held_within_min_and_max() -> None:
    cluster = golden("persistent-raycluster")
    group = cluster["spec"]["workerGroupSpecs"][0]
    group.update(replicas=9, minReplicas=1, maxReplicas=3)
    assert len(cluster_pods(cluster, NS).workers["workers"]) == 3
    group.update(replicas=0)
    assert len(cluster_pods(cluster, NS).workers["workers"]) == 1
    group.update(suspend=True)
    assert cluster_pods(cluster, NS).workers["workers"] == ()


def test_the_overwrite_annotation_keeps_the_templates_command() -> None:
    cluster = golden("persistent-raycluster")
    cluster["metadata"]["annotations"] = {"ray.io/overwrite-container-cmd": "true"}
    head = cluster_pods(cluster, NS).head
    assert "command" not in ray(head)
    assert env(ray(head))["KUBERAY_GEN_RAY_START_CMD"].startswith("ray start --head")


def test_input_is_not_modified() -> None:
    job = golden("grpo-8b")
    before = copy.deepcopy(job)
    rayjob_pods(job)
    assert job == before


def _edit(path: str, value: object) -> dict[str, Any]:
    job = golden("grpo-tiny-cpu")
    *parents, last = path.split(".")
    node: Any = job
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    node[last] = value
    return job


W0 = "spec.rayClusterSpec.workerGroupSpecs.0"
P0 = "spec.rayClusterSpec.workerGroupSpecs[0]"


@pytest.mark.parametrize(
    ("path", "value", "error", "named"),
    [
        (
            "spec.rayClusterSpec.enableInTreeAutoscaling",
            True,
            Unsupported,
            "spec.rayClusterSpec.enableInTreeAutoscaling:",
        ),
        (
            "spec.rayClusterSpec.gcsFaultToleranceOptions",
            {"redisAddress": "r:6379"},
            Unsupported,
            "spec.rayClusterSpec.gcsFaultToleranceOptions:",
        ),
        ("spec.rayClusterSpec.tlsOptions", {"enabled": True}, Rejected, "spec.rayClusterSpec.tlsOptions:"),
        (f"{W0}.numOfHosts", 2, Unsupported, f"{P0}.numOfHosts:"),
        (f"{W0}.minReplicas", None, Rejected, "minReplicas and maxReplicas"),
        (f"{W0}.rayStartParams", {"num-cpus": 4}, Rejected, f"{P0}.rayStartParams.num-cpus:"),
        (f"{W0}.resources", {"cpu": "1"}, Rejected, "both rayStartParams and resources"),
        (f"{W0}.template.spec.containers", [], Rejected, f"{P0}.template.spec.containers:"),
        (
            f"{W0}.template.spec.containers.0.resources.requests.cpu",
            "two",
            Rejected,
            f"{P0}.template.spec.containers[0].resources.requests.cpu:",
        ),
        ("spec.submissionMode", "HTTPMode", Unsupported, "spec.submissionMode:"),
        ("spec.clusterSelector", {"ray.io/cluster": "x"}, Unsupported, "spec.clusterSelector"),
        ("spec.suspend", True, Unsupported, "spec.suspend"),
        ("spec.rayClusterSpec", None, Rejected, "spec.rayClusterSpec: is missing"),
        ("metadata.name", "j" * 48, Rejected, "metadata.name:"),
        ("spec.submitterPodTemplate", {"spec": {"containers": []}}, Rejected, "submitterPodTemplate"),
        ("spec", ["not", "a", "mapping"], Rejected, "spec: is a list"),
        (f"{W0}.groupName", "generators", Rejected, "share a groupName"),
        (
            f"{W0}.template.spec.containers.0.env",
            [["NAME", "v"]],
            Rejected,
            f"{P0}.template.spec.containers[0].env[0]:",
        ),
        ("spec.runtimeEnvYAML", "[a, b]", Rejected, "spec.runtimeEnvYAML: is not a mapping"),
    ],
)
def test_what_kuberay_refuses_or_the_twin_does_not_model_is_named(
    path: str, value: object, error: type[KubeRayError], named: str
) -> None:
    with pytest.raises(error) as raised:
        rayjob_pods(_edit(path, value))
    message = str(raised.value)
    assert message.startswith("RayJob team-research/")
    assert named in message
    assert "\n" not in message


def test_a_raycluster_applied_to_another_namespace_is_refused() -> None:
    with pytest.raises(Rejected, match=r"metadata\.namespace"):
        cluster_pods(golden("persistent-raycluster"), "elsewhere")


def test_convert_param_map_drops_false_except_where_ray_takes_it() -> None:
    params = {"block": "true", "disable-usage-stats": "False", "include-dashboard": "false", "port": "6380"}
    assert convert_param_map(params) == " --block  --include-dashboard=false  --port=6380 "


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 1), ("32Gi", 32 * 2**30), ("1e3", 1000), ("1E", 10**18), ("1.5Ki", 1536), (8, 8), ("-1500m", -2)],
)
def test_quantities_round_up_as_value_does(text: object, value: int) -> None:
    assert ceil_value(parse(text)) == value


@pytest.mark.parametrize("text", ["1.2.3", "Gi", "8 Gi", "1e9999", True, None, "9" * 80])
def test_a_bad_quantity_is_refused(text: object) -> None:
    with pytest.raises(QuantityError):
        parse(text)


def test_go_formatting() -> None:
    assert quote('a "b"\n\tc\\') == '"a \\"b\\"\\n\\tc\\\\"'
    assert [json_float(v) for v in (4.0, 0.5, 1e-7, 1e21, 123456.0)] == ["4", "0.5", "1e-7", "1e+21", "123456"]
    assert version_at_least("2.53.0", (2, 53, 0))
    assert version_at_least("v2.60", (2, 53, 0))
    assert not version_at_least("2.52.9", (2, 53, 0))
    assert not version_at_least("", (2, 53, 0))
    assert not version_at_least("02.60.0", (2, 53, 0))
