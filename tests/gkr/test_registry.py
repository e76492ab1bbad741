"""The fleet registry gkr reads: what it holds, where gkr finds it, and `gkr registry fetch` from a cluster."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import Result
from typer.testing import CliRunner

from contract import registry as contract
from contract.problem import Invalid
from gkr import registry
from gkr.commands.group import app
from tests.conftest import SHIPPED
from tests.gkr.conftest import EXAMPLES, registry_folder, shipped
from tests.gkr.test_kube import EAST4, FakeApiServer, use_kubeconfig

DRY_RUN = ("submit", "-f", str(EXAMPLES / "persistent-raycluster.yaml"), "--dry-run")
SCHEMAS = ["ray.io_v1_RayCluster.json", "ray.io_v1_RayJob.json"]


def test_registry_holds_what_gkr_needs() -> None:
    reg = shipped().registry
    central = reg.regions[0]
    assert reg.context(central) == "gke_meridian-train-prod_us-central1_meridian-us-central1"
    flex = central.pools[1]
    assert (flex.name, flex.flex_start, flex.nodes, flex.machine.gpu_model) == ("h200-flex", True, 128, "H200")
    assert flex.machine.preflight.args(2) == ("--expect-gpus=8", "--min-tflops=600", "--min-busbw-gbps=256")


def test_registry_holds_priority_values_and_team_ceilings() -> None:
    reg = shipped().registry
    assert reg.priorities == {"critical": 100000, "high": 10000, "standard": 1000, "preemptible": 100}
    assert {t.name: (t.priority, t.ceiling) for t in reg.teams} == {
        "pretraining": ("high", "critical"),
        "research": ("standard", "high"),
        "evals": ("standard", "standard"),  # no max_priority: the default is the ceiling
    }


def test_registry_holds_cpu_pools_image_registry_and_datasets() -> None:
    reg = shipped().registry
    assert reg.image_registry == "us-docker.pkg.dev/meridian-train-prod/meridian"
    assert [(d.name, d.location) for d in reg.datasets] == [
        ("meridian-datasets-us", "US"),
        ("meridian-datasets-eu", "EU"),
    ]
    (cpu,) = reg.regions[0].cpu_pools
    assert (cpu.name, cpu.nodes, cpu.machine.name, cpu.machine.vcpus, cpu.machine.memory_gb) == (
        "cpu",
        64,
        "n2-standard-32",
        32,
        128,
    )
    assert cpu.machine.gpus == 0


def test_the_fixture_builds_one_folder_per_fleet_yaml(tmp_path: Path) -> None:
    same = tmp_path / "fleet.yaml"
    same.write_text(SHIPPED.read_text())
    assert registry_folder(same) == registry_folder()  # the same text: the session's one synthesis
    assert sorted(p.name for p in (registry_folder() / contract.SCHEMAS_DIR).iterdir()) == SCHEMAS


# --- where gkr finds it -------------------------------------------------------------------------------


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder outside any checkout, no user config, no fetched copy, no environment."""
    for name in ("GKR_REGISTRY", "GKR_FLEET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    here = tmp_path / "work" / "deep"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    return here


def copy_of(folder: Path, target: Path) -> Path:
    shutil.copytree(folder, target)
    return target


def test_the_order_gkr_looks_in(elsewhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    with pytest.raises(Invalid, match=r"no fleet registry: run `gkr registry fetch --region REGION`"):
        registry.find(None, None, config, elsewhere)
    fetched = copy_of(registry_folder(), registry.fetched_dir())
    assert registry.find(None, None, config, elsewhere)[0] == fetched / contract.FILE
    repo = copy_of(registry_folder(), tmp_path / "work" / contract.GENERATED_DIR)  # a checkout above the cwd
    assert registry.find(None, None, config, elsewhere) == (
        repo / contract.FILE,
        f"the repository ({tmp_path / 'work'})",
    )
    configured = copy_of(registry_folder(), tmp_path / "configured")
    assert registry.find(None, str(configured), config, elsewhere)[0] == configured / contract.FILE
    env = copy_of(registry_folder(), tmp_path / "env")
    monkeypatch.setenv("GKR_REGISTRY", str(env / contract.FILE))  # the file itself will do
    assert registry.find(None, str(configured), config, elsewhere) == (env / contract.FILE, "$GKR_REGISTRY")
    assert registry.find(str(configured), None, config, elsewhere) == (configured / contract.FILE, "--registry")
    with pytest.raises(Invalid, match=r"--registry: /nope: no such file or folder"):
        registry.find("/nope", None, config, elsewhere)


def test_the_fetched_copy_is_used_outside_a_checkout(gkr: Callable[..., Result], elsewhere: Path) -> None:
    assert gkr("registry", "show").exit_code == 2  # none yet
    copy_of(registry_folder(), registry.fetched_dir())
    shown = gkr("registry", "show")
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"registry: {registry.fetched_dir() / contract.FILE}",
        "found: fetched from a cluster (`gkr registry fetch`)",
        f"schema: {contract.SCHEMA}",
        "project: meridian-train-prod; regions: us-central1, us-east4, europe-west1",
        f"schemas: {', '.join(SCHEMAS)}",
    ]


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("flag", "error: --fleet is replaced by --registry: pass --registry /src/generated"),
        ("env", "error: $GKR_FLEET is replaced by $GKR_REGISTRY: set GKR_REGISTRY=/src/generated"),
        ("config", "`fleet:` is replaced by `registry:`"),
    ],
)
def test_the_old_fleet_settings_say_what_replaces_them(
    gkr: Callable[..., Result], elsewhere: Path, monkeypatch: pytest.MonkeyPatch, setup: str, words: str
) -> None:
    args = ["clusters"]
    if setup == "flag":
        args += ["--fleet", "/src/fleet.yaml"]
    elif setup == "env":
        monkeypatch.setenv("GKR_FLEET", "/src/fleet.yaml")
    else:
        config = elsewhere.parent.parent / "config" / "gkr" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("fleet: /src/fleet.yaml\n")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert words in line


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda text: text.replace(contract.SCHEMA, "meridian.registry/v0"),
            "schema 'meridian.registry/v0', this tool",
        ),
        (lambda text: text[:100], "not JSON"),
        (lambda text: text.replace('"project"', '"projekt"'), "projekt: unknown field"),
        (lambda text: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (lambda text: " " * (registry.MAX_REGISTRY_BYTES + 1), "cannot read it (larger than 4,194,304 bytes)"),
        (lambda text: "\udcff", "cannot read it (not UTF-8)"),
    ],
)
def test_a_registry_of_another_schema_or_broken_is_one_line_per_problem(
    gkr: Callable[..., Result], tmp_path: Path, change: Callable[[str], str], words: str
) -> None:
    folder = copy_of(registry_folder(), tmp_path / "generated")
    (folder / contract.FILE).write_bytes(
        change((folder / contract.FILE).read_text()).encode("utf-8", "surrogateescape")
    )
    result = gkr("clusters", "--registry", str(folder))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert all(line.startswith(f"error: {folder / contract.FILE}: ") for line in lines)
    assert words in lines[0]


