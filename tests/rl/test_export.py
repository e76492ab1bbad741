"""`train.py export`: a committed checkpoint as a Hugging Face folder, every refusal one line and nothing written.

The checkpoints here are written by the trainer's own Checkpointer in this process (the model's state as the
Trainer saves it, beside the plain values it saves); a sharded group's checkpoint written by the driver, and
the folder loaded by transformers, are tests/rl/test_export_live.py's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from trainer.checkpoint import Checkpointer, step_dir
from trainer.cli import main
from trainer.config import Config, compose
from trainer.export import Options, export, parse
from trainer.model.transformer import LanguageModel
from trainer.rl import hf, serving
from trainer.rl.tokens import ByteTokenizer, HFTokenizer

from contract.problem import Invalid
from tests.trainer.conftest import CONFIG

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

STEPS = (3, 5)


def save_steps(root: Path, model: LanguageModel) -> dict[int, dict[str, torch.Tensor]]:
    """Committed steps of ``model`` (its weights changed between them) as group-0 saves them; each step's weights."""
    saved = {}
    with Checkpointer(str(root / "group-0")) as checkpointer:
        for step in STEPS:
            with torch.no_grad():
                model.head.weight.add_(1.0)
            state = {"model": get_model_state_dict(model), "data": {"group": 0, "next_batch": step}}
            checkpointer.save(step, state | {"rng": {"torch": torch.get_rng_state()}})
            checkpointer.wait()
            saved[step] = {k: v.clone() for k, v in model.state_dict().items()}
    return saved


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Config, dict[int, dict[str, torch.Tensor]]]:
    """A pretraining run's overrides, its config and the weights of its two committed steps."""
    root = tmp_path_factory.mktemp("run")
    overrides = ["run.name=exported", f"checkpoint.dir={root / 'checkpoints'}"]
    cfg = compose(CONFIG, overrides)
    torch.manual_seed(0)
    return overrides, cfg, save_steps(root / "checkpoints", LanguageModel(cfg.model))


def test_the_newest_committed_step_is_exported_whole_and_an_older_one_on_request(run: Any, tmp_path: Path) -> None:
    overrides, cfg, saved = run
    line = export(cfg, parse([str(CONFIG), *overrides, "--out", str(tmp_path / "new"), "--dtype", "fp32"]))
    assert line.startswith(f"exported step 5 of run exported (group-0) to {tmp_path / 'new'}: 1 weight file(s)")
    for step, folder in ((5, "new"), (3, "old")):
        if step == 3:
            export(cfg, parse([str(CONFIG), *overrides, f"--out={tmp_path / folder}", "--step=3", "--dtype=fp32"]))
        model, state = hf.load_hf(tmp_path / folder)
        assert model == cfg.model
        assert state.keys() == saved[step].keys()
        assert all(torch.equal(state[k], saved[step][k]) for k in state)  # bit for bit at fp32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old"]  # no partial folder left beside them


def test_bf16_by_default_in_several_files_with_an_index_above_the_size(run: Any, tmp_path: Path) -> None:
    overrides, cfg, saved = run
    out = tmp_path / "bf16"
    line = export(cfg, parse([str(CONFIG), *overrides, "--out", str(out), "--max-shard-size", "100KB"]))
    files = sorted(p.name for p in out.iterdir())
    weights = [f for f in files if f.startswith("model-")]
    assert len(weights) > 1
    assert f"{len(weights)} weight file(s)" in line
    assert "bf16" in line
    assert weights == hf.weight_files(len(weights))
    assert all((out / f).stat().st_size <= 100_000 + 10_000 for f in weights)  # the size, plus a header
    index = json.loads((out / hf.INDEX).read_text())
    assert set(index["weight_map"]) == {hf.to_hf(name) for name in saved[5]}
    _, state = hf.load_hf(out)
    assert all(state[k].dtype == torch.bfloat16 and torch.equal(state[k], v.bfloat16()) for k, v in saved[5].items())
    config = json.loads((out / hf.CONFIG).read_text())
    assert config["torch_dtype"] == "bfloat16"
    assert "eos_token_id" not in config
    assert out.stat().st_mode & 0o777 != 0o700  # not mkdtemp's private mode


