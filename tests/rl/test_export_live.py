"""The export as a user runs it: a sharded group's checkpoint written by the driver, and the folder in transformers.

Live: the first test starts the trainer's driver (a group of two FSDP ranks); the others import transformers
(about 7 s here) and run its Llama on the exported folder. A GRPO run's checkpoint is exported at the end of
tests/rl/test_distributed.py's resumed run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from trainer.checkpoint import Checkpointer, step_dir
from trainer.config import compose
from trainer.loop.trainer import digest
from trainer.model.transformer import LanguageModel
from trainer.rl import hf
from trainer.rl.tokens import HFTokenizer

from tests.trainer.conftest import CONFIG, TRAIN, final, overrides, run

pytestmark = [pytest.mark.live, pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")]


def test_a_sharded_groups_checkpoint_exports_the_weights_the_group_held(tmp_path: Path) -> None:
    """Two FSDP ranks each wrote their shards; the export holds the whole model the group gathered at its end."""
    shape = ("run.steps=6", "checkpoint.every=3", "ft.replica_groups=1", "ft.group_size=2", "data.batch_size=8")
    run(tmp_path, "sharded", *shape)
    step = tmp_path / "checkpoints" / "sharded" / "group-0" / step_dir(6)
    assert {"__0_0.distcp", "__1_0.distcp"} <= {p.name for p in step.iterdir()}  # each rank wrote its shards
    args = [str(CONFIG), *overrides(tmp_path, "sharded", *shape), "--out", str(tmp_path / "hf"), "--dtype", "fp32"]
    command = [sys.executable, str(TRAIN), "export", *args]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [done.stdout.strip()]  # one line
    assert done.stdout.startswith(f"exported step 6 of run sharded (group-0) to {tmp_path / 'hf'}: 1 weight file(s)")
    _, state = hf.load_hf(tmp_path / "hf")
    assert digest(state) == final(tmp_path, "sharded", 0)["weights"]


def _bpe(folder: Path) -> HFTokenizer:
    """A BPE tokenizer trained here (a few hundred tokens) with <s> and </s>, as a checkpoint folder holds one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [f"{a} plus {b} is {a + b}." for a in range(40) for b in range(40)] + ["the quick brown fox"] * 20
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<s>", "</s>"], show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / hf.TOKENIZER))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return HFTokenizer(folder / hf.TOKENIZER)


def _greedy(model: LanguageModel, prompt: list[int], tokens: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(tokens):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt) :]


def _ending_on(model: LanguageModel, prompt: list[int], eos: int) -> list[int] | None:
    """Relabel ``eos`` and the first new token the model writes after ``prompt`` past the second (their embedding and
    head rows swapped): the same model under other names, which now writes a few tokens and then eos. Those tokens
    and eos; None when its first 8 tokens have no such token (it repeats itself)."""
    written = _greedy(model, prompt, 8)
    new = next((i for i in range(2, 8) if written[i] not in prompt + written[:i]), None)
    if new is None or eos in prompt + written[:new]:
        return None
    with torch.no_grad():
        for weight in (model.embed.weight, model.head.weight):
            weight[[written[new], eos]] = weight[[eos, written[new]]]
    return [*written[:new], eos]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An RL run from a checkpoint folder with a BPE tokenizer, committed once, exported at fp32 and at bf16."""
    from trainer.cli import main

    root = tmp_path_factory.mktemp("export")
    tokenizer = _bpe(root / "start")
    eos = json.loads((root / "start" / hf.TOKENIZER).read_text())["model"]["vocab"]["</s>"]
    run = ["run.name=rl", "run.mode=rl", f"checkpoint.dir={root / 'checkpoints'}", f"rl.hf_checkpoint={root}/start"]
    run += [f"model.vocab={tokenizer.vocab_size}", "model.precision=fp32", "rl.allowed=", "rl.temperature=0.8"]
    cfg = compose(CONFIG, run)
    prompt = tokenizer.encode("12 plus 7 is")
    for seed in range(20):  # a random model may repeat one token: the first seed whose writing has a new token
        torch.manual_seed(seed)
        model = LanguageModel(cfg.model)
        hf.save_hf(model.state_dict(), cfg.model, root / "start")
        ends = _ending_on(model, prompt, eos)
        if ends is not None:
            break
    assert ends is not None
    with Checkpointer(str(root / "checkpoints" / "group-0")) as checkpointer:
        checkpointer.save(4, {"model": get_model_state_dict(model), "data": {"group": 0, "next_batch": 4}})
    for dtype in ("fp32", "bf16"):
        assert main(["export", str(CONFIG), *run, "--out", str(root / dtype), "--dtype", dtype]) == 0
    return {"root": root, "model": model, "tokenizer": tokenizer, "prompt": prompt, "ends": ends, "eos": eos}


def test_transformers_loads_the_folder_and_computes_the_trainers_logits(exported: dict[str, Any]) -> None:
    from transformers import AutoTokenizer, LlamaForCausalLM

    model, tokenizer, root = exported["model"], exported["tokenizer"], exported["root"]
    theirs = LlamaForCausalLM.from_pretrained(root / "fp32", dtype=torch.float32)  # in eval mode
    texts = ["12 plus 7 is", "the quick brown fox", "39 plus 0 is 39. 1 plus"]
    served = AutoTokenizer.from_pretrained(root / "fp32")
    assert served.eos_token_id == exported["eos"]
    for text in texts:
        ids = tokenizer.encode(text)
        assert served(text, add_special_tokens=False)["input_ids"] == ids  # the trainer's encoding
        tokens = torch.tensor([ids])
        with torch.no_grad():
            torch.testing.assert_close(theirs(tokens).logits, model(tokens), rtol=1e-5, atol=1e-5)  # fp32 rounding
    half = LlamaForCausalLM.from_pretrained(root / "bf16")
    assert half.dtype == torch.bfloat16
    ours = {hf.to_hf(k): v for k, v in model.state_dict().items()}
    assert all(torch.equal(v, ours[k].bfloat16()) for k, v in half.state_dict().items())


def test_generate_stops_on_the_exported_eos_with_the_runs_sampling_defaults(exported: dict[str, Any]) -> None:
    from transformers import GenerationConfig, LlamaForCausalLM

    root, prompt = exported["root"], exported["prompt"]
    defaults = GenerationConfig.from_pretrained(root / "bf16")
    assert defaults.eos_token_id == exported["eos"]
    assert defaults.do_sample is True
    assert defaults.temperature == 0.8  # the run's rl.temperature
    theirs = LlamaForCausalLM.from_pretrained(root / "fp32", dtype=torch.float32)  # in eval mode
    with torch.no_grad():
        out = theirs.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=10)
    assert out[0].tolist() == [*prompt, *exported["ends"]]  # its tokens, then eos, and no more of the 10
    assert len(exported["ends"]) < 10
