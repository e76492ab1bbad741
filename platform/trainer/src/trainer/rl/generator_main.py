"""One generator process: ``python -m trainer.rl.generator_main CONFIG_JSON INDEX INCARNATION``.

It asks the controller what to do and does it until the run is done: receive a newer policy version
(over the pair the controller names, into the engine ``rl.engine`` names: engines.py), sample ``rl.group_size`` completions for each leased prompt, or
wait. Each ask carries the seconds it spent generating, syncing and waiting since the last one (the
generators' goodput). Its name is ``generator-INDEX.INCARNATION``: a restarted generator is a new one to
the controller, which issued the old one's prompts again when it died.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from contract import names
from trainer.config import Config, from_dict
from trainer.launch.process import EXIT_REFUSED, exit_process
from trainer.preconditions import engine_installed
from trainer.rl.engines import Engine, build
from trainer.rl.report import GeneratorTime
from trainer.rl.service import Client, RequestFailed
from trainer.rl.tokens import allowed_mask

log = logging.getLogger("trainer.rl")


class Ticker:
    """The seconds per state since the last ask."""

    def __init__(self) -> None:
        self.time = GeneratorTime()
        self.told: dict[str, float] = {}

    def delta(self) -> dict[str, float]:
        now = dict(self.time.seconds)
        out = {k: round(v - self.told.get(k, 0.0), 6) for k, v in now.items()}
        self.told = now
        return {k: v for k, v in out.items() if v > 0}


class Masks:
    """The allowed-token mask of the ids a lease names (the controller's task: rl.allowed in its tokenizer's ids),
    built once per distinct set."""

    def __init__(self, vocab: int, device: torch.device) -> None:
        self.vocab, self.device = vocab, device
        self.built: dict[tuple[int, ...], torch.Tensor] = {}

    def get(self, ids: list[int] | None) -> torch.Tensor | None:
        if ids is None:
            return None
        key = tuple(ids)
        if key not in self.built:
            self.built[key] = allowed_mask(self.vocab, list(key)).to(self.device)
        return self.built[key]


def run(cfg: Config, index: int, incarnation: int) -> int:
    problem = engine_installed(cfg)  # its image, not the driver's: checked here as well as at start
    if problem is not None:
        log.error("generator-%d.%d: %s", index, incarnation, problem)
        return EXIT_REFUSED  # final: the launcher stops the run with this line instead of restarting it
    client = Client(cfg.rl.controller)
    seed = cfg.run.seed + 7919 * (index + 1) + incarnation
    with scratch_for(cfg) as scratch:
        engine = build(cfg, seed=seed, host=client.host, scratch=scratch)
        try:
            return serve(cfg, f"generator-{index}.{incarnation}", engine, client)
        finally:
            engine.receiver.close()  # its weight pair's group, before this process exits


@contextmanager
def scratch_for(cfg: Config) -> Iterator[Path | None]:
    """vLLM's starting folder (engines.start_folder), removed with the generator. The torch engine needs none, and
    gets none: a generator that is killed never removes its temporary folder (323 were left in /tmp here)."""
    if cfg.rl.engine != names.VLLM_ENGINE:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="meridian-generator-") as folder:
        yield Path(folder)


def serve(cfg: Config, name: str, engine: Engine, client: Client) -> int:
    """Ask, then do, until the controller says the run is done."""
    s, generator, receiver = cfg.rl, engine.generator, engine.receiver
    device = torch.device("cuda" if cfg.ft.device == "cuda" else "cpu")
    masks = Masks(cfg.model.vocab, device)
    ticker, sync_failed, refused = Ticker(), False, 0
    while True:
        ask = {"generator": name, "held": receiver.held, "members": receiver.members, "sync_failed": sync_failed,
               "seconds": ticker.delta()}  # fmt: skip
        with ticker.time.timed("waiting"):  # an ask with nothing to do is held until there is (service.py)
            answer, sync_failed = client.post("/lease", ask), False
        if answer.get("done"):
            log.info("%s: the run is done", name)
            return 0
        if "sync" in answer:
            with ticker.time.timed("syncing"):
                try:
                    version = receiver.receive(str(answer["sync"]["pair"]), int(answer["store"]))
                    log.info("%s: holds version %d", name, version)
                except Exception as error:  # the sender died mid-transfer: the controller names another pair
                    log.warning("%s: weight transfer failed: %s", name, str(error)[:200])
                    sync_failed = True
        elif "lease" in answer:
            with ticker.time.timed("generating"):
                started = time.perf_counter()
                prompts = [(int(i), [int(t) for t in tokens]) for i, tokens in answer["prompts"]]
                drawn = generator.generate(
                    [tokens for _, tokens in prompts], s.group_size, max_tokens=s.max_tokens,
                    temperature=s.temperature, allowed=masks.get(answer.get("allowed")), ends=answer.get("ends") or (),
                )  # fmt: skip
                groups = [
                    {"index": i, "completions": [
                        {"response": list(c.response), "logprobs": list(c.logprobs), "version": c.version}
                        for c in group
                    ]}
                    for (i, _), group in zip(prompts, drawn, strict=True)
                ]  # fmt: skip
                result = {"generator": name, "lease": answer["lease"], "groups": groups,
                          "seconds": time.perf_counter() - started}  # fmt: skip
            refused = _answer(client, name, result, refused)
        else:
            with ticker.time.timed("waiting"):
                time.sleep(float(answer.get("wait", 0.2)))


def _answer(client: Client, name: str, result: dict[str, object], refused: int) -> int:
    """Post an answer; a refusal (an expired lease, or what no engine writes: the controller says why) is one
    warning with the refusals in a row, which the controller counts too (its log and refused-answers metric)."""
    try:
        client.post("/result", result)
    except RequestFailed as error:  # its prompts were issued again to another generator
        refused += 1
        log.warning(
            "%s: answer to lease %s refused (%s, %d in a row): %s",
            name, result["lease"], error.reason or "no reason given", refused, error,
        )  # fmt: skip
        return refused
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = from_dict(json.loads(Path(args[0]).read_text()))
    return run(cfg, int(args[1]), int(args[2]))


if __name__ == "__main__":
    exit_process(main())