def test_shards_are_packed_in_order_and_a_large_tensor_gets_a_file_alone() -> None:
    sizes = {"a": 40, "b": 40, "c": 30, "d": 200, "e": 10}
    assert hf.shard_plan(sizes, 100) == [["a", "b"], ["c"], ["d"], ["e"]]
    assert hf.shard_plan(sizes, 10**9) == [list(sizes)]
    assert hf.weight_files(1) == ["model.safetensors"]
    assert hf.weight_files(2) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def test_byte_tokens_are_written_as_a_tokenizer_that_encodes_as_the_trainer(run: Any, tmp_path: Path) -> None:
    from tokenizers import pre_tokenizers

    overrides, cfg, _ = run
    export(cfg, parse([str(CONFIG), *overrides, "--out", str(tmp_path / "out")]))
    assert set(serving.byte_alphabet()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert len(set(serving.byte_alphabet())) == 256
    written, trainer = HFTokenizer(tmp_path / "out" / hf.TOKENIZER), ByteTokenizer()
    assert written.vocab_size == 256
    for text in ("3+4=", "03+04=7", " a  b\n\t", "é ü 漢字 \x00\x7f", "".join(map(chr, range(1, 256)))):
        assert written.encode(text) == trainer.encode(text)
        assert written.decode(trainer.encode(text)) == text
    generation = json.loads((tmp_path / "out" / serving.GENERATION_CONFIG).read_text())
    assert generation == {}  # pretraining: no eos (byte tokens have none) and no sampling defaults


def _flip_a_byte(checkpoints: Path, step: int) -> None:
    data = next(p for p in (checkpoints / "group-0" / step_dir(step)).iterdir() if p.suffix == ".distcp")
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))


