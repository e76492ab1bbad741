"""twin.pods: a pod read as the kubelet reads it, each rule on a small pod (pure, no podman)."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from twin.env import DEFAULT_PATH, Node, expand
from twin.podman import PodContext, podman_argv
from twin.pods import ContainerPlan, ImageConfig, Objects, PodError, PodPlan, plan
from twin.security import DEFAULT_CAPS
from twin.volumes import StandIns, VolumePlan

VENV_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The trainer image as platform/trainer/Dockerfile builds it.
TRAINER = ImageConfig(
    entrypoint=("python", "train.py"),
    cmd=("configs/config.yaml", "--help"),
    env={"PATH": VENV_PATH, "PYTHONUNBUFFERED": "1"},
    workdir="/opt/trainer",
    user="1000",
)
NODE = Node(cpu="16", memory="64Gi")
HOST = StandIns(host={"/home/kubernetes/bin/nvidia": "/twin/nvidia"}, buckets="/twin/buckets")


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod named p in namespace team-a, scheduled and given its IP, with these containers."""
    return {
        "metadata": {
            "name": "p",
            "namespace": "team-a",
            "uid": "u-1",
            "labels": {"app": "x"},
            "annotations": {"note": 'a "b"'},
        },
        "spec": {"nodeName": "twin-node", "serviceAccountName": "trainer", "containers": list(containers), **spec},
        "status": {"podIP": "10.88.0.7", "hostIP": "10.0.0.2"},
    }


def main(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "trainer", **fields}


def run(
    p: dict[str, Any], image: ImageConfig = TRAINER, objects: Objects | None = None, node: Node | None = NODE
) -> PodPlan:
    return plan(p, lambda _: image, objects or Objects(), HOST, node=node)


def one(p: dict[str, Any], **kw: Any) -> ContainerPlan:
    return run(p, **kw).containers[0]


def fails(p: dict[str, Any], *words: str, **kw: Any) -> str:
    with pytest.raises(PodError) as e:
        run(p, **kw)
    line = e.value.line
    assert "\n" not in line
    assert line.startswith("pod team-a/p")
    for word in words:
        assert word in line
    return line


def ctx(**kw: Any) -> PodContext:
    return PodContext(name="team-a-p-main", network="ns:/run/netns/p", termination_log="/twin/p/main.log", **kw)


def after(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == option]


# --- $(VAR) expansion (third_party/forked/golang/expansion/expand.go)


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$(A)/bin", "a/bin"),
        ("$$(A)", "$(A)"),  # an escaped reference is never expanded
        ("$(MISSING)", "$(MISSING)"),  # unresolvable: left as is
        ("$$", "$"),
        ("$$$(A)", "$a"),
        ("$x $", "$x $"),
        ("$(A", "$(A"),
        ("$()", "$()"),
        ("$(A)$(A)", "aa"),
    ],
)
def test_expansion_follows_kubernetes(text: str, expanded: str) -> None:
    assert expand(text, {"A": "a"}.get) == expanded


# --- command and args over the image's ENTRYPOINT and CMD


@pytest.mark.parametrize(
    ("fields", "argv"),
    [
        ({}, ("python", "train.py", "configs/config.yaml", "--help")),
        ({"args": ["configs/x.yaml"]}, ("python", "train.py", "configs/x.yaml")),
        ({"command": ["bash", "-c", "true"]}, ("bash", "-c", "true")),  # the image's CMD is dropped too
        ({"command": ["sleep"], "args": ["1"]}, ("sleep", "1")),
    ],
)
def test_command_replaces_entrypoint_and_args_replace_cmd(fields: dict[str, Any], argv: tuple[str, ...]) -> None:
    assert one(pod(main(**fields))).argv == argv


def test_an_empty_string_entrypoint_is_no_entrypoint() -> None:
    image = ImageConfig(entrypoint=("",), cmd=("serve",))
    assert one(pod(main()), image=image).argv == ("serve",)


def test_no_command_anywhere_is_refused() -> None:
    fails(pod(main()), "no command specified", image=ImageConfig())


def test_command_and_args_expand_against_the_container_env() -> None:
    c = main(
        command=["echo", "$(POD)", "$$(POD)", "$(NOPE)"],
        args=["$(GREETING)"],
        env=[
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "GREETING", "value": "hi $(POD)"},
        ],
    )
    assert one(pod(c)).argv == ("echo", "p", "$(POD)", "$(NOPE)", "hi p")


