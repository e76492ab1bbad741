"""`train.py export CONFIG.yaml [key=value ...] --out DIR`: a run's committed checkpoint as a folder to serve.

The run is named as train.py names it (the same config and overrides), so the export reads the run's own
``checkpoint.dir``: the newest committed step of any replica group (``--step`` for another), verified as a
resume verifies it (marker, sizes, sha256, and nothing unpickled but DCP's metadata: checkpoint/dcp_pickle.py),
pretraining or RL, from sharded groups or not (DCP reads each tensor whole from the ranks' files). It writes
what transformers' ``LlamaForCausalLM.from_pretrained`` and vLLM load: the weights as safetensors (bf16 unless
``--dtype``; above ``--max-shard-size`` several files and an index), ``config.json``, the tokenizer and
``generation_config.json`` (rl/serving.py says which tokenizer and why). One file's tensors are in memory at a
time. Everything is written into a hidden folder beside ``--out`` and renamed to it at the end: a failed export
leaves nothing at ``--out``. Bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from contract.problem import Invalid
from trainer.checkpoint import Checkpointer, CheckpointError
from trainer.config import Config, ConfigError, compose
from trainer.rl import hf, serving

USAGE = (
    "usage: train.py export CONFIG.yaml [key=value ...] --out DIR [--step N] [--dtype bf16|fp16|fp32] "
    "[--max-shard-size 5GB]"
)
HELP = f"""{USAGE}

Writes the run's newest committed checkpoint (or --step N) to DIR as a Hugging Face folder (LlamaForCausalLM):
safetensors weights, config.json, the tokenizer and generation_config.json. Pass the config and overrides the
run was started with: they name its checkpoint.dir and model. DIR must not exist or be empty."""
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MAX_SHARD = 5 * 10**9  # bytes per weight file: transformers' and the Hub's customary 5GB
_SIZE = re.compile(r"(\d{1,15})(B|KB|MB|GB|KiB|MiB|GiB)?")
_UNITS = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_FLAGS = ("--out", "--step", "--dtype", "--max-shard-size")
Saved = dict[str, tuple[tuple[int, ...], torch.dtype]]  # trainer name -> whole shape, dtype as saved
Read = Callable[[list[str]], Mapping[str, torch.Tensor]]  # the tensors of these names


@dataclass(frozen=True)
class Options:
    config: str
    overrides: list[str]
    out: Path
    step: int | None = None
    dtype: str = "bf16"
    max_shard: int = MAX_SHARD


def parse(args: list[str]) -> Options:
    """The command's arguments; Invalid (one line) when they are not."""
    flags: dict[str, str] = {}
    rest: list[str] = []
    items = iter(args)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name not in _FLAGS:
            rest.append(arg)
            continue
        if not eq:
            value = next(items, "")
        if not value or name in flags:
            raise Invalid([f"{name}: {'given twice' if value else 'needs a value'}; {USAGE}"])
        flags[name] = value
    unknown = next((a for a in rest if a.startswith("-")), None)
    if unknown is not None or not rest or "--out" not in flags:
        raise Invalid(
            [f"{unknown or ('--out' if rest else 'CONFIG.yaml')}: {'unknown' if unknown else 'missing'}; {USAGE}"]
        )
    step = flags.get("--step", "")
    if step and not (step.isdigit() and len(step) <= 9):
        raise Invalid([f"--step {step[:40]!r}: not a step number; pass a committed step, e.g. --step 100"])
    dtype = flags.get("--dtype", "bf16")
    if dtype not in DTYPES:
        raise Invalid([f"--dtype {dtype[:40]!r}: not one of {', '.join(DTYPES)}; bf16 is what vLLM serves"])
    size = _SIZE.fullmatch(flags.get("--max-shard-size", str(MAX_SHARD)))
    if size is None or int(size[1]) == 0:
        raise Invalid([f"--max-shard-size: {flags['--max-shard-size'][:40]!r} is not a size; e.g. 5GB, 500MB"])
    return Options(
        rest[0], rest[1:], Path(flags["--out"]), int(step) if step else None, dtype, int(size[1]) * _UNITS[size[2]]
    )