REFUSALS = {
    "flipped": ([], "step 5 does not verify (group-0: __0_0.distcp does not match its sha256"),
    "uncommitted": (["--step", "4"], "step 4 is not committed; committed: 3, 5"),
    "mismatch": (["model.layers=3"], "model.blocks.2.attention_norm.weight is not there"),
    "vocab": (["model.vocab=512"], "model.embed.weight is [256, 64], the config's model makes it [512, 64]"),
    "flag": (["--steps", "3"], "--steps: unknown; usage: train.py export"),
    "dtype": (["--dtype", "int8"], "--dtype 'int8': not one of bf16, fp16, fp32"),
    "size": (["--max-shard-size", "5 GB"], "--max-shard-size: '5 GB' is not a size"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    run: Any, tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides, cfg, _ = run
    checkpoints = Path(cfg.checkpoint.dir)
    if case == "flipped":  # a copy: the other tests read the module's checkpoint
        shutil.copytree(checkpoints, tmp_path / "checkpoints")
        checkpoints = tmp_path / "checkpoints"
        _flip_a_byte(checkpoints, 5)
    extra, expected = REFUSALS[case]
    args = [str(CONFIG), *overrides, f"checkpoint.dir={checkpoints}", *extra, "--out", str(tmp_path / "out")]
    assert main(["export", *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"train.py export: {err.removeprefix('train.py export: ').strip()}"]
    assert expected in err
    if case == "flipped":
        assert "pass --step 3 (an older committed step)" in err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_run_without_a_committed_step_or_a_taken_folder_is_refused(run: Any, tmp_path: Path) -> None:
    overrides, cfg, _ = run
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep")
    with pytest.raises(Invalid, match="exists and is not an empty folder; choose a new one"):
        export(cfg, parse([str(CONFIG), *overrides, "--out", str(tmp_path / "taken")]))
    assert (tmp_path / "taken" / "mine.txt").read_text() == "keep"
    empty = compose(CONFIG, ["run.name=none", f"checkpoint.dir={tmp_path / 'none'}"])
    with pytest.raises(Invalid, match=r"no committed step in group-0..1; pass the run's config and overrides"):
        export(empty, Options(str(CONFIG), [], tmp_path / "out"))
    (tmp_path / "empty").mkdir()  # an empty folder is taken over
    export(cfg, parse([str(CONFIG), *overrides, "--out", str(tmp_path / "empty")]))
    assert (tmp_path / "empty" / hf.WEIGHTS).is_file()


def _hf_folder(folder: Path, vocab_words: list[str], **files: Any) -> None:
    """A checkpoint folder's tokenizer files: a word-level tokenizer.json and the JSON files given."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab_words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / hf.TOKENIZER))
    for name, data in files.items():
        (folder / f"{name}.json").write_text(json.dumps(data))


WORDS = ["<unk>", "<s>", "</s>", "one", "two", "three", "=", "+"]


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """An RL run from a checkpoint folder with a tokenizer: its folder and its overrides (vocab 256, tokenizer 8)."""
    root = tmp_path_factory.mktemp("rl")
    overrides = ["run.name=rl", "run.mode=rl", f"checkpoint.dir={root / 'checkpoints'}", f"rl.hf_checkpoint={root}/hf"]
    overrides += ["rl.temperature=0.7", "rl.max_tokens=12", "rl.allowed="]
    cfg = compose(CONFIG, overrides)
    torch.manual_seed(1)
    model = LanguageModel(cfg.model)
    hf.save_hf(model.state_dict(), cfg.model, root / "hf")
    _hf_folder(root / "hf", WORDS, tokenizer_config={"eos_token": "</s>", "bos_token": "<s>"})
    save_steps(root / "checkpoints", model)
    return root, overrides


def test_an_rl_export_takes_the_checkpoints_tokenizer_and_the_trained_sampling(rl_run: Any, tmp_path: Path) -> None:
    root, overrides = rl_run
    folder = tmp_path / "hf"
    shutil.copytree(root / "hf", folder)
    generation = {"eos_token_id": [2, 7], "temperature": 0.6, "top_p": 0.9, "top_k": 50, "do_sample": True}
    (folder / serving.GENERATION_CONFIG).write_text(json.dumps(generation))
    overrides = [*overrides, f"rl.hf_checkpoint={folder}"]
    line = export(compose(CONFIG, overrides), parse([str(CONFIG), *overrides, "--out", str(tmp_path / "out")]))
    assert f"tokenizer: rl.hf_checkpoint {folder}; eos [2, 7]; temperature 0.7, max_new_tokens 12" in line
    out = tmp_path / "out"
    for name in (hf.TOKENIZER, serving.TOKENIZER_CONFIG):  # the model's own files, as they are
        assert (out / name).read_bytes() == (folder / name).read_bytes()
    assert json.loads((out / serving.GENERATION_CONFIG).read_text()) == {
        "eos_token_id": [2, 7],  # generation_config.json's ends win over tokenizer_config.json's, as in transformers
        "bos_token_id": 1,
        "do_sample": True,
        "temperature": 0.7,  # the run's: the tempered distribution is the policy GRPO trained
        "top_p": 1.0,  # and the whole of it: no top-k
        "max_new_tokens": 12,
    }
    config = json.loads((out / hf.CONFIG).read_text())
    assert config["eos_token_id"] == [2, 7]
    assert config["bos_token_id"] == 1


def test_a_missing_tokenizer_config_is_written_with_the_end_its_files_name(rl_run: Any, tmp_path: Path) -> None:
    root, overrides = rl_run
    folder = tmp_path / "hf"
    shutil.copytree(root / "hf", folder, ignore=shutil.ignore_patterns("tokenizer*"))
    _hf_folder(folder, WORDS, config=json.loads((root / "hf" / hf.CONFIG).read_text()) | {"eos_token_id": 2})
    overrides = [*overrides, f"rl.hf_checkpoint={folder}"]
    export(compose(CONFIG, overrides), parse([str(CONFIG), *overrides, "--out", str(tmp_path / "out")]))
    written = json.loads((tmp_path / "out" / serving.TOKENIZER_CONFIG).read_text())
    assert written["eos_token"] == "</s>"
    assert written["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert json.loads((tmp_path / "out" / serving.GENERATION_CONFIG).read_text())["eos_token_id"] == 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"tokenizer_config": {"eos_token": "<end>"}}, "eos_token '<end>' is not in tokenizer.json"),
        ({"generation_config": {"eos_token_id": 300}}, "eos_token_id 300 is not ids in [0, 256)"),
    ],
)
def test_a_checkpoints_tokenizer_that_contradicts_itself_is_one_line(
    rl_run: Any, tmp_path: Path, change: dict[str, Any], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root, overrides = rl_run
    folder = tmp_path / "hf"
    shutil.copytree(root / "hf", folder)
    _hf_folder(folder, WORDS, **change)
    args = [str(CONFIG), *overrides, f"rl.hf_checkpoint={folder}", "--out", str(tmp_path / "out")]
    assert main(["export", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert expected in err
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_folder_of_another_model_is_refused_naming_the_overrides(
    rl_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _root, overrides = rl_run
    other = tmp_path / "other"
    cfg = compose(CONFIG, [*overrides, "model.d_model=32"])
    hf.save_hf(LanguageModel(cfg.model).state_dict(), cfg.model, other)
    args = [str(CONFIG), *overrides, f"rl.hf_checkpoint={other}", "--out", str(tmp_path / "out")]
    assert main(["export", *args]) == 2
    err = capsys.readouterr().err
    assert "is a different model than the run's; set model.d_model=32" in err
    assert len(err.splitlines()) == 1


def test_a_checkpoint_url_gives_its_tokenizer_files_and_not_its_weights(rl_run: Any, tmp_path: Path) -> None:
    root, overrides = rl_run
    only = (*serving.COPIED, serving.GENERATION_CONFIG, hf.CONFIG)
    fetched = hf.fetch(f"file://{root}/hf", tmp_path / "fetched", only=only)
    assert sorted(p.name for p in fetched.iterdir()) == [hf.CONFIG, hf.TOKENIZER, serving.TOKENIZER_CONFIG]
    overrides = [*overrides, f"rl.hf_checkpoint=file://{root}/hf"]
    line = export(compose(CONFIG, overrides), parse([str(CONFIG), *overrides, "--out", str(tmp_path / "out")]))
    assert f"tokenizer: rl.hf_checkpoint file://{root}/hf; eos [2]" in line
    assert (tmp_path / "out" / hf.TOKENIZER).read_bytes() == (root / "hf" / hf.TOKENIZER).read_bytes()


def test_a_step_that_does_not_verify_in_one_group_is_exported_from_another(run: Any, tmp_path: Path) -> None:
    overrides, cfg, saved = run
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(Path(cfg.checkpoint.dir) / "group-0", checkpoints / "group-0")
    shutil.copytree(Path(cfg.checkpoint.dir) / "group-0", checkpoints / "group-1")
    _flip_a_byte(checkpoints, 5)
    overrides = [*overrides, f"checkpoint.dir={checkpoints}"]
    line = export(
        compose(CONFIG, overrides), parse([str(CONFIG), *overrides, f"--out={tmp_path / 'out'}", "--dtype=fp32"])
    )
    assert line.startswith(f"exported step 5 of run exported (group-1) to {tmp_path / 'out'}")
    _, state = hf.load_hf(tmp_path / "out")
    assert all(torch.equal(state[k], v) for k, v in saved[5].items())
