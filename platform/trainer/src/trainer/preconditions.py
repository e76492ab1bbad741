"""What must hold before the first step, checked once at start: one line each, exit 2.

A run used to find out after four restarts and 400 steps that checkpoint.dir was read-only (and then
reported an earlier run's goodput). Each check takes the configuration and returns a problem (one
line: where, what, how to fix) or None. ``CHECKS`` is the list train.py runs, in order; the
filesystem probe comes last, so a run refused for anything else writes nothing. Another part of the
trainer adds its own check by appending a function to ``CHECKS``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from contract import names
from contract.problem import Invalid
from trainer.config import Config

Check = Callable[[Config], str | None]


def device_exists(cfg: Config) -> str | None:
    if cfg.ft.device != "cuda" or cfg.run.launcher != "local":
        return None  # under Ray the workers' nodes have the GPUs, not necessarily the driver's
    import torch

    if not torch.cuda.is_available():
        return "ft.device: cuda requested but no CUDA device is visible here; set ft.device=cpu or run on a GPU node"
    group_size = int(getattr(cfg.ft, "group_size", 1))  # ranks per replica group, one GPU each
    count = torch.cuda.device_count()
    if group_size > count:
        return (
            f"ft.group_size: {group_size} ranks per group need {group_size} GPUs on this machine, "
            f"it has {count}; lower ft.group_size"
        )
    return None


def data_path_exists(cfg: Config) -> str | None:
    d = cfg.data
    if d.kind != "text" or not d.path:
        return None  # Markov data and the packaged corpus need no file
    path = Path(d.path)
    if not path.is_file():
        return f"data.path: {d.path}: no such file; set data.path=<a text file> (empty: the packaged corpus)"
    if not os.access(path, os.R_OK):
        return f"data.path: {d.path}: not readable by this user; fix its permissions or copy it"
    if path.stat().st_size < cfg.model.seq_len + 2:
        return (
            f"data.path: {d.path} has {path.stat().st_size} bytes, fewer than one sequence "
            f"(model.seq_len {cfg.model.seq_len} + 2); use a longer file or a smaller model.seq_len"
        )
    return None


def shape_divides(cfg: Config) -> str | None:
    group_size = int(getattr(cfg.ft, "group_size", 1))
    if cfg.data.batch_size % group_size:
        return (
            f"data.batch_size: {cfg.data.batch_size} does not split over ft.group_size {group_size} ranks; "
            "set data.batch_size to a multiple of it"
        )
    return None


def checkpoint_dir_writable(cfg: Config) -> str | None:
    """Create the directory and a probe file in it, then remove the probe (any fsspec URL)."""
    import fsspec  # type: ignore[import-untyped]

    root = cfg.checkpoint.dir.rstrip("/")
    probe = f"{root}/.write-probe-{uuid.uuid4().hex}"
    try:
        fs, path = fsspec.core.url_to_fs(probe)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as f:
            f.write(b"probe")
        fs.rm(path)
    except Exception as error:  # any failure here is the answer: the run could not checkpoint
        why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
        return (
            f"checkpoint.dir: {cfg.checkpoint.dir} is not writable ({why[:200]}); set checkpoint.dir=<a writable path>"
        )
    return None


def wandb_installed(cfg: Config) -> str | None:
    """logging.wandb needs the optional extra; found here, not as a group's crash after start-up."""
    if cfg.logging.wandb and importlib.util.find_spec("wandb") is None:
        return "logging.wandb: wandb is not installed; pip install 'meridian-trainer[wandb]' or set logging.wandb=false"
    return None