def test_a_missing_schema_file_is_one_line(gkr: Callable[..., Result], tmp_path: Path) -> None:
    folder = copy_of(registry_folder(), tmp_path / "generated")
    (folder / contract.SCHEMAS_DIR / "ray.io_v1_RayCluster.json").unlink()
    result = gkr(*DRY_RUN, "--registry", str(folder))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith(
        f"error: {folder / contract.SCHEMAS_DIR / 'ray.io_v1_RayCluster.json'}: missing; regenerate the registry"
    )


@pytest.mark.parametrize(
    ("edits", "paths"),
    [
        ({"checkpoint_bucket": "attacker-owned-bucket"}, ["regions[0].checkpoint_bucket"]),
        ({"pod_range": "0.0.0.0/0"}, ["regions[0].pod_range"]),
        ({"cluster": "meridian-$(reboot)"}, ["regions[0].cluster"]),
        (  # issue 27's registry: all three at once
            {"checkpoint_bucket": "attacker-owned-bucket", "pod_range": "0.0.0.0/0", "cluster": "meridian-$(reboot)"},
            ["regions[0].cluster", "regions[0].checkpoint_bucket", "regions[0].pod_range"],
        ),
    ],
)
def test_submit_refuses_a_hostile_registry_one_line_per_problem(
    gkr: Callable[..., Result], tmp_path: Path, edits: dict[str, str], paths: list[str]
) -> None:
    """A registry edited to point a region outside the fleet is refused before anything is rendered."""
    folder = copy_of(registry_folder(), tmp_path / "generated")
    data = json.loads((folder / contract.FILE).read_text())
    data["regions"][0].update(edits)
    (folder / contract.FILE).write_text(json.dumps(data))
    result = gkr(*DRY_RUN, "--registry", str(folder))
    assert result.exit_code == 2
    assert result.stdout == ""  # nothing rendered, nothing applied
    lines = result.stderr.splitlines()
    assert [line.split(": ")[2] for line in lines] == paths
    assert all(line.startswith(f"error: {folder / contract.FILE}: ") for line in lines)
    assert "$(reboot)" not in "".join(line for line in lines if "cluster" not in line)