# --- env


def test_a_container_path_replaces_the_image_path_issue_37() -> None:
    """gkr's preflight init container sets PATH; /opt/venv/bin (where preflight lives) is gone."""
    c = main(env=[{"name": "PATH", "value": "/usr/local/nvidia/bin:/usr/local/bin:/usr/bin:/bin"}])
    env = one(pod(c)).env
    assert env["PATH"] == "/usr/local/nvidia/bin:/usr/local/bin:/usr/bin:/bin"
    assert "/opt/venv/bin" not in env["PATH"]
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["HOSTNAME"] == "p"


def test_the_kubelet_never_sees_the_image_env() -> None:
    c = main(env=[{"name": "PATH", "value": "/extra:$(PATH)"}])
    assert one(pod(c)).env["PATH"] == "/extra:$(PATH)"


def test_an_image_without_path_gets_containerds_default() -> None:
    assert one(pod(main()), image=ImageConfig(cmd=("x",))).env == {"PATH": DEFAULT_PATH, "HOSTNAME": "p"}


def test_env_values_see_only_earlier_entries() -> None:
    c = main(env=[{"name": "A", "value": "$(B)"}, {"name": "B", "value": "b"}, {"name": "C", "value": "$(B)c"}])
    env = one(pod(c)).env
    assert (env["A"], env["C"]) == ("$(B)", "bc")


def objects() -> Objects:
    return Objects(
        config_maps={
            "cfg": {
                "data": {"MODE": "fast", "LEVEL": "3"},
                "binaryData": {"blob": base64.b64encode(b"\x00\x01").decode()},
            }
        },
        secrets={"sec": {"data": {"TOKEN": base64.b64encode(b"t0k").decode()}, "stringData": {"USER": "u"}}},
    )


def test_env_from_with_prefix_under_env() -> None:
    c = main(
        envFrom=[
            {"configMapRef": {"name": "cfg"}, "prefix": "CFG_"},
            {"secretRef": {"name": "sec"}},
            {"configMapRef": {"name": "gone", "optional": True}},
        ],
        env=[{"name": "CFG_MODE", "value": "slow $(USER)"}],
    )
    env = one(pod(c), objects=objects()).env
    assert (env["CFG_MODE"], env["CFG_LEVEL"], env["TOKEN"], env["USER"]) == ("slow u", "3", "t0k", "u")
    assert "gone" not in str(env)


