"""Each job key declared once (gkr/spec.py): the reader, the options, the flag table and the README's table follow.

GKR_UPDATE_README=1 rewrites the README's table from the declarations.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from click.testing import Result

from contract.codec import setting
from gkr import keys
from gkr.commands.job_args import JobParser
from gkr.flags import from_flags
from gkr.render import render
from gkr.resolve import resolve
from gkr.spec import JobSpec, parse_job
from tests.gkr.conftest import shipped

README = Path(__file__).resolve().parents[2] / "platform" / "gkr" / "README.md"
JOB = {"name": "exp", "team": "research", "command": "python train.py"}


@dataclass(frozen=True)
class WithShm(JobSpec):
    """The README's walkthrough: one more key, declared once."""

    shm_gib: int | None = setting(None, low=1, flag="--shm-gib", help="size of /dev/shm, GiB")


def test_the_readme_table_is_the_declarations() -> None:
    text = README.read_text(encoding="utf-8")
    head, rest = text.split(keys.README_BEGIN + "\n")
    _, tail = rest.split(keys.README_END)
    expected = f"{head}{keys.README_BEGIN}\n{keys.table(JobSpec)}{keys.README_END}{tail}"
    if os.environ.get("GKR_UPDATE_README"):
        README.write_text(expected, encoding="utf-8")
        text = expected
    assert text == expected, "the README's job keys differ from gkr/spec.py; rerun with GKR_UPDATE_README=1"


def test_a_new_key_is_one_declaration() -> None:
    spec, problems = parse_job({**JOB, "shm_gib": 4}, WithShm)
    assert problems == []
    assert isinstance(spec, WithShm)
    assert spec.shm_gib == 4
    # The reader checks its bounds and names its flag; the did-you-mean list has it.
    _, problems = parse_job({**JOB, "shm_gib": 0}, WithShm)
    assert [p.line() for p in problems] == [
        "shm_gib: must be at least 1 (got 0); set shm_gib in the job file or with --shm-gib"
    ]
    _, problems = parse_job({**JOB, "shm_gb": 4}, WithShm)
    assert problems[0].line().startswith("shm_gb: unknown field; did you mean shm_gib?")
    # The flag table, the option and the README's table.
    assert keys.flags(WithShm)["shm_gib"] == "--shm-gib"
    parser = JobParser("gkr submit", "")
    parser.add_job_keys(WithShm)
    assert parser.parse(["--shm-gib", "2"])[1]["--shm-gib"] == 2  # an integer option
    assert "--shm-gib SHM_GIB size of /dev/shm, GiB" in " ".join(parser.format_help().split())  # its help
    assert from_flags({"--shm-gib": 2}, WithShm) == {"shm_gib": ("--shm-gib", 2)}
    assert "| `shm_gib` | integer, at least 1 |  | `--shm-gib` | size of /dev/shm, GiB |" in keys.table(WithShm)
    # Nothing else needs to know of it until something uses it: the job resolves and renders as it did.
    resolved, problems = resolve(spec, shipped().registry)
    assert resolved is not None
    assert not problems
    plain, _ = parse_job(JOB)
    assert plain is not None
    base, _ = resolve(plain, shipped().registry)
    assert base is not None
    assert render(resolved) == render(base)


def test_every_flag_reaches_its_key(gkr: Callable[..., Result]) -> None:
    """The options `gkr submit` shows are the declared flags, each once."""
    text = gkr("submit", "--help").stdout
    for flag in {f for f in keys.flags(JobSpec).values() if f.startswith("--")}:
        assert re.search(rf"\s{re.escape(flag)}\s", text), flag  # a long one ends its line


def test_flags_take_their_keys_shapes() -> None:
    given = {
        "--region": ("us-central1=4", "us-east4=2"),
        "--topology": "required",
        "--no-preflight": True,
        "--force-per-step-sync": True,
        "--env": ("A=1", "B=x=y"),
        "--dataset": ("d",),
        "--pods": None,
        "--home": "",
    }
    assert from_flags(given) == {
        "regions": ("--region", {"us-central1": {"replica_groups": 4}, "us-east4": {"replica_groups": 2}}),
        "topology": ("--topology", {"mode": "required"}),
        "preflight": ("--no-preflight", False),
        "allow_per_step_sync": ("--force-per-step-sync", True),
        "env": ("--env", {"A": "1", "B": "x=y"}),
        "datasets": ("--dataset", ["d"]),
        "home": ("--home", ""),
    }
    assert from_flags({"--region": ("us-east4",)}) == {"region": ("--region", "us-east4")}
