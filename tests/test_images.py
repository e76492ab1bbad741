"""The platform images exist as Dockerfiles, the workflow builds and pins them, and pins are edited safely."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.problem import Invalid
from fleet.load import load_text
from fleet.pins import PINNABLE, pin_image
from tests.conftest import REPO, SHIPPED, SHIPPED_SPEC

BIN = Path(sys.executable).parent
WORKFLOW = REPO / ".github/workflows/images.yaml"
DIGEST = "@sha256:" + "0123456789abcdef" * 4
# Images the project builds: versions.FIELD -> platform/<component>/Dockerfile.
BUILT = {"warden_image": "warden", "trainer_image": "trainer"}


def _workflow() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return data


def _run_lines() -> str:
    return "\n".join(step.get("run", "") for job in _workflow()["jobs"].values() for step in job["steps"])


@pytest.mark.parametrize("component", sorted(BUILT.values()))
def test_every_platform_image_has_a_clean_dockerfile(component: str) -> None:
    folder = REPO / "platform" / component
    result = subprocess.run(
        [str(BIN / "hadolint"), "--config", str(folder / ".hadolint.yaml"), "--no-color", str(folder / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_fleet_builds_every_image_it_pins_from_its_own_registry() -> None:
    registry = "{location}-docker.pkg.dev/{project}/{repository}/".format(
        project=SHIPPED_SPEC["project"]["id"], **SHIPPED_SPEC["registry"]
    )
    ours = {f for f in PINNABLE if SHIPPED_SPEC["versions"][f].startswith(registry)}
    assert ours == set(BUILT)
    matrix = _workflow()["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert {(m["field"], m["component"]) for m in matrix} == set(BUILT.items())
    for component in BUILT.values():
        assert (REPO / "platform" / component / "Dockerfile").is_file()


def test_the_workflow_pins_every_image_through_the_validating_command() -> None:
    run = _run_lines()
    for field in PINNABLE:
        assert f".venv/bin/meridian pin-image {field} " in run
    assert "make generate" in run  # the overlays follow the new pins
    assert "--file platform/${{ matrix.component }}/Dockerfile" in run


def test_the_warden_image_installs_its_lock_and_the_lock_is_current() -> None:
    assert "--require-hashes --no-deps -r requirements/warden.lock" in (REPO / "platform/warden/Dockerfile").read_text()
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts/image_lock.py"), "warden", "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lock = (REPO / "requirements/warden.lock").read_text()
    assert "kubernetes==" in lock
    assert "pyyaml==" in lock
    assert "torch==" not in lock  # the service image carries no training stack


def test_the_warden_image_installs_every_component_it_imports() -> None:
    # The lock's header names the meridian-* components in the closure; each must be copied and installed.
    header = (REPO / "requirements/warden.lock").read_text().splitlines()[0]
    components = {name.removeprefix("meridian-") for name in re.findall(r"meridian-([a-z]+)", header)}
    assert {"contract", "preflight", "warden"} <= components
    dockerfile = (REPO / "platform/warden/Dockerfile").read_text()
    install = next(line for line in dockerfile.splitlines() if "--no-build-isolation" in line)
    for component in components:
        assert f"COPY platform/{component} platform/{component}" in dockerfile, component
        assert f"platform/{component}" in install, component


def _meridian_closure(dist: str) -> set[str]:
    """`dist` and every meridian-* distribution it depends on, transitively, from the pyprojects."""
    import tomllib

    deps = {}
    for path in REPO.glob("platform/*/pyproject.toml"):
        project = tomllib.loads(path.read_text())["project"]
        deps[project["name"]] = [d for d in project.get("dependencies", []) if d.startswith("meridian-")]
    found, todo = set(), [dist]
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += [d.split("[")[0] for d in deps[name]]
    return {name.removeprefix("meridian-") for name in found}


def test_the_trainer_image_installs_every_component_it_depends_on() -> None:
    components = _meridian_closure("meridian-trainer")
    assert {"contract", "trainer"} <= components
    dockerfile = (REPO / "platform/trainer/Dockerfile").read_text()
    install = next(line for line in dockerfile.splitlines() if "--no-build-isolation" in line)
    for component in components:
        assert f"COPY platform/{component} platform/{component}" in dockerfile, component
        assert f"platform/{component}" in install, component


def test_no_image_in_the_shipped_fleet_carries_an_invented_digest() -> None:
    # Digests come only from the image workflow; until it runs, images are pinned by version.
    for field in PINNABLE:
        assert "@sha256:" not in SHIPPED_SPEC["versions"][field], field


def test_pin_image_changes_exactly_one_line_and_stays_valid() -> None:
    text = SHIPPED.read_text()
    image = SHIPPED_SPEC["versions"]["trainer_image"] + DIGEST
    updated = pin_image(text, "trainer_image", image)
    changed = [(a, b) for a, b in zip(text.splitlines(), updated.splitlines(), strict=True) if a != b]
    assert changed == [(f"  trainer_image: {SHIPPED_SPEC['versions']['trainer_image']}", f"  trainer_image: {image}")]
    fleet = load_text(updated).fleet
    assert fleet.versions.trainer_image == image


@pytest.mark.parametrize(
    ("field", "image", "expected"),
    [
        ("region", "x:1.0.0" + DIGEST, "not an image field"),
        ("trainer_image", "us-docker.pkg.dev/meridian-train-prod/meridian/trainer:0.2.0", "has no digest"),
        ("trainer_image", "docker.io/evil/trainer:0.1.0" + DIGEST, "must come from the fleet's registry"),
        ("nccl_installer_image", "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:latest" + DIGEST, ""),
    ],
)
def test_pin_image_refuses_what_the_spec_would_not_accept(field: str, image: str, expected: str) -> None:
    with pytest.raises(Invalid) as caught:
        pin_image(SHIPPED.read_text(), field, image)
    assert len(caught.value.lines) == 1
    assert expected in caught.value.lines[0]


def test_pin_image_cli_writes_nothing_on_bad_input(tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SHIPPED.read_text())
    before = spec.read_bytes()
    result = subprocess.run(
        [str(BIN / "meridian"), "pin-image", "--fleet", str(spec), "trainer_image", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert spec.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.yaml"]
