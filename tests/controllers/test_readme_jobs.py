"""Every job the READMEs show, found in them, through the CLI as a researcher runs it, under the rules.

Each `gkr submit` or `gkr preflight` command of a fenced block or an inline code span in the READMEs (the ones
tests/newcomer reads, and docs/) runs as `gkr ... --dry-run` (tests/gkr/conftest.py `dry_run`, which prints
what would be applied and, on stderr, which cluster and pool each part goes to); every object then passes
Kueue's rules in that cluster's tree and KubeRay's (fleet.controllers). A command that is not a job to admit
(a synopsis, a placeholder, one shown as refused) is in NOT_JOBS with the reason; any other that does not run
or is not admitted fails, and so does an entry of NOT_JOBS no README shows any more.
"""

from __future__ import annotations

import re
import shlex

import pytest

from fleet.controllers import kuberay, kueue
from fleet.controllers.kueue import Cluster
from tests.conftest import REPO
from tests.controllers.test_shipped import clusters  # noqa: F401 (a fixture)
from tests.gkr.conftest import dry_run, shipped
from tests.newcomer.test_readmes import READMES, sh_commands

GKR_JOB = re.compile(r"gkr (?:submit|preflight)\b")
NAME = "the command's name in prose, not a command"
SYNOPSIS = "a synopsis: the bracketed parts are placeholders"
PLACEHOLDER = "job.yaml or DIR stands for the reader's own"
NOT_JOBS = {
    "gkr submit": NAME,
    "gkr preflight": NAME,
    "gkr submit --dry-run": NAME,
    "gkr preflight --dry-run": NAME,
    "gkr submit [-f job.yaml] [flags] [-- command]": SYNOPSIS,
    "gkr preflight [--pods N --gpus-per-pod G --pool P]": SYNOPSIS,
    "gkr submit job.yaml": "shown refused: without -f gkr asks whether -f was meant (tests/gkr/test_bad_input.py)",
    "gkr submit -f job.yaml": PLACEHOLDER,
    "gkr submit -f job.yaml --dry-run": PLACEHOLDER,
    "gkr submit --workdir DIR ...": PLACEHOLDER,
    "gkr submit --name ... --pods 2 -- python train.py": "a row name of the speed table, elided",
}


def shown(markdown: str) -> list[str]:
    """The gkr job commands of every fenced block and inline code span, whitespace joined."""
    inline = [re.sub(r"\s+", " ", c) for c in re.findall(r"`([^`\n]*(?:\n[^`\n]+)*)`", markdown)]
    return [c for c in [*sh_commands(markdown, r"\w*"), *inline] if GKR_JOB.match(c)]


def documented() -> dict[str, list[str]]:
    """Command -> the READMEs that show it."""
    readmes = [*READMES, *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
    found: dict[str, list[str]] = {}
    for readme in readmes:
        for command in shown((REPO / readme).read_text(encoding="utf-8")):
            found.setdefault(command, []).append(readme)
    return found


SHOWN = documented()
JOBS = sorted(c for c in SHOWN if c not in NOT_JOBS)


def test_the_readmes_jobs_are_found_and_every_mark_is_still_shown() -> None:
    assert len(JOBS) >= 10
    assert {"gkr preflight --team research", "gkr submit -f platform/gkr/examples/grpo-8b.yaml"} <= set(JOBS)
    assert any("--kind raycluster" in c for c in JOBS)
    assert any("--kind job" in c for c in JOBS)
    assert [c for c in NOT_JOBS if c not in SHOWN] == []


def test_shown_reads_blocks_and_spans() -> None:
    text = "Run `gkr submit --name a\n--team t`.\n```bash\ngkr preflight --team t   # why\nls\n```\n`gkr list`\n"
    assert shown(text) == ["gkr preflight --team t", "gkr submit --name a --team t"]


@pytest.mark.parametrize("command", JOBS)
def test_every_job_the_readmes_show_is_admitted(
    command: str,
    clusters: dict[str, Cluster],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)  # the READMEs' paths are from the repository root
    verb, *args = [a for a in shlex.split(command)[1:] if a != "--dry-run"]
    output = [] if verb == "preflight" else ["-o", "yaml"]  # gkr preflight prints YAML only
    run = dry_run(verb, *output, *args)
    found_registry = shipped().registry
    regions = {found_registry.context(r): r.name for r in found_registry.regions}
    found = []
    for context, o in run.objects:
        c = clusters[regions[context]]
        found += [
            f"{regions[context]}: {f}" for f in [*kueue.job_findings(c, o, run.pool(context)), *kuberay.job_findings(o)]
        ]
    assert found == [], f"{command} ({', '.join(SHOWN[command])})"
