"""Generators on a Ray cluster (``run.launcher=ray``): one actor per engine, on the job's generator pods.

gkr gives the generator pods the Ray resource ``meridian_generator`` (contract.names.ROLE_RESOURCES), one
unit per GPU (per CPU on CPU pods), and sets ``MERIDIAN_TP`` (GPUs per engine): each actor asks for that
many GPUs and units, so it lands on a generator pod and never on a trainer's. Without the resource (a
local Ray, a cluster without roles) actors go wherever Ray has room. An actor that dies, or whose node
does, is a generator that exited: the controller issues its prompts again and RLSide starts another.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from contract.names import ROLE_RESOURCES, TENSOR_PARALLEL_ENV
from trainer.config import from_dict


class GeneratorActor:
    def __init__(self) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    def run(self, config: dict[str, Any], index: int, incarnation: int) -> tuple[int, str]:
        """Its exit code, and the line that says why when it refused to start (its pod's log is not the driver's)."""
        from trainer.preconditions import engine_installed
        from trainer.rl.generator_main import run

        cfg = from_dict(config)
        problem = engine_installed(cfg)
        return (run(cfg, index, incarnation), problem or "")


def tensor_parallel(environ: Mapping[str, str]) -> int:
    """GPUs per engine from gkr's MERIDIAN_TP (1 when unset); a value that is not 1..64 is refused in one line."""
    raw = environ.get(TENSOR_PARALLEL_ENV, "1").strip()
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise ValueError(f"${TENSOR_PARALLEL_ENV}: {raw[:20]!r} is not a GPU count 1..64; fix the job's environment")
    return int(raw)


class RayGenerators:
    """RLSide's Runner on Ray."""

    def __init__(self, ray: Any, config: dict[str, Any], *, cuda: bool, tp: int = 1) -> None:
        self.ray, self.config = ray, config
        role = ROLE_RESOURCES["generators"]
        units = tp if cuda else 1
        resources = {role: float(units)} if role in ray.cluster_resources() else {}
        self.options = {"num_cpus": 1, "num_gpus": tp if cuda else 0, "resources": resources, "max_restarts": 0}
        self.actor_class = ray.remote(GeneratorActor)
        self.actors: dict[int, Any] = {}
        self.runs: dict[int, Any] = {}
        self.errors: dict[int, str] = {}  # generator -> the last line of the error it died of

    def spawn(self, index: int, incarnation: int) -> int | None:
        actor = self.actor_class.options(**self.options).remote()
        self.actors[index] = actor
        self.runs[index] = actor.run.remote(self.config, index, incarnation)
        return None  # its process lives on another pod: the actor's log is Ray's

    def exited(self, index: int) -> int | None:
        ref = self.runs[index]
        if not self.ray.wait([ref], timeout=0)[0]:
            return None
        try:
            code, error = self.ray.get(ref)
            if error:
                self.errors[index] = str(error)[:300]
            return int(code)
        except self.ray.exceptions.RayError as error:  # the actor, its process or its node died
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            self.errors[index] = lines[-1][:300] if lines else type(error).__name__
            return 1

    def last_error(self, index: int) -> str:
        return self.errors.get(index, "")

    def stop(self, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        pending = list(self.runs.values())
        while pending and time.monotonic() < deadline:
            pending = self.ray.wait(pending, num_returns=len(pending), timeout=0.2)[1]
        for actor in self.actors.values():
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