def main(args: list[str]) -> int:
    if any(a in ("-h", "--help") for a in args):
        print(HELP)
        return 0
    try:
        options = parse(args)
        cfg = compose(options.config, options.overrides)
        print(export(cfg, options))
    except ConfigError as error:
        for line in error.lines:
            print(f"train.py export: {line}", file=sys.stderr)
        return 2
    except Invalid as error:
        print(f"train.py export: {error.lines[0]}", file=sys.stderr)
        return 2
    except (CheckpointError, OSError) as error:  # storage failing while it is read or written
        print(f"train.py export: {type(error).__name__}: {str(error).splitlines()[0][:300]}", file=sys.stderr)
        return 1
    return 0


def export(cfg: Config, options: Options) -> str:
    """Write the folder (Invalid, one line, before anything is written when the input is wrong); the report line."""
    out = options.out
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise Invalid([f"--out {out}: exists and is not an empty folder; choose a new one (nothing is overwritten)"])
    tokens = _tokens(cfg)
    checkpointer, step, label = find(cfg, options.step)
    with checkpointer:
        saved = model_tensors(checkpointer.tensors(step), cfg, f"{label} step {step}")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        try:
            files, size = _write(partial, cfg, options, tokens, lambda names: _load(checkpointer, step, saved, names))
            _readable(partial)
            os.rename(partial, out)  # the whole folder at once; onto an empty folder too
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    sampling = f"; temperature {cfg.rl.temperature}, max_new_tokens {cfg.rl.max_tokens}" if cfg.run.mode == "rl" else ""
    return (
        f"exported step {step} of run {cfg.run.name} ({label}) to {out}: {files} weight file(s), "
        f"{size / 1e6:,.1f} MB {options.dtype}; tokenizer: {tokens.source}; eos {list(tokens.ends) or 'none'}{sampling}"
    )


def find(cfg: Config, wanted: int | None) -> tuple[Checkpointer, int, str]:
    """The Checkpointer of a group whose committed step ``wanted`` (else the newest committed one) verifies."""
    from trainer.checkpoint.resume import group_roots

    roots = group_roots(cfg)
    checkpointers = [Checkpointer(root.url) for root in roots]
    try:
        i, step = _verified(cfg, checkpointers, wanted)
    except BaseException:
        for checkpointer in checkpointers:
            checkpointer.close()
        raise
    for other in checkpointers[:i] + checkpointers[i + 1 :]:
        other.close()
    return checkpointers[i], step, f"group-{roots[i].group}"


def _verified(cfg: Config, checkpointers: list[Checkpointer], wanted: int | None) -> tuple[int, int]:
    """(the first group whose step verifies, the step); Invalid, one line, when none does or none is committed."""
    committed = [c.committed() for c in checkpointers]
    steps = sorted({s for found in committed for s in found})
    where = f"checkpoint.dir {cfg.checkpoint.dir}"
    if not steps:
        last = len(checkpointers) - 1
        raise Invalid([f"{where}: no committed step in group-0..{last}; pass the run's config and overrides"])
    step = steps[-1] if wanted is None else wanted
    if step not in steps:
        raise Invalid([f"{where}: step {step} is not committed; committed: {', '.join(map(str, steps[-5:]))}"])
    reasons = []
    for i, (checkpointer, found) in enumerate(zip(checkpointers, committed, strict=True)):
        reason = checkpointer.verify(step) if step in found else None
        if step in found and reason is None:
            return i, step
        if reason is not None:
            reasons.append(f"group-{i}: {reason}")
    older = [s for s in steps if s < step]
    fix = f"restore it, or pass --step {older[-1]} (an older committed step)" if older else "restore it"
    raise Invalid([f"{where}: step {step} does not verify ({'; '.join(reasons)[:400]}); {fix}"])


