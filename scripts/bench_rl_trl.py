"""Benchmark: time to held-out greedy 0.8 on the arithmetic task, Meridian's RL mode beside TRL's GRPOTrainer.

The same task for both (issue 41): the arithmetic prompts of `configs/rl/arithmetic.yaml` (the training ones
in Meridian's order, the 44 held out), exact-match reward, sampling masked to the ten digits (TRL:
`suppress_tokens`), 32 prompts x 16 samples a step, lr 1e-3 (AdamW betas 0.9/0.95, no weight decay, grad clip
1), clip 0.2, no KL, the same starting weights (the `tiny` model seeded with --seed, exported with
`hf.save_hf`), one thread each. Meridian is `train.py configs/grpo.yaml` at its defaults (two trainer groups,
two generators, the controller) from that folder (`rl.hf_checkpoint`); TRL 1.16's `GRPOTrainer` runs on CPU
(`use_cpu`, no vLLM) with a byte-level tokenizer over the same ids and a callback that measures the same
held-out greedy accuracy (argmax over the digits) every 10 steps, as Meridian's `rl.eval_every` 10 does.

Time to 0.8: from starting the process to the record of the first evaluation at or above 0.8 (Meridian:
`rl.jsonl`; TRL: the callback's), start-up included; each run is stopped there. One after the other, the
order alternating, --runs rounds; medians and the ratio (target: Meridian at most 0.5 x TRL in every run).
TRL runs from its own virtualenv, .cache/bench/trl/, built once from requirements/trl.lock (pinned,
hash-checked) and torch from requirements/torch.txt (the local CPU build, as .venv): PyPI must be
reachable that once.

    .venv/bin/python scripts/bench_rl_trl.py [--runs 3] [--steps 300] [--no-trl] [--no-meridian]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "platform/trainer/train.py"
GRPO = REPO / "platform/trainer/configs/grpo.yaml"
TRL_LOCK = REPO / "requirements" / "trl.lock"
TORCH_PINS = REPO / "requirements" / "torch.txt"
TRL_ENV = REPO / ".cache" / "bench" / "trl"
TARGET = 0.8  # held-out greedy accuracy
TARGET_RATIO = 0.5  # Meridian's time against TRL's (issue 41)
EVAL_EVERY = 10
DIGITS = "0123456789"


# -- the shared start: weights and prompts --------------------------------------------------------------------


def prepare(folder: Path, seed: int, steps: int) -> Path:
    """The starting weights (HF folder) and task.json (training prompts in Meridian's order, the held-out ones)."""
    import torch
    from trainer.config import compose
    from trainer.model.transformer import LanguageModel
    from trainer.rl.grpo import make_task
    from trainer.rl.hf import save_hf

    cfg = compose(GRPO, ["run.name=bench", f"run.seed={seed}"])
    torch.manual_seed(seed)
    model = LanguageModel(cfg.model)
    save_hf(model.state_dict(), cfg.model, folder / "start")
    task = make_task(cfg.rl, cfg.model.vocab)
    prompts = task.prompts
    epochs = steps * cfg.rl.prompts_per_step // len(prompts.train) + 1  # what the longest run trains, in order
    train = [prompts[i] for i in range(epochs * len(prompts.train))]
    settings = {
        "prompts_per_step": cfg.rl.prompts_per_step, "group_size": cfg.rl.group_size, "lr": cfg.optim.lr,
        "clip": cfg.rl.clip_high, "temperature": cfg.rl.temperature, "seed": seed,
    }  # fmt: skip
    problems = {
        "train": [{"prompt": p.prompt, "answer": p.answer} for p in train],
        "held_out": [{"prompt": p.prompt, "answer": p.answer} for p in prompts.held_out],
    }
    (folder / "task.json").write_text(json.dumps(problems | settings))
    return folder / "start"


# -- Meridian -----------------------------------------------------------------------------------------------


def meridian(folder: Path, start: Path, steps: int, name: str) -> float | None:
    """Seconds from launching `train.py` to the first step record with greedy >= TARGET; None if it never got there."""
    report = folder / "runs"
    command = [
        sys.executable, str(TRAIN), str(GRPO), f"run.name={name}", f"run.steps={steps}", f"run.report_dir={report}",
        f"checkpoint.dir={folder / 'ckpt' / name}", f"rl.hf_checkpoint={start}", f"rl.eval_every={EVAL_EVERY}",
    ]  # fmt: skip
    records = report / name / "rl.jsonl"
    began = time.time()
    with (folder / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                reached = _reached(records)
                if reached is not None:
                    return reached - began
            reached = _reached(records)
            return None if reached is None else reached - began
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher and the groups and generators it started
            proc.wait()


def _reached(records: Path) -> float | None:
    if not records.is_file():
        return None
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    # The evaluation's own record: a step's line (and record) carries it only when it came before the next commit.
    reached = [r for r in rows if r.get("event") == "greedy" and r.get("step", 0) > 0 and r["greedy"] >= TARGET]
    if not reached:
        return None
    last = ([r for r in rows if r.get("event") == "step"] or [{}])[-1]
    issued = max(1, int(last.get("issued", 0)))
    print(f"  meridian: step {reached[0]['step']}, {last.get('evicted', 0)} of {issued} issued prompts evicted for "
          f"age by step {last.get('step', 0)} ({int(last.get('evicted', 0)) / issued:.1%})", flush=True)  # fmt: skip
    return float(reached[0]["time"])


# -- TRL ------------------------------------------------------------------------------------------------------


def trl_python() -> Path:
    """TRL's own virtualenv, (re)built from its lock when it is missing or the lock changed."""
    stamp = TRL_ENV / "lock.sha256"
    digest = hashlib.sha256(TRL_LOCK.read_bytes() + TORCH_PINS.read_bytes()).hexdigest()
    python = TRL_ENV / "bin" / "python"
    if not (stamp.is_file() and stamp.read_text(encoding="utf-8") == digest):
        shutil.rmtree(TRL_ENV, ignore_errors=True)
        print(f"building TRL's virtualenv in {TRL_ENV.relative_to(REPO)} from {TRL_LOCK.relative_to(REPO)}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(TRL_ENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        torch_pin = next(line.split()[0] for line in TORCH_PINS.read_text().splitlines() if line.startswith("torch=="))
        for args in ([torch_pin], ["--require-hashes", "-r", str(TRL_LOCK)]):
            done = subprocess.run([*pip, *args], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                why = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
                raise SystemExit(
                    f"error: cannot build TRL's virtualenv in {TRL_ENV} (PyPI must be reachable once): {why}"
                )
        stamp.write_text(digest, encoding="utf-8")
    return python


def trl(folder: Path, start: Path, steps: int, name: str) -> float | None:
    """Seconds from launching TRL's run to its callback's first held-out greedy >= TARGET; None if never."""
    out = folder / f"{name}.json"
    command = [str(trl_python()), __file__, "--trl-side", str(start), str(folder / "task.json"), str(out), str(steps)]
    env = dict(os.environ) | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    began = time.time()
    with (folder / f"{name}.log").open("wb") as log:
        done = subprocess.run(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = (folder / f"{name}.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"error: TRL's run exited {done.returncode}: {tail[0]} ({folder / f'{name}.log'})")
    reached = json.loads(out.read_text()).get("reached")
    return None if reached is None else float(reached) - began


def _byte_tokenizer() -> Any:
    """Byte tokens, as Meridian's ByteTokenizer: id = the character's byte (the prompts are ASCII); left padding."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fast = Tokenizer(models.WordLevel(vocab={chr(i): i for i in range(256)}, unk_token=chr(0)))
    fast.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    fast.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call, unused-ignore]
        tokenizer_object=fast, pad_token=chr(0), eos_token=chr(0), unk_token=chr(0)
    )
    tokenizer.padding_side = "left"
    return tokenizer


def _trl_config(task: dict[str, Any], output: Path, steps: int, digits: list[int]) -> Any:
    """GRPOConfig with Meridian's setting: one batch of prompts x samples a step, sampled once, trained once."""
    from trl import GRPOConfig  # type: ignore[import-not-found, unused-ignore]

    batch = task["prompts_per_step"] * task["group_size"]
    config = GRPOConfig(
        output_dir=str(output), use_cpu=True, use_vllm=False, bf16=False,
        gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=EVAL_EVERY,
        max_steps=steps, per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=task["group_size"], max_completion_length=1, temperature=task["temperature"], top_k=0,
        top_p=1.0, generation_kwargs={"suppress_tokens": [i for i in range(256) if i not in digits]},
        learning_rate=task["lr"], lr_scheduler_type="constant", warmup_steps=0, adam_beta1=0.9, adam_beta2=0.95,
        weight_decay=0.0, max_grad_norm=1.0, epsilon=task["clip"], beta=0.0, num_iterations=1, loss_type="grpo",
        scale_rewards="group", seed=task["seed"], dataloader_num_workers=0, shuffle_dataset=False,
        disable_dropout=True,
    )  # fmt: skip
    return config


def trl_side(start: str, task_file: str, out: str, steps: int) -> None:
    """Runs in TRL's virtualenv: GRPOTrainer on the task, stopped by the callback at held-out greedy TARGET."""
    import torch
    from datasets import Dataset  # type: ignore[import-not-found, unused-ignore]  # TRL's virtualenv only
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOTrainer  # type: ignore[import-not-found, unused-ignore]

    torch.set_num_threads(1)
    task = json.loads(Path(task_file).read_text())
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    digits = [ord(c) for c in DIGITS]
    result: dict[str, Any] = {"evaluations": [], "reached": None}

    def exact(prompts: list[str], completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return [1.0 if c.strip() == a.strip() else 0.0 for c, a in zip(completions, answer, strict=True)]

    @torch.no_grad()
    def greedy() -> float:
        """Held-out greedy accuracy, argmax over the digits, prompts of one length at a time (no padding)."""
        was = model.training
        model.eval()  # type: ignore[no-untyped-call, unused-ignore]
        by_length: dict[int, list[dict[str, str]]] = {}
        for p in task["held_out"]:
            by_length.setdefault(len(p["prompt"]), []).append(p)
        correct = 0
        for group in by_length.values():
            ids = torch.tensor([[ord(c) for c in p["prompt"]] for p in group])
            logits = model(input_ids=ids).logits[:, -1, digits]
            correct += sum(DIGITS[int(i)] == p["answer"].strip() for i, p in zip(logits.argmax(-1), group, strict=True))
        model.train(was)
        return correct / len(task["held_out"])

    class HeldOut(TrainerCallback):  # type: ignore[misc, unused-ignore]
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if state.global_step % EVAL_EVERY == 0:
                accuracy = greedy()
                result["evaluations"].append([state.global_step, accuracy, time.time()])
                print(f"trl step {state.global_step}  greedy {accuracy:.2f}", flush=True)
                if accuracy >= TARGET:
                    result["reached"] = time.time()
                    control.should_training_stop = True
            return control

    config = _trl_config(task, Path(out).parent / "trl-out", steps, digits)
    trainer = GRPOTrainer(
        model=model, reward_funcs=exact, args=config, processing_class=_byte_tokenizer(),
        train_dataset=Dataset.from_list(task["train"]), callbacks=[HeldOut()],
    )  # fmt: skip
    print(f"trl step 0  greedy {greedy():.2f}", flush=True)
    trainer.train()
    Path(out).write_text(json.dumps(result))


# -- the comparison -----------------------------------------------------------------------------------------------


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--trl-side":
        weights, task_file, out, steps = sys.argv[2:6]
        trl_side(weights, task_file, out, int(steps))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="the most steps a run takes before it counts as never")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-trl", action="store_true")
    parser.add_argument("--no-meridian", action="store_true")
    args = parser.parse_args()
    if args.runs < 1 or args.steps < EVAL_EVERY:
        raise SystemExit(f"error: --runs must be at least 1 and --steps at least {EVAL_EVERY}")
    if not args.no_trl:
        trl_python()
    times: dict[str, list[float | None]] = {"meridian": [], "trl": []}
    with tempfile.TemporaryDirectory(prefix="bench-rl-trl-") as scratch:
        folder = Path(scratch)
        start = prepare(folder, args.seed, args.steps)
        for run in range(args.runs):
            order = ["meridian", "trl"] if run % 2 == 0 else ["trl", "meridian"]
            for who in order:
                if (who == "trl" and args.no_trl) or (who == "meridian" and args.no_meridian):
                    continue
                measure = meridian if who == "meridian" else trl
                took = measure(folder, start, args.steps, f"{who}-{run}")
                times[who].append(took)
                print(
                    f"run {run + 1}/{args.runs}  {who:8}  time to held-out greedy {TARGET}: {seconds(took)}", flush=True
                )
    report(times)


def report(times: dict[str, list[float | None]]) -> None:
    medians: dict[str, float | None] = {}
    for who, values in times.items():
        if not values:
            continue
        reached = [v for v in values if v is not None]
        medians[who] = statistics.median(reached) if len(reached) == len(values) else None
        print(f"{who:8}  median {seconds(medians[who])}  runs: {', '.join(seconds(v) for v in values)}")
    ours, theirs = medians.get("meridian"), medians.get("trl")
    if ours is not None and theirs is not None:
        ratio = ours / theirs
        pairs = list(zip(times["meridian"], times["trl"], strict=False))
        every = all(m is not None and t is not None and m <= TARGET_RATIO * t for m, t in pairs)
        verdict = "met in every run" if every else "NOT met in every run"
        print(f"ratio Meridian / TRL (medians): {ratio:.2f} (target <= {TARGET_RATIO}: {verdict})")


if __name__ == "__main__":
    main()