def test_a_missing_env_from_object_is_refused() -> None:
    fails(pod(main(envFrom=[{"secretRef": {"name": "gone"}}])), "Secret 'gone'", "envFrom[0]")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "p"),
        ("metadata.namespace", "team-a"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['app']", "x"),
        ("metadata.annotations['note']", 'a "b"'),
        ("metadata.labels['absent']", ""),
        ("spec.nodeName", "twin-node"),
        ("spec.serviceAccountName", "trainer"),
        ("status.podIP", "10.88.0.7"),
        ("status.podIPs", "10.88.0.7"),
        ("status.hostIP", "10.0.0.2"),
    ],
)
def test_field_refs(path: str, value: str) -> None:
    c = main(env=[{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": path}}}])
    assert one(pod(c)).env["V"] == value


def test_a_whole_label_map_is_not_an_env_field() -> None:
    fails(
        pod(main(env=[{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}])), "metadata.labels"
    )


@pytest.mark.parametrize(
    ("ref", "value"),
    [
        ({"resource": "limits.cpu"}, "1"),  # 250m rounded up to a whole core
        ({"resource": "limits.cpu", "divisor": "1m"}, "250"),
        ({"resource": "requests.cpu", "divisor": "1m"}, "250"),  # an unset request takes the limit
        ({"resource": "limits.memory", "divisor": "1Mi"}, str(64 * 1024)),  # no limit: the node's allocatable
        ({"resource": "requests.memory", "divisor": "1Mi"}, "512"),
        ({"resource": "requests.memory", "divisor": "1Gi"}, "1"),  # rounded up
    ],
)
def test_resource_field_refs(ref: dict[str, str], value: str) -> None:
    resources = {"limits": {"cpu": "250m"}, "requests": {"memory": "512Mi"}}
    c = main(resources=resources, env=[{"name": "V", "valueFrom": {"resourceFieldRef": ref}}])
    assert one(pod(c)).env["V"] == value


def test_a_limit_from_the_node_needs_the_node() -> None:
    c = main(env=[{"name": "V", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}])
    fails(pod(c), "node=", node=None)


def test_key_refs_and_optional_keys() -> None:
    c = main(
        env=[
            {"name": "M", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "MODE"}}},
            {"name": "T", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}}},
            {"name": "O", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "nope", "optional": True}}},
        ]
    )
    env = one(pod(c), objects=objects()).env
    assert (env["M"], env["T"], "O" in env) == ("fast", "t0k", False)
    missing = main(env=[{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope"}}}])
    fails(pod(missing), "no key 'nope'", objects=objects())


# --- working directory and user


@pytest.mark.parametrize(
    ("fields", "image", "workdir"),
    [({"workingDir": "/w"}, TRAINER, "/w"), ({}, TRAINER, "/opt/trainer"), ({}, ImageConfig(cmd=("x",)), "/")],
)
def test_working_dir(fields: dict[str, Any], image: ImageConfig, workdir: str) -> None:
    assert one(pod(main(**fields)), image=image).workdir == workdir


@pytest.mark.parametrize(
    ("pod_sc", "sc", "image_user", "user", "root"),
    [
        ({}, {}, "1000", "1000", False),
        ({}, {}, "1000:1000", "1000", False),  # the image's group is dropped; /etc/passwd gives it
        ({}, {}, "", "0", True),
        ({}, {}, "root", "root", True),
        ({"runAsUser": 2000, "runAsGroup": 3000}, {}, "1000", "2000:3000", False),
        ({"runAsUser": 2000}, {"runAsUser": 0}, "1000", "0", True),  # the container's field wins
        ({"runAsGroup": 5}, {}, "1000", "1000:5", False),
    ],
)
def test_user(pod_sc: dict[str, int], sc: dict[str, int], image_user: str, user: str, root: bool) -> None:
    image = ImageConfig(cmd=("x",), user=image_user)
    security = one(pod(main(securityContext=sc), securityContext=pod_sc), image=image).security
    assert (security.user, security.root) == (user, root)


@pytest.mark.parametrize(
    ("sc", "image_user", "message"),
    [
        ({"runAsUser": 0}, "1000", "container's runAsUser breaks non-root policy"),
        ({}, "", "container has runAsNonRoot and image will run as root"),
        ({}, "0", "container has runAsNonRoot and image will run as root"),
        ({}, "root", "image has non-numeric user (root), cannot verify user is non-root"),
        ({}, "trainer", "image has non-numeric user (trainer)"),
    ],
)
def test_run_as_non_root_refuses_root(sc: dict[str, int], image_user: str, message: str) -> None:
    p = pod(main(securityContext=sc), securityContext={"runAsNonRoot": True})
    line = fails(
        p,
        "CreateContainerConfigError",
        message,
        'pod: "p_team-a(u-1)", container: main',
        image=ImageConfig(cmd=("x",), user=image_user),
    )
    assert "container main" in line


def test_run_as_non_root_lets_a_numeric_user_run() -> None:
    assert one(pod(main(securityContext={"runAsNonRoot": True}))).security.user == "1000"


# --- capabilities (containerd's default set, no ambient capabilities)


def test_root_gets_containerds_default_capabilities() -> None:
    c = one(pod(main()), image=ImageConfig(cmd=("x",)))
    assert c.security.capabilities == DEFAULT_CAPS
    assert len(DEFAULT_CAPS) == 14
    argv = podman_argv(c, ctx())
    assert after(argv, "--cap-drop") == ["ALL"]
    assert sorted(after(argv, "--cap-add")) == sorted(DEFAULT_CAPS)


def test_a_non_root_process_gets_no_capabilities_whatever_add_says_issue_37() -> None:
    """The preflight init container: runAsUser 1000 (the image's), add SYSLOG: no SYSLOG (kubernetes#56374)."""
    c = one(
        pod(
            main(
                securityContext={
                    "runAsUser": 1000,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"add": ["SYSLOG"]},
                }
            )
        )
    )
    assert c.security.capabilities == frozenset()
    assert "SYSLOG" in c.security.bounding
    argv = podman_argv(c, ctx())
    assert after(argv, "--cap-drop") == ["ALL"]
    assert after(argv, "--cap-add") == []


def test_root_with_drop_all_add_syslog_holds_exactly_syslog() -> None:
    c = one(pod(main(securityContext={"runAsUser": 0, "capabilities": {"drop": ["ALL"], "add": ["SYSLOG"]}})))
    assert c.security.capabilities == {"SYSLOG"}
    argv = podman_argv(c, ctx())
    assert after(argv, "--cap-drop") == ["ALL"]
    assert after(argv, "--cap-add") == ["SYSLOG"]


def test_a_dropped_capability_beats_an_added_one() -> None:
    c = one(
        pod(main(securityContext={"runAsUser": 0, "capabilities": {"add": ["NET_ADMIN", "KILL"], "drop": ["KILL"]}}))
    )
    assert "NET_ADMIN" in c.security.capabilities
    assert "KILL" not in c.security.capabilities


def test_a_capability_with_cap_prefix_is_refused() -> None:
    fails(pod(main(securityContext={"capabilities": {"add": ["CAP_SYSLOG"]}})), "write SYSLOG")


def test_privileged_is_refused() -> None:
    fails(pod(main(securityContext={"privileged": True})), "container main", "securityContext.privileged")


def test_no_new_privileges_read_only_root_and_seccomp() -> None:
    sc = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    c = one(pod(main(securityContext=sc)))
    argv = podman_argv(c, ctx())
    assert after(argv, "--security-opt") == ["no-new-privileges"]
    assert "--read-only" in argv
    assert "--read-only-tmpfs=false" in argv
    unset = podman_argv(one(pod(main())), ctx())
    assert after(unset, "--security-opt") == ["seccomp=unconfined"]
    assert "--read-only" not in unset


def test_fs_group_and_supplemental_groups() -> None:
    c = one(pod(main(), securityContext={"fsGroup": 100, "supplementalGroups": [200, 100]}))
    assert c.security.groups == (100, 200)


# --- volumes and mounts


def volumes_pod(*volumes: dict[str, Any], mounts: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return pod(main(volumeMounts=mounts or []), volumes=list(volumes), **spec)


def test_empty_dirs() -> None:
    p = volumes_pod(
        {"name": "scratch", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "big", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ti"}},
    )
    v = run(p).volumes
    assert (v["scratch"].kind, v["scratch"].mode) == ("emptyDir", 0o777)
    assert (v["shm"].kind, v["shm"].size_bytes, v["big"].size_bytes) == (
        "tmpfs",
        2**30,
        64 * 2**30,
    )  # capped by the node


def test_a_memory_empty_dir_is_capped_by_the_pod_memory_limit() -> None:
    p = pod(main(resources={"limits": {"memory": "2Gi"}}), volumes=[{"name": "shm", "emptyDir": {"medium": "Memory"}}])
    assert run(p).volumes["shm"].size_bytes == 2 * 2**30


def files(v: VolumePlan) -> dict[str, tuple[bytes, int]]:
    return {f.path: (f.data, f.mode) for f in v.files}


def test_config_map_and_secret_volumes() -> None:
    p = volumes_pod(
        {"name": "all", "configMap": {"name": "cfg"}},
        {
            "name": "some",
            "configMap": {
                "name": "cfg",
                "items": [{"key": "MODE", "path": "conf/mode", "mode": 0o600}],
                "defaultMode": 0o440,
            },
        },
        {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 292}},
        {"name": "gone", "secret": {"secretName": "gone", "optional": True}},
    )
    v = run(p, objects=objects()).volumes
    assert files(v["all"]) == {"LEVEL": (b"3", 0o644), "MODE": (b"fast", 0o644), "blob": (b"\x00\x01", 0o644)}
    assert files(v["some"]) == {"conf/mode": (b"fast", 0o600)}
    assert files(v["sec"]) == {"TOKEN": (b"t0k", 0o444), "USER": (b"u", 0o444)}
    assert files(v["gone"]) == {}
    assert all(x.read_only for x in v.values())


@pytest.mark.parametrize(
    ("volume", "words"),
    [
        ({"name": "v", "configMap": {"name": "gone"}}, ("ConfigMap 'gone'",)),
        ({"name": "v", "configMap": {"name": "cfg", "items": [{"key": "nope", "path": "x"}]}}, ("no key 'nope'",)),
        ({"name": "v", "configMap": {"name": "cfg", "items": [{"key": "MODE", "path": "../x"}]}}, ("'../x'",)),
        ({"name": "v", "secret": {"secretName": "sec", "defaultMode": 0o1777}}, ("0777",)),
        ({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}, ("persistentVolumeClaim", "not modeled")),
        ({"name": "v", "hostPath": {"path": "/var/lib/nope"}}, ("no stand-in", "/var/lib/nope")),
        ({"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}, ("API server",)),
    ],
)
def test_volumes_the_kubelet_or_the_twin_refuses(volume: dict[str, Any], words: tuple[str, ...]) -> None:
    fails(volumes_pod(volume), *words, objects=objects())


def test_a_secret_that_is_not_base64_is_refused() -> None:
    bad = Objects(secrets={"s": {"data": {"k": "not base64!"}}})
    fails(volumes_pod({"name": "v", "secret": {"secretName": "s"}}), "Secret s", "not base64", objects=bad)


def test_downward_api_and_projected_volumes() -> None:
    p = volumes_pod(
        {
            "name": "info",
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                    {
                        "path": "mem",
                        "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Gi"},
                        "mode": 0o400,
                    },
                ]
            },
        },
        {
            "name": "all",
            "projected": {
                "sources": [
                    {"configMap": {"name": "cfg", "items": [{"key": "MODE", "path": "mode"}]}},
                    {"secret": {"name": "sec"}},
                    {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                ]
            },
        },
    )
    v = run(p, objects=objects()).volumes
    assert files(v["info"]) == {
        "labels": (b'app="x"', 0o644),
        "annotations": (b'note="a \\"b\\""', 0o644),
        "mem": (b"64", 0o400),
    }
    assert files(v["all"]) == {
        "mode": (b"fast", 0o644),
        "TOKEN": (b"t0k", 0o644),
        "USER": (b"u", 0o644),
        "name": (b"p", 0o644),
    }


def test_a_labels_file_quotes_as_go_does() -> None:
    p = volumes_pod(
        {"name": "info", "downwardAPI": {"items": [{"path": "a", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}
    )
    p["metadata"]["annotations"] = {"z": "tab\there", "a": 'bell\x07 \x01 é \\ "'}
    assert files(run(p).volumes["info"]) == {
        "a": (rb'a="bell\a \x01 ' + "é".encode() + rb' \\ \""' + b"\n" + rb'z="tab\there"', 0o644)
    }


def test_objects_from_rendered_documents() -> None:
    docs = [
        {"kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "team-a"}, "data": {"k": "v"}},
        {"kind": "ConfigMap", "metadata": {"name": "other", "namespace": "team-b"}, "data": {}},
        {"kind": "Secret", "metadata": {"name": "s", "namespace": "team-a"}, "stringData": {"k": "v"}},
        {"kind": "Service", "metadata": {"name": "svc", "namespace": "team-a"}},
        "not a mapping",
    ]
    found = Objects.from_documents(docs, "team-a")
    assert (sorted(found.config_maps), sorted(found.secrets)) == (["cfg"], ["s"])


def test_fs_group_owns_the_api_volumes() -> None:
    p = volumes_pod(
        {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
        {"name": "e", "emptyDir": {}},
        securityContext={"fsGroup": 7},
    )
    v = run(p, objects=objects()).volumes
    assert v["sec"].gid == 7
    assert {f.mode for f in v["sec"].files} == {0o440}
    assert (v["e"].gid, v["e"].mode) == (7, 0o2777)


def test_host_paths_and_gcsfuse_stand_ins() -> None:
    options = "implicit-dirs,only-dir=teams/research"
    p = volumes_pod(
        {"name": "nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
        {
            "name": "ckpt",
            "csi": {
                "driver": "gcsfuse.csi.storage.gke.io",
                "volumeAttributes": {"bucketName": "b", "mountOptions": options},
            },
        },
        {
            "name": "data",
            "csi": {"driver": "gcsfuse.csi.storage.gke.io", "readOnly": True, "volumeAttributes": {"bucketName": "d"}},
        },
    )
    v = run(p).volumes
    assert (v["nvidia"].source, v["ckpt"].source, v["data"].source) == (
        "/twin/nvidia",
        "/twin/buckets/b/teams/research",
        "/twin/buckets/d",
    )
    assert v["data"].read_only
    assert not v["ckpt"].read_only
    escape = volumes_pod(
        {
            "name": "x",
            "csi": {
                "driver": "gcsfuse.csi.storage.gke.io",
                "volumeAttributes": {"bucketName": "b", "mountOptions": "only-dir=../../etc"},
            },
        }
    )
    fails(escape, "no stand-in")


def test_mounts() -> None:
    mounts = [
        {"name": "cfg", "mountPath": "/etc/cfg"},  # an API volume is read-only whatever the mount says
        {"name": "scratch", "mountPath": "data", "subPathExpr": "$(POD)/out"},
        {"name": "scratch", "mountPath": "/ro", "readOnly": True, "subPath": "a"},
    ]
    c = main(volumeMounts=mounts, env=[{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    p = pod(c, volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "scratch", "emptyDir": {}}])
    got = [(m.volume, m.path, m.read_only, m.sub_path) for m in one(p, objects=objects()).mounts]
    assert got == [("cfg", "/etc/cfg", True, ""), ("scratch", "/data", False, "p/out"), ("scratch", "/ro", True, "a")]


@pytest.mark.parametrize(
    ("mount", "words"),
    [
        ({"name": "nope", "mountPath": "/x"}, ("cannot find volume 'nope'",)),
        ({"name": "scratch", "mountPath": "/x", "subPathExpr": "$(UNSET)"}, ("missing value for UNSET",)),
        ({"name": "scratch", "mountPath": "/x", "subPath": "../up"}, ("'../up'",)),
    ],
)
def test_mounts_the_kubelet_refuses(mount: dict[str, Any], words: tuple[str, ...]) -> None:
    fails(pod(main(volumeMounts=[mount]), volumes=[{"name": "scratch", "emptyDir": {}}]), *words)


def test_termination_message_file() -> None:
    c = one(pod(main()))
    assert (c.termination_message_path, c.termination_message_policy) == ("/dev/termination-log", "File")
    c = one(pod(main(terminationMessagePath="/tmp/msg", terminationMessagePolicy="FallbackToLogsOnError")))
    assert (c.termination_message_path, c.termination_message_policy) == ("/tmp/msg", "FallbackToLogsOnError")
    assert "/twin/p/main.log:/tmp/msg" in after(podman_argv(c, ctx()), "--volume")


# --- probes


def test_probes() -> None:
    c = main(
        ports=[{"name": "health", "containerPort": 8080}],
        env=[
            {"name": "FILE", "value": "/tmp/ok"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        readinessProbe={"httpGet": {"path": "/readyz", "port": "health"}},
        livenessProbe={"tcpSocket": {"port": 9090}, "periodSeconds": 20},
        startupProbe={"exec": {"command": ["test", "-f", "$(FILE)", "$(POD)"]}, "failureThreshold": 30},
    )
    planned = one(pod(c))
    ready, live, start = planned.readiness, planned.liveness, planned.startup
    assert ready is not None
    assert live is not None
    assert start is not None
    assert (ready.kind, ready.host, ready.port, ready.path, ready.scheme) == (
        "httpGet",
        "10.88.0.7",
        8080,
        "/readyz",
        "HTTP",
    )
    assert ("User-Agent", "kube-probe/1.33") in ready.headers
    assert (
        ready.period_seconds,
        ready.timeout_seconds,
        ready.success_threshold,
        ready.failure_threshold,
        ready.initial_delay_seconds,
    ) == (10, 1, 1, 3, 0)
    assert (live.kind, live.port, live.period_seconds) == ("tcpSocket", 9090, 20)
    assert start.command == ("test", "-f", "/tmp/ok", "")
    assert start.failure_threshold == 30


def test_a_probe_on_an_unknown_port_name_is_refused() -> None:
    fails(pod(main(readinessProbe={"tcpSocket": {"port": "nope"}})), "readinessProbe.tcpSocket.port", "'nope'")


# --- the pod: init containers, sidecars, hostnames


def test_init_containers_in_order_and_sidecars() -> None:
    p = pod(
        main(),
        initContainers=[
            {"name": "a", "image": "i", "command": ["a"]},
            {"name": "side", "image": "i", "command": ["s"], "restartPolicy": "Always"},
            {"name": "b", "image": "i", "command": ["b"]},
        ],
    )
    planned = run(p)
    assert [(c.name, c.sidecar) for c in planned.init] == [("a", False), ("side", True), ("b", False)]
    assert planned.restart_policy == "Always"
    assert not planned.containers[0].sidecar


def test_only_a_sidecar_init_container_has_probes() -> None:
    probe = {"exec": {"command": ["true"]}}
    sidecar = {"name": "side", "image": "i", "command": ["s"], "restartPolicy": "Always", "startupProbe": probe}
    assert run(pod(main(), initContainers=[sidecar])).init[0].startup is not None
    plain = {"name": "once", "image": "i", "command": ["s"], "readinessProbe": probe}
    fails(pod(main(), initContainers=[plain]), "container once", "cannot have probes")


def test_hostnames_and_hosts() -> None:
    planned = run(pod(main(), subdomain="svc", hostAliases=[{"ip": "10.0.0.9", "hostnames": ["lh"]}]))
    assert (planned.hostname, planned.fqdn) == ("p", "p.svc.team-a.svc.cluster.local")
    assert planned.hosts == (("10.88.0.7", ("p.svc.team-a.svc.cluster.local", "p")), ("10.0.0.9", ("lh",)))
    argv = podman_argv(planned.containers[0], ctx(hostname=planned.hostname, hosts=planned.hosts))
    assert after(argv, "--add-host") == ["p.svc.team-a.svc.cluster.local:10.88.0.7", "p:10.88.0.7", "lh:10.0.0.9"]
    assert after(argv, "--hostname") == ["p"]
    assert run(pod(main(), subdomain="svc", setHostnameAsFQDN=True)).hostname == "p.svc.team-a.svc.cluster.local"


# --- hostile input: one line naming pod, container and field, never a KeyError


def mutate(path: str, value: Any) -> dict[str, Any]:
    p = copy.deepcopy(pod(main(env=[{"name": "A", "value": "a"}])))
    target: Any = p
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdecimal() else target[key]
    last: Any = int(keys[-1]) if keys[-1].isdecimal() else keys[-1]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return p


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("spec.containers.0.name", KeyError, "spec.containers[0].name"),
        ("spec.containers.0.image", KeyError, "container main: spec.containers[0].image"),
        ("spec.containers.0.env", "A=a", "spec.containers[0].env"),
        ("spec.containers.0.env.0.name", 3, "spec.containers[0].env[0].name"),
        ("spec.containers.0.command", ["python", 3], "spec.containers[0].command[1]"),
        ("spec.containers.0.securityContext", {"runAsUser": "1000"}, "securityContext.runAsUser"),
        ("spec.containers", [], "spec.containers"),
        ("spec.volumes", [{"emptyDir": {}}], "spec.volumes[0].name"),
        ("status", {}, "status.podIP"),
        ("spec.restartPolicy", "Sometimes", "spec.restartPolicy"),
        ("spec", "x", "spec: is a str"),
        ("spec.containers.0", ["main"], "spec.containers[0]: is a list"),
        (
            "spec.containers.0.env.0",
            {"name": "A", "valueFrom": {"fieldRef": {}}},
            "env[0].valueFrom.fieldRef.fieldPath",
        ),
        ("spec.containers.0.resources", {"limits": {"memory": "lots"}}, "resources.limits.memory"),
        ("spec.containers.0.livenessProbe", {"exec": {"command": ["x"]}, "tcpSocket": {"port": 1}}, "exactly one of"),
    ],
)
def test_hostile_fields_give_one_line(path: str, value: Any, where: str) -> None:
    assert where in fails(mutate(path, value))


def test_a_pod_without_a_name_is_refused() -> None:
    with pytest.raises(PodError, match=r"metadata\.name: is missing"):
        plan({"metadata": {}, "spec": {}}, lambda _: TRAINER, Objects(), HOST)


# --- podman run


def test_podman_argv_maps_the_plan() -> None:
    c = main(
        command=["bash", "-c", "echo $X"],
        env=[{"name": "X", "value": "1"}],
        volumeMounts=[
            {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "scratch", "mountPath": "/s", "subPath": "a"},
        ],
    )
    p = pod(
        c,
        volumes=[
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    argv = podman_argv(one(p, objects=objects()), ctx(sources={"cfg": "/twin/p/cfg", "scratch": "/twin/p/scratch"}))
    assert argv[:2] == ["podman", "run"]
    assert argv[-3:] == ["--entrypoint", '["bash", "-c", "echo $X"]', "trainer"]
    assert after(argv, "--network") == ["ns:/run/netns/p"]
    assert "--detach" in argv
    assert "--init" not in argv
    assert after(argv, "--user") == ["1000"]
    assert after(argv, "--workdir") == ["/opt/trainer"]
    assert "--unsetenv-all" in argv
    assert "--http-proxy=false" in argv
    assert after(argv, "--env") == [f"PATH={VENV_PATH}", "HOSTNAME=p", "PYTHONUNBUFFERED=1", "X=1"]
    assert after(argv, "--tmpfs") == [f"/dev/shm:rw,exec,notmpcopyup,mode=1777,size={2**30}"]
    assert after(argv, "--volume") == [  # parents before children, as containerd orders mounts
        "/twin/p/scratch/a:/s",
        "/twin/p/cfg:/etc/cfg:ro",
        "/twin/p/main.log:/dev/termination-log",
    ]


def test_image_config_from_podman_inspect() -> None:
    config = {
        "Entrypoint": ["python", "train.py"],
        "Cmd": ["c.yaml"],
        "Env": ["PATH=/opt/venv/bin:/bin", "EMPTY=", "EQ=a=b"],
        "WorkingDir": "/opt/trainer",
        "User": "1000",
    }
    image = ImageConfig.from_inspect(config)
    assert image == ImageConfig(
        ("python", "train.py"),
        ("c.yaml",),
        {"PATH": "/opt/venv/bin:/bin", "EMPTY": "", "EQ": "a=b"},
        "/opt/trainer",
        "1000",
    )


# --- every pod template gkr renders plans without a PodError


def pod_templates(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The pod templates of a rendered object: Job/Deployment/DaemonSet, and KubeRay's head and workers."""
    spec = doc.get("spec") or {}
    if doc["kind"] in ("Job", "Deployment", "DaemonSet", "StatefulSet"):
        return [("", spec["template"])]
    if doc["kind"] in ("RayJob", "RayCluster"):
        cluster = spec["rayClusterSpec"] if doc["kind"] == "RayJob" else spec
        return [("head", cluster["headGroupSpec"]["template"])] + [
            (g["groupName"], g["template"]) for g in cluster.get("workerGroupSpecs", [])
        ]
    return []


def golden_pods() -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(case, pod, the documents of its cluster) for every pod template of gkr's golden dry runs."""
    found = []
    for path in sorted((REPO / "tests/gkr/golden").glob("*.yaml")):
        by_context: dict[str, list[dict[str, Any]]] = {}
        for chunk in path.read_text().split("\n---\n"):
            context = chunk.partition("# context: ")[2].partition("\n")[0]  # a multi-cluster run's cluster
            by_context.setdefault(context, []).extend(d for d in yaml.safe_load_all(chunk) if d)
        for context, docs in by_context.items():
            for doc in docs:
                for role, template in pod_templates(doc):
                    meta = doc["metadata"]
                    name = "-".join(x for x in (meta["name"], role, "0") if x)
                    p = {
                        "metadata": {
                            **template.get("metadata", {}),
                            "name": name,
                            "namespace": meta["namespace"],
                            "uid": "u",
                        },
                        "spec": {**template["spec"], "nodeName": "twin"},
                        "status": {"podIP": "10.88.0.9", "hostIP": "10.0.0.1"},
                    }
                    where = context.rsplit("_", 1)[-1] if context else ""
                    found.append(("/".join(x for x in (path.stem, where, doc["kind"], name) if x), p, docs))
    return found


GOLDEN_PODS = golden_pods()


def gcsfuse_everywhere() -> StandIns:
    return StandIns(
        host={"/home/kubernetes/bin/nvidia": "/twin/nvidia", "/home/kubernetes/bin/gib": "/twin/gib"},
        buckets="/twin/buckets",
    )


@pytest.mark.parametrize(("case", "p", "docs"), GOLDEN_PODS, ids=[case for case, _, _ in GOLDEN_PODS])
def test_every_golden_pod_template_plans(case: str, p: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    images: Callable[[str], ImageConfig] = lambda _: TRAINER  # noqa: E731 (every gkr pod runs the trainer image)
    planned = plan(p, images, Objects.from_documents(docs, p["metadata"]["namespace"]), gcsfuse_everywhere(), node=NODE)
    assert planned.containers
    assert all(c.argv for c in planned.init + planned.containers)
    for c in planned.init + planned.containers:
        sources = {name: f"/twin/{name}" for name in planned.volumes}
        assert podman_argv(c, ctx(sources=sources))[-1] == c.image


def test_the_golden_files_hold_pod_templates() -> None:
    kinds = {part for case, _, _ in GOLDEN_PODS for part in case.split("/")}
    assert {"Job", "Deployment", "RayJob", "RayCluster"} <= kinds
    assert len(GOLDEN_PODS) > 10
