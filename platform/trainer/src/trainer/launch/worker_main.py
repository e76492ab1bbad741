"""Entry point of one local replica-group process: `python -m trainer.launch.worker_main CONFIG_JSON GROUP LIGHTHOUSE`."""

from __future__ import annotations

import json
import logging
import sys

from contract.problem import Invalid
from trainer.config import from_dict
from trainer.launch.process import EXIT_NONFINITE, EXIT_REFUSED, exit_process
from trainer.loop.nonfinite import NonFiniteStop
from trainer.loop.worker import train
from trainer.observe.runs import EventLog, run_dir


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("trainer").setLevel(logging.INFO)
    logging.getLogger("torchft").setLevel(logging.INFO)  # this process's output is its group's log file
    config_json, group, address = sys.argv[1:4]
    with open(config_json) as f:
        cfg = from_dict(json.load(f))
    try:
        train(cfg, int(group), address)
    except NonFiniteStop as stop:
        # One line, and an exit code the local launcher treats as final: a restart would diverge again.
        print(f"replica group {group}: {stop}", file=sys.stderr, flush=True)
        # stderr is the group's log file: the launcher's console shows this event instead.
        EventLog(run_dir(cfg) / f"events-{group}.jsonl").write("stopped", group=int(group), reason=str(stop))
        sys.exit(EXIT_NONFINITE)
    except Invalid as refused:  # an input it cannot use (an RL checkpoint from a bucket): final, one line
        print(f"replica group {group}: {refused.lines[0]}", file=sys.stderr, flush=True)
        EventLog(run_dir(cfg) / f"events-{group}.jsonl").write("stopped", group=int(group), reason=refused.lines[0])
        sys.exit(EXIT_REFUSED)


if __name__ == "__main__":
    main()
    exit_process(0)
