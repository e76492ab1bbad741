"""Warden's custom role holds every permission its Compute Engine calls need, derived from the calls.

The calls are read from warden.gce's source (every `_call`/`_post` and the REST path it builds), so a
new call without an entry in contract.warden_iam fails here, and the role infra synthesizes is checked
against that map in tests/infra/test_stacks.py.
"""

from __future__ import annotations

import ast

from contract.warden_iam import COMPUTE_CALLS, role_permissions
from tests.conftest import REPO

WARDEN = REPO / "platform/warden/src/warden"
GCE = WARDEN / "gce.py"
# What `instance.path` expands to (Instance.path in gce.py; checked below).
INSTANCE_PATH = "projects/{}/zones/{}/instances/{}"


def _path(node: ast.expr) -> str:
    """A call's REST path with every placeholder as {} and `instance.path` expanded."""
    if isinstance(node, ast.Attribute) and node.attr == "path":
        return INSTANCE_PATH
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    assert isinstance(node, ast.JoinedStr), f"gce.py line {node.lineno}: a path this test cannot read"
    parts = []
    for value in node.values:
        if isinstance(value, ast.FormattedValue):
            inner = value.value
            parts.append(INSTANCE_PATH if isinstance(inner, ast.Attribute) and inner.attr == "path" else "{}")
        else:
            assert isinstance(value, ast.Constant)
            parts.append(str(value.value))
    return "".join(parts)


def rest_method(http_method: str, path: str) -> str:
    """`instances.get` for GET .../instances/{}, `instances.reset` for POST .../instances/{}/reset;
    `zoneOperations.get` for GET projects/{}/zones/{}/operations/{} (the API names operations by scope)."""
    segments = path.split("/")
    if segments[-1] == "{}":
        assert http_method == "GET", path
        if segments[-2] == "operations":
            assert segments[-4] == "zones", path  # Warden reads only zonal operations
            return "zoneOperations.get"
        return f"{segments[-2]}.get"
    assert http_method == "POST", path
    assert segments[-2] == "{}", path
    return f"{segments[-3]}.{segments[-1]}"


def calls(source: str) -> list[tuple[int, str]]:
    """(line, REST method) of every request the Compute client makes."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, ast.FunctionDef) and function.name not in ("_call", "_post"):  # not the wrappers
            found += _requests(function)
    return sorted(set(found))


def _requests(function: ast.FunctionDef) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr == "_post":
            found.append((node.lineno, rest_method("POST", _path(node.args[0]))))
        elif node.func.attr == "_call" and isinstance(node.args[0], ast.Constant):
            found.append((node.lineno, rest_method(str(node.args[0].value), _path(node.args[1]))))
    return found


def test_the_scanner_reads_instance_paths_as_gce_builds_them() -> None:
    from warden.gce import Instance

    assert Instance(project="P", zone="Z", name="N").path == INSTANCE_PATH.format("P", "Z", "N")


def test_every_compute_call_has_its_permissions_and_the_role_holds_them() -> None:
    found = calls(GCE.read_text())
    assert {m for _, m in found} >= {
        "instances.performMaintenance",
        "instances.reset",
        "instances.get",
        "zoneOperations.get",
    }
    role = set(role_permissions())
    for line, method in found:
        assert method in COMPUTE_CALLS, f"gce.py:{line}: {method} has no IAM permission in contract.warden_iam"
        missing = set(COMPUTE_CALLS[method]) - role
        assert not missing, f"gce.py:{line}: {method} needs {sorted(missing)}"
    # Nothing in the map that Warden no longer calls: the role stays least-privilege.
    assert set(COMPUTE_CALLS) == {m for _, m in found}


def test_only_gce_py_calls_google_cloud() -> None:
    """Another module calling a Google API would escape the scan above."""
    for path in sorted(WARDEN.glob("*.py")):
        if path != GCE:
            assert "googleapis.com" not in path.read_text(), f"{path.name} calls Google Cloud outside gce.py"


def test_the_scanner_finds_a_new_call() -> None:
    source = "class C:\n    def f(self, instance):\n        return self._post(f'{instance.path}/stop')\n"
    assert calls(source) == [(3, "instances.stop")]
    assert "instances.stop" not in COMPUTE_CALLS
