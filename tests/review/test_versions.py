"""The versions section: control planes (through their data sources), node pools, Argo CD sources, images."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from meridian_infra.synth import synth
from review.versions import VersionChange, gpu_hold, is_upgrade_risk, split_image, version_changes

NOW = datetime(2026, 12, 2, tzinfo=UTC)
LOOKUP = (
    '${lookup(data.google_container_engine_versions.versions.release_channel_latest_version, "REGULAR", '
    "data.google_container_engine_versions.versions.latest_master_version)}"
)
HOLD = {
    "exclusion_name": "hold-node-upgrades",
    "start_time": "2026-12-01T00:00:00Z",
    "exclusion_options": {"scope": "NO_MINOR_OR_NODE_UPGRADES", "end_time_behavior": "UNTIL_END_OF_SUPPORT"},
}
HELD = "GPU node pools held back by exclusion hold-node-upgrades until end of support"
NOT_HELD = "NOT held back: node upgrades reach GPU pools"


def pool(name: str, gpu: bool = True, **extra: Any) -> dict[str, Any]:
    node_config: dict[str, Any] = {"machine_type": "a3-ultragpu-8g" if gpu else "n2-standard-32"}
    if gpu:
        node_config["guest_accelerator"] = [
            {
                "type": "nvidia-h200-141gb",
                "count": 8,
                "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"},
            }
        ]
    return {
        "name": name,
        "cluster": "${google_container_cluster.cluster.id}",
        "management": {"auto_repair": True, "auto_upgrade": True},
        "upgrade_settings": {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1},
        "node_config": node_config,
        **extra,
    }


def stack(region: str, minor: str = "1.35", exclusions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cluster = {
        "name": f"meridian-{region}",
        "min_master_version": LOOKUP,
        "release_channel": {"channel": "REGULAR"},
        "maintenance_policy": {"maintenance_exclusion": [HOLD] if exclusions is None else exclusions},
    }
    return {
        "data": {"google_container_engine_versions": {"versions": {"location": region, "version_prefix": f"{minor}."}}},
        "resource": {
            "google_container_cluster": {"cluster": cluster},
            "google_container_node_pool": {"pool_h200-a": pool("h200-a"), "pool_cpu": pool("cpu", gpu=False)},
        },
    }


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[VersionChange]:
    return version_changes(before, after, {}, {}, now=NOW)


def edited(stacks: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(stacks)
    for s in out.values():
        edit(s)
    return out


def _cluster(s: dict[str, Any]) -> dict[str, Any]:
    cluster: dict[str, Any] = s["resource"]["google_container_cluster"]["cluster"]
    return cluster


def _pool(s: dict[str, Any], name: str = "h200-a") -> dict[str, Any]:
    found: dict[str, Any] = s["resource"]["google_container_node_pool"][f"pool_{name}"]
    return found


def test_a_new_minor_reaches_the_control_plane_through_the_data_source_only() -> None:
    before = {"us-central1": stack("us-central1"), "us-east4": stack("us-east4")}
    after = {"us-central1": stack("us-central1", "1.36"), "us-east4": stack("us-east4", "1.36")}
    found = changes(before, after)
    assert [c.line() for c in found] == [
        "control plane of meridian-us-central1, meridian-us-east4: 1.35 -> 1.36 "
        "(through data.google_container_engine_versions.versions version_prefix)",
        f"GPU node pools of meridian-us-central1, meridian-us-east4: 1.35 -> 1.36 "
        f"(auto-upgrade follows the control plane; {HELD})",
    ]
    assert all(c.approval for c in found)
    assert is_upgrade_risk(found)
    assert changes(before, before) == []


def test_other_inputs_of_the_control_plane_version() -> None:
    before = {"us-east4": stack("us-east4")}

    def location(s: dict[str, Any]) -> None:
        s["data"]["google_container_engine_versions"]["versions"]["location"] = "us-east4-a"

    def channel(s: dict[str, Any]) -> None:
        _cluster(s)["release_channel"] = {"channel": "RAPID"}

    def literal(s: dict[str, Any]) -> None:
        _cluster(s)["min_master_version"] = "1.36.2-gke.1000"

    assert [c.line() for c in changes(before, edited(before, location))] == [
        "control plane of meridian-us-east4: 1.35 -> 1.35 "
        "(through data.google_container_engine_versions.versions location)"
    ]
    assert [c.line() for c in changes(before, edited(before, channel))] == [
        "control plane of meridian-us-east4: 1.35 on REGULAR -> 1.35 on RAPID (release channel REGULAR -> RAPID)"
    ]
    found = changes(before, edited(before, literal))
    assert found[0].line() == (
        "control plane of meridian-us-east4: 1.35 -> 1.36.2-gke.1000 (through data.google_container_engine_versions"
        ".versions location, version_prefix; min_master_version changes)"
    )
    assert found[1].what == "GPU node pools"


@pytest.mark.parametrize(
    ("exclusion", "expected"),
    [
        (HOLD, HELD),
        (
            {
                **HOLD,
                "end_time": "2026-12-20T00:00:00Z",
                "exclusion_options": {"scope": "NO_UPGRADES"},
            },
            "GPU node pools held back by exclusion hold-node-upgrades until 2026-12-20T00:00:00Z",
        ),
        ({**HOLD, "end_time": "2026-12-01T12:00:00Z", "exclusion_options": {"scope": "NO_UPGRADES"}}, NOT_HELD),
        (
            {**HOLD, "exclusion_options": {"scope": "NO_MINOR_UPGRADES", "end_time_behavior": "UNTIL_END_OF_SUPPORT"}},
            NOT_HELD,
        ),
        (
            {**HOLD, "start_time": "2027-01-01T00:00:00Z"},
            f"{NOT_HELD} until exclusion hold-node-upgrades starts at 2027-01-01T00:00:00Z",
        ),
    ],
    ids=["until-end-of-support", "no-upgrades-until-a-date", "ended", "minor-only", "not-yet-started"],
)
def test_whether_exclusions_hold_gpu_pools_back(exclusion: dict[str, Any], expected: str) -> None:
    assert gpu_hold({"maintenance_policy": {"maintenance_exclusion": [exclusion]}}, NOW) == expected


def test_without_exclusions_the_upgrade_reaches_gpu_pools() -> None:
    found = changes({"us-east4": stack("us-east4", exclusions=[])}, {"us-east4": stack("us-east4", "1.36", [])})
    assert found[1].line() == (
        f"GPU node pools of meridian-us-east4: 1.35 -> 1.36 (auto-upgrade follows the control plane; {NOT_HELD})"
    )


def test_gpu_pools_with_their_own_version_do_not_follow_the_control_plane() -> None:
    def pinned(s: dict[str, Any]) -> None:
        _pool(s)["version"] = "1.35.3-gke.100"

    before = edited({"us-east4": stack("us-east4")}, pinned)
    after = edited({"us-east4": stack("us-east4", "1.36")}, pinned)
    assert [c.what for c in changes(before, after)] == ["control plane"]


def test_node_pool_changes() -> None:
    before = {"us-central1": stack("us-central1"), "us-east4": stack("us-east4", exclusions=[])}

    def version(s: dict[str, Any]) -> None:
        _pool(s)["version"] = "1.35.3-gke.100"

    def auto_upgrade_and_surge(s: dict[str, Any]) -> None:
        _pool(s)["management"]["auto_upgrade"] = False
        _pool(s)["upgrade_settings"]["max_surge"] = 1
        _pool(s, "cpu")["upgrade_settings"]["strategy"] = "BLUE_GREEN"

    found = changes(before, edited(before, version))
    assert [c.line() for c in found] == [
        "node pool h200-a of meridian-us-central1, meridian-us-east4: version of the control plane -> "
        "version 1.35.3-gke.100 (applied by Terraform: maintenance exclusions do not hold it back)"
    ]
    found = changes(before, edited(before, auto_upgrade_and_surge))
    assert [c.line() for c in found] == [
        "node pool h200-a of meridian-us-central1: auto_upgrade true, upgrade_settings.max_surge 0 -> "
        f"auto_upgrade false, upgrade_settings.max_surge 1 ({HELD})",
        "node pool cpu of meridian-us-central1, meridian-us-east4: upgrade_settings.strategy SURGE -> "
        "upgrade_settings.strategy BLUE_GREEN",
        "node pool h200-a of meridian-us-east4: auto_upgrade true, upgrade_settings.max_surge 0 -> "
        f"auto_upgrade false, upgrade_settings.max_surge 1 ({NOT_HELD})",
    ]
    assert all(c.approval for c in found)

    def short_lived(s: dict[str, Any]) -> None:
        _pool(s)["upgrade_settings"] = {"strategy": "SHORT_LIVED"}

    (found_one,) = changes(before, edited({"us-central1": before["us-central1"]}, short_lived))
    assert (found_one.before, found_one.after) == (
        "upgrade_settings.strategy SURGE, upgrade_settings.max_surge 0, upgrade_settings.max_unavailable 1",
        "upgrade_settings.strategy SHORT_LIVED, upgrade_settings.max_surge unset, upgrade_settings.max_unavailable unset",
    )


def test_what_is_created_or_deleted_is_not_a_version_change() -> None:
    before = {"us-east4": stack("us-east4")}
    after = {"us-east4": stack("us-east4"), "europe-west1": stack("europe-west1", "1.36")}
    del after["us-east4"]["resource"]["google_container_node_pool"]["pool_cpu"]
    assert changes(before, after) == []


def application(name: str, **source: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {"project": "platform", "source": source},
    }


def deployment(name: str, *images: str, init: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]}
    if init:
        spec["initContainers"] = [{"name": "init", "image": init}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "meridian-system"},
        "spec": {"template": {"spec": spec}},
    }


WARDEN = "us-docker.pkg.dev/meridian-train-prod/meridian/warden"
KUEUE = {"repoURL": "registry.k8s.io/kueue/charts", "chart": "kueue"}
KUBERAY_CRDS = {"repoURL": "https://github.com/ray-project/kuberay.git", "path": "ray-operator/config/crd"}


def test_chart_and_source_versions_grouped_across_clusters() -> None:
    def objects(kueue: str, kuberay: str, repo: str = str(KUEUE["repoURL"])) -> list[dict[str, Any]]:
        return [
            application("kueue", **{**KUEUE, "repoURL": repo, "targetRevision": kueue}),
            application("kuberay-crds", **KUBERAY_CRDS, targetRevision=kuberay),
        ]

    before = {"meridian-us-central1": objects("0.19.2", "v1.7.0"), "meridian-us-east4": objects("0.19.2", "v1.7.0")}
    after = {
        "meridian-us-central1": objects("0.20.0", "v1.7.0"),
        "meridian-us-east4": objects("0.20.0", "v1.8.0", repo="oci://mirror.example/kueue"),
    }
    found = version_changes({}, {}, before, after, now=NOW)
    assert [c.line() for c in found] == [
        "chart kueue of meridian-us-central1: 0.19.2 -> 0.20.0",
        "chart kueue of meridian-us-east4: 0.19.2 -> 0.20.0 "
        "(repository registry.k8s.io/kueue/charts -> oci://mirror.example/kueue)",
        "application kuberay-crds of meridian-us-east4: v1.7.0 -> v1.8.0",
    ]
    assert all(c.approval for c in found)


def test_image_pins_in_every_container_and_custom_resource() -> None:
    ray_cluster: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r", "namespace": "team-a"},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "trainer:0.1.0"}]}}}},
    }
    before = {
        "meridian-us-central1": [deployment("warden", f"{WARDEN}:0.1.0", init="busybox"), ray_cluster],
        "meridian-us-east4": [deployment("warden", f"{WARDEN}:0.1.0")],
    }
    moved = copy.deepcopy(ray_cluster)
    moved["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = "trainer:0.2.0"
    after = {
        "meridian-us-central1": [deployment("warden", f"{WARDEN}:0.2.0", init="busybox:1.37"), moved],
        "meridian-us-east4": [deployment("warden", f"{WARDEN}:0.2.0", "localhost:5000/sidecar:1")],
    }
    found = version_changes({}, {}, before, after, now=NOW)
    assert [c.line() for c in found] == [
        f"image warden of meridian-us-central1, meridian-us-east4: 0.1.0 -> 0.2.0 ({WARDEN})",
        "image busybox of meridian-us-central1: latest (no tag) -> 1.37 (busybox)",
        "image trainer of meridian-us-central1: 0.1.0 -> 0.2.0 (trainer)",
        "image sidecar of meridian-us-east4: (none) -> 1 (localhost:5000/sidecar)",
    ]
    assert not is_upgrade_risk(found)


def test_a_weakened_image_pin_needs_approval() -> None:
    digest = "sha256:" + "a" * 64
    before = {"c": [deployment("warden", f"{WARDEN}:0.1.0@{digest}")]}
    (dropped,) = version_changes({}, {}, before, {"c": [deployment("warden", f"{WARDEN}:0.1.0")]}, now=NOW)
    assert dropped.approval
    assert dropped.note == f"{WARDEN}; the pin is weakened: digest removed"
    (untagged,) = version_changes({}, {}, before, {"c": [deployment("warden", WARDEN)]}, now=NOW)
    assert untagged.approval


def test_images_in_terraform_and_in_helm_values() -> None:
    def service(image: str) -> dict[str, Any]:
        return {"resource": {"google_cloud_run_v2_service": {"s": {"template": {"containers": [{"image": image}]}}}}}

    found = version_changes({"global": service("gcr.io/p/api:1")}, {"global": service("gcr.io/p/api:2")}, {}, {})
    assert [c.line() for c in found] == ["image api of global: 1 -> 2 (gcr.io/p/api)"]

    def values(tag: str) -> dict[str, Any]:
        return application("kueue", **KUEUE, targetRevision="0.19.2", helm={"valuesObject": {"controllerManager": {
            "manager": {"image": {"repository": "registry.k8s.io/kueue/kueue", "tag": tag}}}}})  # fmt: skip

    found = version_changes({}, {}, {"c": [values("v0.19.2")]}, {"c": [values("v0.19.3")]}, now=NOW)
    assert [c.line() for c in found] == ["image kueue of c: v0.19.2 -> v0.19.3 (registry.k8s.io/kueue/kueue)"]


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("us-docker.pkg.dev/p/r/warden:0.1.0", ("us-docker.pkg.dev/p/r/warden", "0.1.0")),
        ("localhost:5000/x", ("localhost:5000/x", "latest (no tag)")),
        ("gke.gcr.io/pause:3.8@sha256:ab", ("gke.gcr.io/pause", "3.8@sha256:ab")),
        ("busybox@sha256:ab", ("busybox", "@sha256:ab")),
    ],
)
def test_split_image(reference: str, expected: tuple[str, str]) -> None:
    assert split_image(reference) == expected


def test_the_shipped_fleet_to_kubernetes_1_36(
    spec: dict[str, Any], write_spec: Callable[[dict[str, Any]], Path], tmp_path: Path
) -> None:
    """Issue 26: the stacks' resources do not change, the three control planes do."""
    before = synth(Path(__file__).resolve().parents[2] / "fleet.yaml", tmp_path / "before" / "cdktf.out")
    spec["versions"]["kubernetes"] = "1.36"
    after = synth(write_spec(spec), tmp_path / "after" / "cdktf.out")
    clusters = ("meridian-us-central1", "meridian-us-east4", "meridian-europe-west1")
    assert [c.line() for c in version_changes(before, after, {}, {}, now=NOW)] == [
        # min_master_version is fleet.yaml's minor itself (infra cluster.py), no data source between.
        f"control plane of {', '.join(clusters)}: 1.35 -> 1.36 (min_master_version changes)",
        f"GPU node pools of {', '.join(clusters)}: 1.35 -> 1.36 (auto-upgrade follows the control plane; {HELD})",
    ]
