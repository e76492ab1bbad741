"""The model family, its parameter and FLOP counts, and MFU."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from trainer.config import ConfigError, Model, compose, peak_from_env
from trainer.model.flops import Window, flops_per_token, format_mfu, mfu, parameters
from trainer.model.transformer import LanguageModel

from tests.trainer.conftest import CONFIG

# Published sizes: Llama 3 8B 8.03 B, 70B 70.6 B (untied); Llama 3.2 1B is 1.24 B with tied embeddings,
# here untied: + 128256 x 2048 = 1.50 B.
SIZES = {"tiny": 131_392, "small": 25_436_672, "1b": 1_498_482_688, "8b": 8_030_261_248, "70b": 70_553_706_496}


@pytest.mark.parametrize("size", list(SIZES))
def test_each_size_composes_and_its_parameters_are_counted_from_the_config(size: str) -> None:
    cfg = compose(CONFIG, ["run.name=x", f"model={size}"])
    with torch.device("meta"):  # no memory: 70b builds in a moment
        model = LanguageModel(cfg.model)
    assert sum(p.numel() for p in model.parameters()) == parameters(cfg.model).total == SIZES[size]


def test_llama_shapes() -> None:
    shapes = {s: compose(CONFIG, ["run.name=x", f"model={s}"]).model for s in ("1b", "8b", "70b")}
    got = {s: (m.d_model, m.layers, m.heads, m.kv_heads, m.ffn_dim, m.vocab) for s, m in shapes.items()}
    assert got == {
        "1b": (2048, 16, 32, 8, 8192, 128256),
        "8b": (4096, 32, 32, 8, 14336, 128256),
        "70b": (8192, 80, 64, 8, 28672, 128256),
    }


def test_flops_per_token_against_a_hand_count() -> None:
    m = Model(vocab=10, d_model=8, layers=1, heads=2, kv_heads=1, ffn_dim=12, seq_len=4)
    # head_dim 8/2 = 4. Multiply-adds per token through each matrix (d_model in x out):
    #   wq 8 x (2 heads x 4) = 64, wk 8 x (1 KV head x 4) = 32, wv 32, wo 8 x 8 = 64,
    #   w1 8 x 12 = 96, w3 96, w2 12 x 8 = 96, output head 8 x 10 = 80        -> N = 560
    #   (the embedding is a lookup; the 3 RMSNorm weight vectors are elementwise)
    # forward 2 FLOPs per multiply-add, backward twice the forward:  6 x 560 = 3360
    # attention: per head, Q K^T and A V are 4 positions x 4 dims = 16 multiply-adds each,
    #   2 heads x 2 matmuls x 16 = 64 multiply-adds = 128 FLOPs forward, x3 with backward = 384
    #   (= 12 L H Q T = 12 x 1 x 2 x 4 x 4)
    assert parameters(m).matmul == 560
    assert flops_per_token(m) == 3360 + 384
    model = LanguageModel(m)
    linear = sum(mod.weight.numel() for mod in model.modules() if isinstance(mod, nn.Linear))
    assert linear == 560  # the count is the model's own matrices


def test_mfu_for_known_numbers() -> None:
    # 8 GPUs at 989 TFLOPS, 1e10 FLOPs per token, 80,000 tokens/s: 8e14 / 7.912e15 = 10.1%.
    assert mfu(80_000, 1e10, 8, 989) == pytest.approx(8e14 / 7.912e15)
    assert format_mfu(mfu(80_000, 1e10, 8, 989)) == "10.1%"
    assert mfu(80_000, 1e10, 8, 0) is None  # unknown peak (CPU): n/a
    assert format_mfu(None) == "n/a"
    ticks = iter([0.0, 2.0, 2.0])
    window = Window(tokens_per_step=1000, flops_per_token=10**9, gpus=2, peak_tflops=1.0, clock=lambda: next(ticks))
    window.start(10)
    # 20 steps x 1000 tokens in 2 s = 10,000 tokens/s x 1e9 = 1e13 FLOPs/s over 2 x 1e12: 5.0
    assert window.close(30) == {"tokens_per_s": 10_000.0, "mfu": 5.0}
    assert window.close(30) == {"tokens_per_s": 0.0, "mfu": 0.0}


def test_the_peak_comes_from_gkrs_environment_unless_configured() -> None:
    cfg = compose(CONFIG, ["run.name=x"])
    assert cfg.perf.peak_tflops == 0
    assert peak_from_env(cfg, {"MERIDIAN_PEAK_BF16_TFLOPS": "989"}).perf.peak_tflops == 989
    explicit = compose(CONFIG, ["run.name=x", "perf.peak_tflops=500"])
    assert peak_from_env(explicit, {"MERIDIAN_PEAK_BF16_TFLOPS": "989"}).perf.peak_tflops == 500
    for bad in ("abc", "-5", "nan", "inf"):
        with pytest.raises(ConfigError, match=r"MERIDIAN_PEAK_BF16_TFLOPS: .* is not a number"):
            peak_from_env(cfg, {"MERIDIAN_PEAK_BF16_TFLOPS": bad})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.kv_heads=3"], "model.kv_heads: 3 does not divide model.heads 4"),
        (["model.heads=64"], "model.heads: head dimension d_model/heads = 1 is odd"),
        (["data=text", "model.vocab=100"], "model.vocab: 100 < 256"),
        (["model.precision=fp16"], "model.precision: 'fp16' is not one of 'auto', 'bf16', 'fp32'"),
        (["perf.peak_tflops=-1"], "perf.peak_tflops: must be at least 0"),
    ],
)
def test_bad_model_settings_are_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compose(CONFIG, ["run.name=x", *overrides])


def _grads(cfg: Model, tokens: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = LanguageModel(cfg)
    loss = model.loss(tokens)
    loss.backward()  # type: ignore[no-untyped-call]
    return loss.item(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_activation_checkpointing_and_bf16_autocast() -> None:
    cfg = compose(CONFIG, ["run.name=x"]).model
    tokens = torch.randint(0, cfg.vocab, (2, cfg.seq_len + 1), generator=torch.Generator().manual_seed(1))
    loss, grads = _grads(cfg, tokens)
    assert loss == pytest.approx(torch.log(torch.tensor(256.0)).item(), rel=0.05)  # a fresh model is uniform
    same_loss, same_grads = _grads(Model(**{**cfg.__dict__, "activation_checkpointing": True}), tokens)
    assert same_loss == loss  # recomputation changes memory, not results
    assert all(torch.allclose(a, b) for a, b in zip(grads, same_grads, strict=True))
    bf16_loss, _ = _grads(Model(**{**cfg.__dict__, "precision": "bf16"}), tokens)
    assert bf16_loss == pytest.approx(loss, rel=0.02)
    assert bf16_loss != loss


def test_a_causal_model_does_not_see_the_future() -> None:
    cfg = compose(CONFIG, ["run.name=x"]).model
    model = LanguageModel(cfg).eval()
    tokens = torch.randint(0, cfg.vocab, (1, 16))
    changed = tokens.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % cfg.vocab
    with torch.no_grad():
        assert torch.allclose(model(tokens)[0, :10], model(changed)[0, :10])
        assert not torch.allclose(model(tokens)[0, 10:], model(changed)[0, 10:])
