"""Each image built by the twin starts as shipped: its own ENTRYPOINT and CMD, as its own user."""

from __future__ import annotations

import pytest

from twin import engine, images

pytestmark = pytest.mark.twin


def _run(image: str, *command: str) -> tuple[int, str]:
    """The image's container with the image's user and entrypoint; `command` replaces its CMD only."""
    proc = engine.run(["run", "--rm", "--network", "none", "--pull=never", image, *command], check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["trainer", "warden"])
def test_the_default_command_answers(built: set[str], name: str) -> None:
    """trainer: `python train.py configs/config.yaml --help`; Warden: `warden serve` needs an API server, so
    `warden --help` through the same entrypoint."""
    image = f"{images.REGISTRY}/{name}:twin"
    code, out = _run(image) if name == "trainer" else _run(image, "--help")
    assert code == 0, out[-2000:]
    assert "usage" in out.lower()


def test_the_generator_image_imports_its_entry_point_as_its_user(built: set[str]) -> None:
    """Issue 37: `trainer.rl.generator_main` imported telemetry (absent) and a generator joins the job's Ray."""
    image = f"{images.REGISTRY}/generator:twin"
    code, out = _run(image, "-c", "import os, ray, trainer.rl.generator_main; print(os.getuid(), ray.__version__)")
    assert code == 0, out[-2000:]
    uid, version = out.split()[-2:]
    assert uid == "1000"
    import ray

    assert version == ray.__version__  # the head's Ray: a worker of another version is refused
