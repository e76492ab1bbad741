"""Bad input: one clear line per problem naming where it came from, exit 2, nothing applied; fuzzed YAML never crashes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.problem import Invalid
from gkr.submit import prepare
from tests.gkr.conftest import shipped

BASE = {
    "name": "exp-1",
    "team": "research",
    "region": "us-east4",
    "pods": 2,
    "gpus_per_pod": 8,
    "command": "python train.py",
}

SET_BY_PLATFORM = "is set by the platform on this job's pods"  # a variable the platform's own render sets
ENV_CASES: list[tuple[str, dict[str, object], list[str], str]] = [
    (
        f"env {what}",
        {"env": {name: value}},
        [],
        f"env.{name}: {why or f'{name} {SET_BY_PLATFORM}'}; rename your variable",
    )
    for what, name, value, why in [
        ("shadows the downward API", "NODE_NAME", "gke-other-node", ""),
        ("shadows the library path", "LD_LIBRARY_PATH", "/tmp/evil", ""),
        ("in the NCCL family", "NCCL_IB_HCA", "mlx5_0", "NCCL_* variables belong to the platform"),
        ("moves the checkpoint dir", "MERIDIAN_CHECKPOINT_DIR", "/checkpoints/../other", ""),
    ]
]
# (id, job file changes, extra flags, words the single error line must contain)
CASES: list[tuple[str, dict[str, object], list[str], str]] = [
    ("invalid name", {"name": "Exp_1"}, [], "job.yaml:1: name: 'Exp_1' is not a valid rayjob name"),
    ("rayjob name too long", {"name": "a" * 48}, [], "at most 47 lowercase letters"),
    (
        "raycluster name too long",
        {"name": "a" * 54, "kind": "raycluster", "command": None},
        [],
        "at most 53 lowercase letters",
    ),
    (
        "unknown kind",
        {"kind": "deployment"},
        [],
        "kind: 'deployment' is not one of 'rayjob', 'raycluster', 'job'; set kind in the job file or with --kind",
    ),
    ("unknown team", {"team": "reserch"}, [], "team: unknown team 'reserch'; did you mean research?"),
    ("unknown region", {"region": "us-east5"}, [], "region: unknown region 'us-east5'"),
    ("unknown pool", {"pool": "h100-a"}, [], "pool: no pool 'h100-a' in us-east4"),
    (
        "unknown pool: the team's pools and its nominal GPUs in each",
        {"region": "us-central1", "pool": "h200-b"},
        [],
        "pool: no pool 'h200-b' in us-central1; did you mean h200-a? use one of h200-a, h200-flex "
        "(team research's nominal GPUs: h200-a 768, h200-flex 256)",
    ),
    (
        "pool of another team",
        {"region": "europe-west1", "pool": "h200-a"},
        [],
        "pool: pool h200-a is dedicated to team pretraining",
    ),
    (
        "more GPUs per pod than the machine",
        {"gpus_per_pod": 16},
        [],
        "gpus_per_pod: 16 GPUs per pod do not fit an a3-ultragpu-8g (8 GPUs)",
    ),
    ("GPUs that do not divide the machine", {"gpus_per_pod": 3}, [], "gpus_per_pod: 3 does not divide the 8 GPUs"),
    (
        "too many CPUs",
        {"cpus_per_pod": 300},
        [],
        "cpus_per_pod: 300 CPUs per pod do not fit an a3-ultragpu-8g (at most 201 of its 224)",
    ),
    ("too much memory", {"memory_per_pod_gib": 4000}, [], "memory_per_pod_gib: 4000 GiB per pod does not fit"),
    (
        "more pods than the pool",
        {"region": "us-central1", "pool": "h200-flex", "pods": 129, "team": "pretraining"},
        [],
        "pods: 129 pods need 129 nodes; pool h200-flex has 128",
    ),
    (
        "above the team's quota",
        {"pods": 97},
        [],
        "pods: 97 pods x 8 GPUs = 776 GPUs, above team research's quota of 768 in us-east4",
    ),
    ("unknown priority", {"priority": "urgent"}, [], "priority: unknown priority 'urgent'"),
    (
        "priority above the team's ceiling",
        {"priority": "critical"},
        [],
        "job.yaml:7: priority: critical is above team research's ceiling high; use one of high, standard, preemptible, "
        "or ask the fleet owners to raise the team's max_priority",
    ),
    (
        "--priority flag above the ceiling",
        {"team": "evals"},
        ["--priority", "high"],
        "flag --priority: high is above team evals' ceiling standard; use one of standard, preemptible",
    ),
    *ENV_CASES,
    (
        "image from another registry",
        {"image": "docker.io/library/python:3.12"},
        [],
        "image: 'docker.io/library/python:3.12' is not in the fleet registry; "
        "push it to us-docker.pkg.dev/meridian-train-prod/meridian/ (the clusters admit no other)",
    ),
    (
        "image at latest",
        {"image": "us-docker.pkg.dev/meridian-train-prod/meridian/trainer:latest"},
        [],
        "is not pinned (latest moves); pin it by version (:1.2.3) or digest",
    ),
    (
        "image without a tag",
        {"image": "us-docker.pkg.dev/meridian-train-prod/meridian/trainer"},
        [],
        "is not pinned (no tag)",
    ),
    (
        "image with a bad digest",
        {"image": "us-docker.pkg.dev/meridian-train-prod/meridian/trainer@sha256:abc"},
        [],
        "has a malformed digest",
    ),
    (
        "unknown dataset",
        {"datasets": ["meridian-datasets-uss"]},
        [],
        "datasets: unknown dataset 'meridian-datasets-uss'; did you mean meridian-datasets-us?",
    ),
    ("unknown --dataset flag", {}, ["--dataset", "nope"], "flag --dataset: unknown dataset 'nope'"),
    (
        "datasets not a list",
        {"datasets": "meridian-datasets-us"},
        [],
        "datasets: 'meridian-datasets-us' is not a list; set datasets in the job file or with --dataset",
    ),
    (
        "CPU pods beyond the CPU pool",
        {"kind": "job", "gpus_per_pod": 0, "pods": 100_000},
        [],
        "pods: 100,000 pods x 4 CPU = 400,000 CPU need 14,286 n2-standard-32 nodes; "
        "CPU pool cpu in us-east4 scales to 64 (1,792 CPU for pods)",
    ),
    (
        "CPU pod larger than a CPU machine",
        {"kind": "job", "gpus_per_pod": 0, "cpus_per_pod": 64},
        [],
        "cpus_per_pod: 64 CPUs per pod do not fit an n2-standard-32 (at most 28 of its 32)",
    ),
    (
        "CPU job on a GPU pool",
        {"kind": "job", "gpus_per_pod": 0, "pool": "h200-a"},
        [],
        "pool: no CPU pool 'h200-a' in us-east4 for a job without GPUs; use one of cpu",
    ),
    ("GPU job on the CPU pool", {"pool": "cpu"}, [], "pool: pool cpu has no GPUs; set gpus_per_pod: 0 for a CPU job"),
    (
        "Ray head larger than a CPU machine",
        {"ray": {"head_cpus": 64}},
        [],
        "ray.head_cpus: a Ray head of 64 CPUs and 32 GiB does not fit an n2-standard-32 of CPU pool cpu",
    ),
    ("bad env name", {"env": {"1BAD": "x"}}, [], "env: '1BAD' is not a valid environment variable name"),
    ("rayjob without a command", {"command": None}, [], "command: a rayjob needs a command"),
    ("raycluster with a command", {"kind": "raycluster"}, [], "command: a raycluster runs no command"),
    (
        "ttl without shutdown",
        {"ray": {"ttl_seconds": 60, "shutdown_after_finish": False}},
        [],
        "ray.shutdown_after_finish: a Kueue-managed RayJob must shut its cluster down when it finishes (KubeRay also ignores ray.ttl_seconds without it)",
    ),
    (
        "ttl on a Kueue RayJob",
        {"ray": {"ttl_seconds": 3600}},
        [],
        "ray.ttl_seconds: Kueue frees a RayJob's quota when it finishes, while its Ray cluster would keep the "
        "nodes for the TTL (kubernetes-sigs/kueue#3994); drop ray.ttl_seconds",
    ),
    (
        "backoff with interactive mode",
        {"ray": {"backoff_limit": 2, "interactive": True}},
        [],
        "ray.backoff_limit: KubeRay refuses retries in interactive mode; drop ray.backoff_limit or set it to 0",
    ),
    ("retries past the bound", {"ray": {"backoff_limit": 11}}, [], "ray.backoff_limit: must be at most 10 (got 11)"),
    ("a deadline of zero", {"ray": {"deadline_seconds": 0}}, [], "ray.deadline_seconds: must be at least 1 (got 0)"),
    (
        "a deadline past KubeRay's int32",
        {"ray": {"deadline_seconds": 2**31}},
        [],
        "ray.deadline_seconds: must be at most 2147483647",
    ),
    (
        "a deadline on a raycluster",
        {"kind": "raycluster", "command": None, "ray": {"deadline_seconds": 60}},
        [],
        "ray.deadline_seconds: applies to RayJobs only, not to a raycluster",
    ),
    (
        "Kueue RayJob on an existing cluster",
        {"ray": {"cluster": "dev"}},
        [],
        "ray.cluster: a Kueue-managed RayJob cannot use an existing cluster",
    ),
    (
        "ray settings on a job",
        {"kind": "job", "ray": {"ttl_seconds": 60}},
        [],
        "ray.ttl_seconds: applies to RayJobs only, not to a job",
    ),
    ("unknown key", {"gpus": 8}, [], "job.yaml:7: gpus: unknown field; use one of allow_per_step_sync, checkpoint"),
    ("negative pods", {"pods": -1}, [], "pods: must be at least 1 (got -1)"),
    (
        "bad topology level",
        {"topology": {"mode": "required", "level": "rack"}},
        [],
        "topology.level: 'rack' is not one of 'block', 'subblock', 'host'; set topology.level in the job file",
    ),
    ("flag beats file and is named", {}, ["--pods", "97"], "flag --pods: 97 pods x 8 GPUs = 776 GPUs"),
    ("bad --env flag", {}, ["--env", "NOEQUALS"], "flag --env: 'NOEQUALS' is not KEY=VALUE"),
    (
        "bad --topology flag",
        {},
        ["--topology", "sometimes:block"],
        "flag --topology: 'sometimes' is not one of 'required', 'preferred'; set topology.mode",
    ),
]


@pytest.mark.parametrize(("changes", "flags", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clear_line(
    gkr: Callable[..., Result], tmp_path: Path, changes: dict[str, object], flags: list[str], words: str
) -> None:
    job = {**BASE, **changes}
    job = {k: v for k, v in job.items() if v is not None}
    file = tmp_path / "job.yaml"
    file.write_text(yaml.safe_dump(job, sort_keys=False))
    result = gkr("submit", "-f", str(file), *flags)  # no --dry-run: would apply if it got that far
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert words in lines[0].replace(str(tmp_path) + "/", "")
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: [oops\n", "job.yaml:2: not valid YAML"),
        ("- a\n", "a job file is a YAML mapping"),
        ("name: a\nname: b\n", "name: key appears twice"),
    ],
)
def test_unreadable_job_files(gkr: Callable[..., Result], tmp_path: Path, text: str, words: str) -> None:
    file = tmp_path / "job.yaml"
    file.write_text(text)
    result = gkr("submit", "-f", str(file), "--dry-run")
    assert result.exit_code == 2
    assert words in result.stderr.replace(str(tmp_path) + "/", "")


def test_missing_job_file(gkr: Callable[..., Result], tmp_path: Path) -> None:
    result = gkr("submit", "-f", str(tmp_path / "nope.yaml"), "--dry-run")
    assert result.exit_code == 2
    assert "cannot read it (No such file or directory)" in result.stderr


FLEET = shipped()
values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=20) | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)
keys = st.sampled_from(
    [
        *BASE,
        "kind",
        "pool",
        "image",
        "priority",
        "topology",
        "env",
        "ray",
        "preflight",
        "checkpoint",
        "cpus_per_pod",
        "datasets",
        "replica_groups",
        "group_size",
        "junk",
    ]
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(st.dictionaries(keys, values, max_size=8), st.booleans())
def test_fuzzed_job_files_never_crash(
    tmp_path_factory: pytest.TempPathFactory, job: dict[str, object], keep_base: bool
) -> None:
    data = {**BASE, **job} if keep_base else job
    file = tmp_path_factory.mktemp("fuzz") / "job.yaml"
    file.write_text(yaml.safe_dump(data))
    try:
        prepare(str(file), {}, FLEET, None)
    except Invalid as exc:  # the one way bad input may end: lines to print
        lines = exc.lines
        assert lines
        assert all(isinstance(line, str) and "\n" not in line and line for line in lines)


DEBUG_ENV = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p.log",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_DESYNC_DEBUG": "1",
    "TORCH_CPP_LOG_LEVEL": "INFO",
}


def test_nccl_and_torch_debugging_variables_are_the_users_to_set(tmp_path: Path) -> None:
    file = tmp_path / "job.yaml"
    file.write_text(yaml.safe_dump({**BASE, "env": DEBUG_ENV}, sort_keys=False))
    _, objects = prepare(str(file), {}, FLEET, None)
    rendered = {e["name"]: e.get("value") for e in _containers_env(objects)}
    assert {k: rendered.get(k) for k in DEBUG_ENV} == DEBUG_ENV


def _containers_env(value: object) -> list[dict[str, object]]:
    """Every container's env entries anywhere in the rendered objects."""
    if isinstance(value, dict):
        found = list(value["env"]) if isinstance(value.get("env"), list) else []
        return found + [e for v in value.values() for e in _containers_env(v)]
    if isinstance(value, list):
        return [e for v in value for e in _containers_env(v)]
    return []


@pytest.mark.parametrize("key", ["pods", "gpus_per_pod", "priority"])
def test_a_number_of_thousands_of_digits_in_a_job_file_is_one_line(
    gkr: Callable[..., Result], tmp_path: Path, key: str
) -> None:
    job = {k: v for k, v in BASE.items() if k != key}
    file = tmp_path / "job.yaml"
    file.write_text(yaml.safe_dump(job, sort_keys=False) + f"{key}: {'9' * 5000}\n")
    result = gkr("submit", "-f", str(file))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