# --- gkr registry fetch ---------------------------------------------------------------------------------


def configmap(folder: Path, **changes: Any) -> dict[str, Any]:
    """The registry ConfigMap the generator publishes in each cluster, from a registry folder."""
    binary = {
        f"{p.name}.gz": base64.b64encode(gzip.compress(p.read_bytes(), mtime=0)).decode()
        for p in sorted((folder / contract.SCHEMAS_DIR).iterdir())
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": contract.REGISTRY_CONFIGMAP, "namespace": contract.REGISTRY_NAMESPACE},
        "data": {contract.FILE: (folder / contract.FILE).read_text()},
        "binaryData": binary,
        **changes,
    }


class RegistryApiServer(FakeApiServer):
    configmap: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        self._record()
        self._reply(RegistryApiServer.configmap)


@pytest.fixture
def cluster(elsewhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[RegistryApiServer]]:
    FakeApiServer.requests = []
    RegistryApiServer.configmap = configmap(registry_folder())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), RegistryApiServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    use_kubeconfig(tmp_path, monkeypatch, EAST4, f"http://127.0.0.1:{httpd.server_port}")
    yield RegistryApiServer
    httpd.shutdown()


def test_fetch_reads_the_configmap_and_writes_the_registry(
    gkr: Callable[..., Result], cluster: type[RegistryApiServer], elsewhere: Path
) -> None:
    assert CliRunner().invoke(app, list(DRY_RUN)).exit_code == 2  # no registry here yet
    result = gkr("registry", "fetch", "--region", "us-east4")
    assert result.exit_code == 0, result.stderr
    (request,) = FakeApiServer.requests
    assert (request["method"], request["path"], request["authorization"]) == (
        "GET",
        f"/api/v1/namespaces/{contract.REGISTRY_NAMESPACE}/configmaps/{contract.REGISTRY_CONFIGMAP}",
        "Bearer t0ken",
    )
    fetched = registry.fetched_dir()
    assert (fetched / contract.FILE).read_text() == (registry_folder() / contract.FILE).read_text()
    for name in SCHEMAS:
        assert (fetched / contract.SCHEMAS_DIR / name).read_bytes() == (
            registry_folder() / contract.SCHEMAS_DIR / name
        ).read_bytes()
    assert result.stderr == (
        f"wrote {fetched / contract.FILE} and 2 schemas from ConfigMap "
        f"{contract.REGISTRY_NAMESPACE}/{contract.REGISTRY_CONFIGMAP} in {EAST4}\n"
    )
    # Now gkr works here without --registry, and a second fetch replaces the copy whole.
    dry = CliRunner().invoke(app, list(DRY_RUN))
    assert dry.exit_code == 0, dry.stderr
    assert gkr("registry", "fetch", "--context", EAST4).exit_code == 0
    assert [p.name for p in fetched.parent.iterdir()] == [registry.FETCHED]  # no temporary folder left


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda cm: cm["data"].update({contract.FILE: cm["data"][contract.FILE].replace(contract.SCHEMA, "x/v9")}),
            "registry.json: schema 'x/v9', this tool reads 'meridian.registry/v1'",
        ),
        (lambda cm: cm["data"].clear(), "no registry.json in its data"),
        (lambda cm: cm["data"].update({contract.FILE: "[" * 100_000 + "]" * 100_000}), "nested too deeply"),
        (lambda cm: cm["binaryData"].update({"../../evil.json.gz": ""}), "is not <schema file>.json.gz"),
        (lambda cm: cm["binaryData"].update({"x.json.gz": "!!"}), "binaryData x.json.gz: not a gzip'ed JSON schema"),
        (
            lambda cm: cm["binaryData"].update(
                {"x.json.gz": base64.b64encode(gzip.compress(b" " * (registry.MAX_SCHEMA_BYTES + 1))).decode()}
            ),
            "larger than",
        ),
        (
            lambda cm: cm["binaryData"].update({"x.json.gz": base64.b64encode(gzip.compress(b"[1]")).decode()}),
            "not a JSON object",
        ),
    ],
)
def test_fetch_refuses_a_bad_configmap_and_keeps_the_copy(
    gkr: Callable[..., Result],
    cluster: type[RegistryApiServer],
    change: Callable[[dict[str, Any]], None],
    words: str,
) -> None:
    assert gkr("registry", "fetch").exit_code == 0  # the current context
    before = (registry.fetched_dir() / contract.FILE).read_text()
    change(cluster.configmap)
    result = gkr("registry", "fetch", "--context", EAST4)
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: ConfigMap {contract.REGISTRY_NAMESPACE}/{contract.REGISTRY_CONFIGMAP} in {EAST4}")
    assert words in line
    assert (registry.fetched_dir() / contract.FILE).read_text() == before