def model_tensors(tensors: Saved, cfg: Config, where: str) -> Saved:
    """The checkpoint's model tensors (trainer names -> shape, dtype), refused in one line unless they are cfg.model's."""
    saved = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    expected = hf.shapes(cfg.model)
    wrong = next((n for n in expected if n not in saved or saved[n][0] != expected[n]), None)
    wrong = wrong or next((n for n in saved if n not in expected), None)
    if wrong is None:
        return {n: saved[n] for n in expected}
    found = f"is {list(saved[wrong][0])}" if wrong in saved else "is not there"
    wanted = f"the config's model makes it {list(expected[wrong])}" if wrong in expected else "the config has none"
    return _refuse_model(saved, f"{where}: model.{wrong} {found}, {wanted}")


def _refuse_model(saved: Saved, what: str) -> Saved:
    embed, ffn = saved.get("embed.weight"), saved.get("blocks.0.feed_forward.w1.weight")
    layers = len({n.split(".")[1] for n in saved if n.startswith("blocks.")})
    facts = f"vocab={embed[0][0]} d_model={embed[0][1]} " if embed else ""
    facts += f"layers={layers}" + (f" ffn_dim={ffn[0][0]}" if ffn else "")
    raise Invalid([f"{what}; the checkpoint's model has {facts}: pass the model.* overrides the run had"])


def _load(checkpointer: Checkpointer, step: int, saved: Saved, names: list[str]) -> dict[str, torch.Tensor]:
    """``names``' tensors of the committed step, whole, as saved (DCP reads them from every rank's file)."""
    state = {n: torch.empty(saved[n][0], dtype=saved[n][1]) for n in names}
    with warnings.catch_warnings():  # DCP warns that it loads in one process: what an export means to do
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        checkpointer.load(step, {"model": state})
    return state


def _readable(folder: Path) -> None:
    """The folder and its files as the user's umask makes new ones (mkdtemp and safetensors make them private)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def _tokens(cfg: Config) -> serving.Tokens:
    """The run's tokenizer files (rl/serving.py): rl.hf_checkpoint's when an RL run had one with a tokenizer."""
    source = cfg.rl.hf_checkpoint if cfg.run.mode == "rl" else ""
    if not source:
        return serving.byte_tokens(cfg.model.vocab, cfg.model.seq_len)
    with tempfile.TemporaryDirectory(prefix="meridian-export-") as tmp:
        only = (*serving.COPIED, serving.GENERATION_CONFIG, hf.CONFIG)
        folder = hf.fetch(source, tmp, only=only)
        problem = hf.start_problem(str(folder), cfg.model)
        if problem is not None:
            raise Invalid([problem])
        if not (folder / hf.TOKENIZER).is_file():  # the run used byte tokens (hf.load_tokenizer)
            return serving.byte_tokens(cfg.model.vocab, cfg.model.seq_len)
        tokens = serving.checkpoint_tokens(folder, cfg.model.vocab, cfg.model.seq_len)
    return serving.Tokens(tokens.files, tokens.ends, tokens.bos, f"rl.hf_checkpoint {source}", tokens.generation)


def _write(folder: Path, cfg: Config, options: Options, tokens: serving.Tokens, read: Read) -> tuple[int, int]:
    """Weights, config.json, tokenizer files, generation_config.json into ``folder``; (weight files, bytes)."""
    dtype = DTYPES[options.dtype]
    itemsize = torch.empty((), dtype=dtype).element_size()
    sizes = {name: itemsize * math.prod(shape) for name, shape in hf.shapes(cfg.model).items()}
    plan = hf.shard_plan(sizes, options.max_shard)
    size = hf.write_weights(folder, plan, read, dtype)
    config = hf.hf_config(cfg.model, dtype, tokens.ends, tokens.bos)
    (folder / hf.CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name, data in tokens.files.items():
        (folder / name).write_bytes(data)
    generation = serving.generation_config(tokens, cfg.rl if cfg.run.mode == "rl" else None)
    (folder / serving.GENERATION_CONFIG).write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")
    return len(plan), size
