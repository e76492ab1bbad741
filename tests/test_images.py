"""The platform images exist as Dockerfiles, the workflow builds and pins them, and pins are edited safely."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.utils import canonicalize_name

from contract import names
from contract.problem import Invalid
from fleet.load import load_text
from fleet.pins import PINNABLE, pin_image
from scripts import image_lock
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


def final_stage(dockerfile: str) -> list[str]:
    """The instructions of a Dockerfile's last stage (what the image runs), continuation lines joined."""
    lines = [line.strip() for line in dockerfile.replace("\\\n", " ").splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    start = max(i for i, line in enumerate(instructions) if line.upper().startswith("FROM "))
    return instructions[start:]


def stage_env(instructions: list[str]) -> dict[str, str]:
    """The KEY=value pairs the ENV instructions of a stage set, later ones winning."""
    env: dict[str, str] = {}
    for line in instructions:
        if line.upper().startswith("ENV "):
            env |= dict(word.split("=", 1) for word in shlex.split(line[4:]))
    return env


@pytest.mark.parametrize("component", sorted(BUILT.values()))
def test_the_images_virtualenv_is_where_gkr_looks_for_it(component: str) -> None:
    """gkr's preflight init container sets its own PATH with contract.names.IMAGE_VENV_BIN first: each image's
    virtualenv must be there and first on the image's own PATH, so a change on either side fails here."""
    text = (REPO / "platform" / component / "Dockerfile").read_text()
    path = stage_env(final_stage(text))["PATH"].split(":")
    assert path[0] == names.IMAGE_VENV_BIN
    venv = names.IMAGE_VENV_BIN.removesuffix("/bin")
    assert f"-m venv {venv}" in text
    assert f"COPY --from=build {venv} {venv}" in final_stage(text)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(REPO)) for p in REPO.glob("platform/*/Dockerfile*")))
def test_each_image_runs_as_the_user_gkr_gives_the_buckets_group(path: str) -> None:
    """gkr's fsGroup (contract.names.IMAGE_GID) lets the image's user write a mounted bucket only if that user
    is IMAGE_UID with its own group of the same number (useradd's default) and the image runs as it."""
    instructions = final_stage((REPO / path).read_text())
    assert any(f"useradd --create-home --uid {names.IMAGE_UID} " in line for line in instructions)
    assert names.IMAGE_GID == names.IMAGE_UID
    assert [line for line in instructions if line.startswith("USER ")][-1] == f"USER {names.IMAGE_UID}"


# Each Dockerfile's base image, a build argument (the twin builds the same Dockerfile on a CPU base); the
# default is the reviewed pin, so a build without the argument builds what it did before.
BASES = {
    "platform/trainer/Dockerfile": "nvidia/cuda:12.9.1-cudnn-runtime-ubuntu22.04",
    "platform/trainer/Dockerfile.generator": "vllm/vllm-openai:v0.32.0",
    "platform/warden/Dockerfile": "python:3.11.14-slim-bookworm",
}


def test_every_dockerfile_is_listed_with_its_base() -> None:
    assert sorted(BASES) == sorted(str(p.relative_to(REPO)) for p in REPO.glob("platform/*/Dockerfile*"))


@pytest.mark.parametrize(("path", "base"), sorted(BASES.items()))
def test_each_dockerfile_takes_its_base_image_as_a_build_argument(path: str, base: str) -> None:
    lines = [line.strip() for line in (REPO / path).read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0] == f"ARG BASE_IMAGE={base}"  # before the first FROM: every stage may name it
    stages = [line.split() for line in instructions if line.upper().startswith("FROM ")]
    assert stages
    assert all(words[1] == "${BASE_IMAGE}" for words in stages), stages


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


@pytest.mark.parametrize("image", sorted(image_lock.IMAGES))
def test_each_image_installs_its_lock_and_the_lock_is_current(image: str) -> None:
    dockerfile = (REPO / image_lock.IMAGES[image].dockerfile).read_text()
    assert f"--require-hashes --no-deps -r requirements/{image}.lock" in dockerfile
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts/image_lock.py"), image, "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_warden_lock_holds_the_service_and_no_training_stack() -> None:
    lock = (REPO / "requirements/warden.lock").read_text()
    assert "kubernetes==" in lock
    assert "pyyaml==" in lock
    assert "torch==" not in lock  # the service image carries no training stack


def test_the_generator_lock_holds_the_heads_ray_and_leaves_the_base_images_own() -> None:
    """A generator pod joins the job's Ray cluster, whose head runs the trainer image: Ray refuses a node of
    another Ray version (ray._private.utils.check_version_info), so the generator's is dev.lock's, exactly."""
    dev = image_lock.lock_entries((REPO / "requirements/dev.lock").read_text())
    lock = image_lock.lock_entries((REPO / "requirements/generator.lock").read_text())
    assert lock["ray"] == dev["ray"]
    assert "prometheus-client" in lock  # meridian-telemetry's
    for carried in image_lock.IMAGES["generator"].carried:  # vLLM's own, at vLLM's versions
        assert carried not in lock, carried