def engine_uses_its_gpus(cfg: Config, environ: Mapping[str, str] = os.environ) -> str | None:
    """RL: a torch engine is the trainer's model on one GPU; gkr's tensor parallel above 1 would have each
    generator actor reserve GPUs it never uses (ray_generators asks for $MERIDIAN_TP). vLLM splits over them."""
    if cfg.run.mode != "rl" or cfg.rl.engine == names.VLLM_ENGINE:
        return None
    from trainer.rl.ray_generators import tensor_parallel

    try:
        tp = tensor_parallel(environ)
    except ValueError as error:
        return str(error)
    if tp == 1:
        return None
    return (
        f"{names.ENGINE_OVERRIDE}: {cfg.rl.engine} runs each generator on one GPU, but ${names.TENSOR_PARALLEL_ENV}={tp} "
        f"makes each reserve {tp}; set roles.generators.tensor_parallel: 1 in the gkr job, "
        f"or {names.ENGINE_OVERRIDE}={names.VLLM_ENGINE}"
    )


def importable(module: str) -> bool:
    """Whether ``import module`` finds it (already imported counts: a test's stand-in has no spec)."""
    return module in sys.modules or importlib.util.find_spec(module) is not None


def engine_installed(cfg: Config, found: Callable[[str], bool] = importable) -> str | None:
    """RL: the engine's package is importable here (generator_main asks it too, on the generators' pods)."""
    if cfg.run.mode != "rl" or cfg.rl.engine != names.VLLM_ENGINE or found("vllm"):
        return None
    return (
        f"{names.ENGINE_OVERRIDE}: {names.VLLM_ENGINE} is not installed for {sys.executable}; run the generators "
        f"from the generator image (platform/trainer/Dockerfile.generator) or set "
        f"{names.ENGINE_OVERRIDE}={names.TORCH_ENGINE}"
    )


def engine_installed_here(cfg: Config) -> str | None:
    """The local launcher's generators run here; a Ray run's on the generator pods (their image, not the driver's)."""
    return None if cfg.run.launcher == "ray" else engine_installed(cfg)


def task_loads(cfg: Config) -> str | None:
    """RL: rl.task's prompts read and split, rl.reward's function found (an import error or a missing file is one
    line here, before any process starts, instead of the controller's traceback)."""
    if cfg.run.mode != "rl":
        return None
    from contract.problem import Invalid
    from trainer.rl.grpo import make_task

    try:
        make_task(cfg.rl, cfg.model.vocab)
    except Invalid as error:  # rewards.py names its key; prompts.py its file
        line = error.lines[0]
        return line if line.startswith("rl.") else f"rl.task: {line}"
    except ValueError as error:  # prompts.split: held_out leaves no training problem
        return f"rl.held_out: {error}; lower rl.held_out or add problems to rl.task"
    return None


def hf_checkpoint_fits(cfg: Config) -> str | None:
    """RL from a Hugging Face checkpoint on this machine's disk: readable, and the run's model architecture."""
    source = cfg.rl.hf_checkpoint
    if cfg.run.mode != "rl" or not source or "://" in source:  # a bucket's is checked by the groups that fetch it
        return None
    from trainer.rl.hf import start_problem

    return start_problem(source, cfg.model)


def rl_tokens_expressible(cfg: Config) -> str | None:
    """RL: ``rl.allowed`` in the run's tokenizer (a local checkpoint's, else byte tokens), before any process starts."""
    source = cfg.rl.hf_checkpoint
    if cfg.run.mode != "rl" or "://" in source:  # a bucket's tokenizer is read by the groups that fetch it
        return None
    from trainer.rl.grpo import tokens_problem
    from trainer.rl.hf import load_tokenizer
    from trainer.rl.tokens import ByteTokenizer

    try:
        tokenizer = load_tokenizer(source, cfg.model.vocab) if source else ByteTokenizer()
    except Invalid as error:
        return error.lines[0]
    return tokens_problem(cfg.rl, cfg.model.vocab, tokenizer)


CHECKS: list[Check] = [
    device_exists,
    data_path_exists,
    shape_divides,
    engine_uses_its_gpus,
    engine_installed_here,
    task_loads,
    hf_checkpoint_fits,
    rl_tokens_expressible,
    checkpoint_dir_writable,
    wandb_installed,
]


def first_problem(cfg: Config, checks: list[Check] | None = None) -> str | None:
    for check in CHECKS if checks is None else checks:
        problem = check(cfg)
        if problem is not None:
            return problem
    return None