def test_fetch_without_a_configmap_is_one_line_exit_1(
    gkr: Callable[..., Result], elsewhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_kubeconfig(tmp_path, monkeypatch, EAST4, "http://127.0.0.1:9")
    result = gkr("registry", "fetch", "--region", "us-east4")
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: reading ConfigMap {contract.REGISTRY_NAMESPACE}/{contract.REGISTRY_CONFIGMAP} in {EAST4} failed: "
        "connection refused\n"
    )


class NoConfigMap(FakeApiServer):
    def do_GET(self) -> None:
        self._record()
        self._reply({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)


def test_fetch_from_a_cluster_without_the_configmap_says_what_to_check(
    gkr: Callable[..., Result], elsewhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), NoConfigMap)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    use_kubeconfig(tmp_path, monkeypatch, EAST4, f"http://127.0.0.1:{httpd.server_port}")
    try:
        result = gkr("registry", "fetch")
    finally:
        httpd.shutdown()
    assert result.exit_code == 1
    assert result.stderr.endswith("failed: not found: is the cluster synced with the fleet's generated config?\n")
    assert not registry.fetched_dir().exists()


def test_which_context_fetch_reads() -> None:
    reg = shipped().registry
    gke = ["gke_p_us-east4_c", "gke_p_europe-west1_c", "kind-dev"]
    assert registry.source_context("us-east4", None, None, gke, None) == "gke_p_us-east4_c"
    assert registry.source_context(None, "kind-dev", None, gke, None) == "kind-dev"
    assert registry.source_context(None, None, None, gke, "kind-dev") == "kind-dev"
    assert registry.source_context("us-east4", None, reg, [EAST4], None) == EAST4  # the registry names it
    refusals = [
        (("us-east4", "kind-dev", None, gke, None), "pass --region or --context, not both"),
        (("us-central1", None, None, gke, None), "no GKE context for us-central1 in the kubeconfig; run: gcloud"),
        (("us-east4", None, None, [*gke, "gke_q_us-east4_d"], None), "2 GKE contexts for us-east4"),
        ((None, None, None, gke, None), "no current context"),
        ((None, "other", None, gke, None), "no context other in the kubeconfig; use one of"),
        (
            ("us-east4", None, reg, gke, None),
            f"no context {EAST4} in the kubeconfig; run: gcloud container clusters get-credentials meridian-us-east4",
        ),
    ]
    for args, words in refusals:
        with pytest.raises(Invalid) as refused:
            registry.source_context(*args)
        assert words in refused.value.lines[0], (args, refused.value.lines)


def test_store_replaces_the_copy_whole(tmp_path: Path) -> None:
    target = tmp_path / "registry"
    registry.store('{"old": 1}', {"a.json": b"{}"}, target)
    registry.store('{"new": 1}', {"b.json": b"{}"}, target)
    assert json.loads((target / contract.FILE).read_text()) == {"new": 1}
    assert [p.name for p in (target / contract.SCHEMAS_DIR).iterdir()] == ["b.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["registry"]  # no temporary folder left