# What a generator pod runs in the generator image: its entry point (a Ray actor's, trainer.rl.ray_generators)
# and the preflight init container's command (gkr renders it with the role's image).
GENERATOR_ENTRIES = ("trainer.rl.generator_main", "preflight.cli")
# A generator pod is a Ray worker: KubeRay starts it with `ray start`, and each generator is a Ray actor.
GENERATOR_RUNTIME = {"ray"}
# Imported under those entries, never run in a generator pod (a new import fails the test until it is decided):
NEVER_RUN_IN_A_GENERATOR = {
    "hydra": "trainer.config.compose reads train.py's command line; a generator gets its configuration as a dict",
    "omegaconf": "trainer.config.compose, as hydra",
    "math_verify": "rewards.math_answer: the controller scores the answers, generators only sample",
}


def _packages() -> dict[str, Path]:
    """The project's top-level packages -> the folder each is in (platform/<component>/src)."""
    return {p.parent.name: p.parent.parent for p in REPO.glob("platform/*/src/*/__init__.py")}


def _module_file(module: str, packages: dict[str, Path]) -> Path | None:
    base = packages.get(module.partition(".")[0])
    if base is None:
        return None
    path = base.joinpath(*module.split("."))
    return next((f for f in (path / "__init__.py", path.with_suffix(".py")) if f.is_file()), None)


def _imports(module: str, file: Path) -> set[str]:
    """Every module `file` imports, at the top or inside a function (either may run), relative ones resolved."""
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            base = ".".join([*parts, node.module] if node.module else parts)
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return found


def imported_packages(entries: tuple[str, ...]) -> set[str]:
    """The top-level packages `entries` import, transitively: the project's they reach, and every other one
    outside the standard library."""
    packages, seen, found = _packages(), set(), set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        file = _module_file(module, packages)
        if file is None:
            continue
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        for name in [*parents, *_imports(module, file)]:
            top = name.split(".")[0]
            if top in packages:
                todo.append(name)
            if top not in sys.stdlib_module_names:
                found.add(top)
    return found


def _modules_of(distributions: Iterable[str]) -> set[str]:
    """The top-level modules of distributions, from .venv's metadata (the name itself for one not installed)."""
    from importlib.metadata import packages_distributions

    installed: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            installed.setdefault(canonicalize_name(dist), set()).add(module)
    return {m for d in distributions for m in installed.get(d, {d.replace("-", "_")})}


def test_the_generator_image_holds_everything_its_entry_points_import() -> None:
    """`import trainer.rl.generator_main` in the generator image, and the preflight init container's command:
    each top-level module they import comes from a project package the Dockerfile copies and installs, from the
    image's lock, or from the vLLM base image (scripts/image_lock.py: IMAGES["generator"].carried)."""
    spec = image_lock.IMAGES["generator"]
    dockerfile = (REPO / spec.dockerfile).read_text()
    install = " ".join(line for line in dockerfile.replace("\\\n", " ").splitlines() if "--no-build-isolation" in line)
    packages = _packages()
    ours = {
        name
        for name, src in packages.items()
        if f"COPY {src.parent.relative_to(REPO)} " in dockerfile and f"{src.parent.relative_to(REPO)}" in install
    }
    lock = image_lock.lock_entries((REPO / "requirements/generator.lock").read_text())
    locked = _modules_of(lock) if "-r requirements/generator.lock" in dockerfile else set()
    provided = ours | locked | _modules_of(spec.carried)
    needed = imported_packages(GENERATOR_ENTRIES) | GENERATOR_RUNTIME
    assert {"trainer", "telemetry", "preflight", "torch", "prometheus_client"} <= needed  # the walk reaches them
    missing = sorted(needed - provided - set(NEVER_RUN_IN_A_GENERATOR))
    assert not missing, f"the generator image lacks {missing}"


def test_the_warden_image_installs_every_component_it_imports() -> None:
    # The lock's header names the meridian-* components in the closure; each must be copied and installed.
    header = (REPO / "requirements/warden.lock").read_text().splitlines()[0]
    components = {name.removeprefix("meridian-") for name in re.findall(r"meridian-([a-z]+)", header)}
    assert {"contract", "warden"} <= components
    assert "preflight" not in components  # the kernel-log parser is the contract's (tests/contract/test_layering.py)
    dockerfile = (REPO / "platform/warden/Dockerfile").read_text()
    install = next(line for line in dockerfile.splitlines() if "--no-build-isolation" in line)
    for component in components:
        assert f"COPY platform/{component} platform/{component}" in dockerfile, component
        assert f"platform/{component}" in install, component
    assert "platform/preflight" not in dockerfile


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
