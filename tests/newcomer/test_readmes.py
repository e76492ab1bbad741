"""Every command in the READMEs' ```sh blocks, as a newcomer would type it.

Each is run (in a copy of the checkout, with a PATH that has no Node.js,
kubectl or Terraform of its own), or checked to fail with the one line that
names the fix where it needs cloud credentials, or skipped for a stated reason.
A command without a classification here fails the test, so the READMEs stay true.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.newcomer.checkout import copy_checkout, environment, hidden_path, rebuilds_venv

READMES = [
    "README.md",
    *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "platform").glob("*/README.md")),
    "infra/README.md",
    "kustomize/README.md",
    "argocd/README.md",
]


@dataclass(frozen=True)
class Run:
    contains: str  # in stdout + stderr
    codes: tuple[int, ...] = (0,)
    activated: bool = False  # after `. .venv/bin/activate`, as the README's researcher path says
    cwd: str = "."
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Skip:
    reason: str


# The newcomer's PATH has no Terraform, which scripts/cdktn checks before credentials (test_tools.py checks both).
NO_TERRAFORM = f"install Terraform {(REPO / 'infra' / '.terraform-version').read_text().strip()}"
NO_KUBECONFIG = "gcloud container clusters get-credentials"  # gkr, with no kubeconfig: the command that fixes it
GKR = (("GKR_REGISTRY", "{root}/generated"),)  # the README's `export GKR_REGISTRY=...`, for this checkout
TRAINING = (
    "a CPU training run of minutes: tests/trainer runs the driver end to end; the quickstart runs train.py --help"
)
SYNOPSIS = "a synopsis: the bracketed parts are placeholders, not a command"

COMMANDS: dict[str, Run | Skip] = {
    # README.md, platform engineer
    "make setup": Skip("builds .venv: this test runs inside it (a fresh clone's `make test` runs it first)"),
    "make help": Run("plan "),
    "make plan": Run("Argo CD, per cluster"),
    "make generate": Run("wrote "),
    ".venv/bin/meridian generate --check": Run("generated files are current"),
    "scripts/cdktn synth": Run("Generated Terraform code for the stacks"),
    "scripts/cdktn diff us-central1": Run(NO_TERRAFORM, codes=(2,)),
    ".venv/bin/python scripts/review.py --base origin/main": Skip(
        "tests/review runs it: the workflow's own line on a destructive change, and a stale HEAD refused"
    ),
    "make test": Skip("this test is part of it"),
    "make unit": Skip("this test is part of make test, which runs every tier"),
    "make scenario": Skip("this test is one of them (make test runs every tier)"),
    "make live": Skip("part of make test, which runs every tier"),
    "make twin": Skip("CI runs it after `make test` (.ci/run): podman builds and containers, its own budget"),
    # README.md, researcher
    ". .venv/bin/activate": Skip("sets up the shell the commands marked `activated` here run in"),
    "gkr submit -f platform/gkr/examples/flex-start-finetune.yaml --dry-run": Run(
        "rayjob sft-eval-sweep", activated=True
    ),
    "gkr submit -f platform/gkr/examples/flex-start-finetune.yaml": Run(NO_KUBECONFIG, codes=(2,), activated=True),
    "python platform/trainer/train.py --help": Run("usage: train.py", activated=True),
    "python platform/trainer/train.py platform/trainer/configs/grpo.yaml run.name=grpo run.steps=150": Skip(
        "a CPU GRPO run of minutes: tests/rl/test_distributed.py runs it end to end, with its faults"
    ),
    "gkr submit -f platform/gkr/examples/grpo-8b.yaml --dry-run": Run("generators 1 pod x 8 H200", activated=True),
    "preflight run --check compute --cpu": Run("PASS  compute", activated=True),
    # platform/fleet/README.md
    "make plan FLEET=path/to/fleet.yaml": Run("path/to/fleet.yaml", codes=(2,)),  # the placeholder: one line, exit 2
    ".venv/bin/meridian plan --fleet fleet.yaml --json": Run('"regions"'),
    "make review BASE=origin/main": Skip("tests/review runs the review (scenarios on throwaway commits)"),
    ".venv/bin/meridian-review --base origin/main --plans plans/": Skip(
        "needs `terraform show -json` plans of a project with state: no Terraform runs here"
    ),
    # platform/gkr/README.md
    "gcloud container clusters get-credentials meridian-us-east4 --region us-east4 --dns-endpoint": Skip(
        "Google's gcloud, with credentials for the project"
    ),
    "export GKR_REGISTRY=~/src/meridian/generated": Skip(
        "the gkr lines below run with GKR_REGISTRY set to this checkout's"
    ),
    "gkr registry fetch --region us-east4": Run(NO_KUBECONFIG, codes=(2,), activated=True, env=GKR),
    "gkr registry show": Run("schema: meridian.registry/v1", activated=True, env=GKR),
    # (its submit lines are the root README's own: paths from the repository root, run from there)
    "gkr list --team research": Run(NO_KUBECONFIG, codes=(2,), activated=True, env=GKR),
    "gkr status sft-eval-sweep --team research": Run(NO_KUBECONFIG, codes=(2,), activated=True, env=GKR),
    "gkr logs sft-eval-sweep --role worker -f --team research": Run(NO_KUBECONFIG, codes=(2,), activated=True, env=GKR),
    "gkr delete sft-eval-sweep --team research": Run(NO_KUBECONFIG, codes=(2,), activated=True, env=GKR),
    # platform/preflight/README.md: no GPU here, so GPU checks fail (1) or cannot run (2), one line each
    "preflight run": Run("kernel-log", codes=(0, 1, 2), activated=True),
    "preflight run --check kernel-log --check gpu-state --json": Run('"kernel-log"', codes=(0, 1, 2), activated=True),
    "preflight run --kernel-log saved-dmesg.txt --nvidia-smi saved.csv": Run(
        "cannot read the kernel log", codes=(1, 2), activated=True
    ),
    "preflight run --deep --level 3 --peers n1,n2 --json": Skip(
        "needs peers running it at the same time: tests/preflight/test_multinode.py runs two on loopback"
    ),
    "preflight run --deep [--level 1-4] [--peers HOST,...] [--self HOST] [--peer-port N] [--json] "
    "[--dcgmi FILE] [--dcgm-host HOST] [--dcgm-timeout S] [--peer-timeout S] "
    "[--expect-rdma-nics N] [--min-rdma-gbps G] [--min-busbw-gbps X]": Skip(SYNOPSIS),
    # platform/fleet/README.md
    ".venv/bin/meridian goodput --days 5 --seeds 1": Run("the goal of 97%"),
    ".venv/bin/python scripts/bench_goodput.py --only scenarios": Skip(
        "a benchmark (about 15 s here); tests/fleet/test_goodput.py tests the model"
    ),
    # platform/trainer/README.md
    "python platform/trainer/train.py platform/trainer/configs/config.yaml run.name=example [key=value ...] "
    "[+new.key=value ...]": Skip(SYNOPSIS),
    "python platform/trainer/train.py platform/trainer/configs/config.yaml run.name=demo": Skip(TRAINING),
    "python platform/trainer/train.py platform/trainer/configs/config.yaml run.name=dl optim=diloco "
    "optim.sync_every=50": Skip(TRAINING),
    "python platform/trainer/train.py platform/trainer/configs/config.yaml run.name=demo run.steps=600": Skip(TRAINING),
    "python platform/trainer/train.py export platform/trainer/configs/config.yaml run.name=demo --out /tmp/demo-hf": Skip(
        "exports the demo run's checkpoint, which that training run commits; tests/rl/test_export.py runs the command"
    ),
    # platform/warden/README.md
    "warden serve [--config /etc/warden/config.json] [--dry-run] [--kubeconfig F] [--once] [--round-seconds 30] "
    "[--resync-seconds 300] [--qps 20 --burst 40]": Skip(SYNOPSIS),
    'warden agent --node "$NODE_NAME" [--kmsg /dev/kmsg] [--interval-seconds 30] [--once]': Skip(SYNOPSIS),
    'warden hold NODE --reason "why" [--dry-run]': Skip(SYNOPSIS),
    'warden release NODE --reason "why" [--skip-check] [--dry-run]': Skip(SYNOPSIS),
    'warden report NODE --reason "why" [--dry-run]': Skip(SYNOPSIS),
    "warden held": Run(NO_KUBECONFIG, codes=(2,), activated=True),
    # infra/README.md
    "scripts/cdktn deploy global": Run(NO_TERRAFORM, codes=(2,)),
    "scripts/cdktn deploy us-central1": Run(NO_TERRAFORM, codes=(2,)),
    # argocd/README.md
    ".venv/bin/python scripts/bootstrap_argocd.py meridian-us-central1 --dry-run": Run("/.venv/bin/kubectl apply"),
    ".venv/bin/python scripts/bootstrap_argocd.py meridian-us-central1": Run("no gcloud on PATH", codes=(2,)),
}


def sh_commands(markdown: str, info: str = "sh") -> list[str]:
    """The commands of every ```sh block (`info`: a pattern of the blocks' info strings): continuation lines
    joined, trailing `# comments` dropped."""
    commands = []
    for block in re.findall(rf"^```(?:{info})\n(.*?)^```", markdown, re.S | re.M):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command and not command.startswith("#"):
                commands.append(re.sub(r"\s+", " ", command))
    return commands


def documented() -> dict[str, list[str]]:
    """Command -> the READMEs that show it."""
    out: dict[str, list[str]] = {}
    for readme in READMES:
        for command in sh_commands((REPO / readme).read_text(encoding="utf-8")):
            out.setdefault(command, []).append(readme)
    return out


def test_every_readme_command_is_classified() -> None:
    shown = documented()
    assert [f"{c!r} ({', '.join(shown[c])})" for c in shown if c not in COMMANDS] == []
    assert [c for c in COMMANDS if c not in shown] == []  # no classification outlives its command


def test_the_quickstart_is_what_this_test_runs() -> None:
    quickstart = sh_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert {"make plan", "make help", "python platform/trainer/train.py --help"} <= set(quickstart)
    assert sum(isinstance(COMMANDS[c], Run) for c in quickstart) >= 8


def test_sh_commands_joins_and_strips() -> None:
    text = "```sh\nmake plan   # why\nwarden serve \\\n   --once\n```\n```yaml\nx: 1\n```\n"
    assert sh_commands(text) == ["make plan", "warden serve --once"]


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("newcomer")
    root = copy_checkout(base / "meridian")
    (base / "home").mkdir()  # no credentials, no kubeconfig, no gcloud config
    return root, environment(root, hidden_path(base / "bin"), base / "home")


RUNS = [c for c, v in COMMANDS.items() if isinstance(v, Run)]


@pytest.mark.scenario
@pytest.mark.parametrize("command", RUNS)
def test_readme_command(machine: tuple[Path, dict[str, str]], command: str) -> None:
    root, env = machine
    verdict = COMMANDS[command]
    assert isinstance(verdict, Run)
    env = {**env, **{k: v.format(root=root) for k, v in verdict.env}}
    assert not rebuilds_venv(root, command, env), f"{command} would rebuild .venv: refusing to run it"
    line = f". {root}/.venv/bin/activate && {command}" if verdict.activated else command
    result = subprocess.run(
        ["bash", "-c", line], cwd=root / verdict.cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode in verdict.codes, f"exit {result.returncode}:\n{output[-3000:]}"
    assert verdict.contains in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def test_gkr_readme_paths_are_from_the_repository_root() -> None:
    """gkr's README is read from the root like the others: its example paths work there, not only in platform/gkr."""
    text = (REPO / "platform/gkr/README.md").read_text(encoding="utf-8")
    paths = re.findall(r"(?<![\w/.-])((?:platform/gkr/)?examples/[\w.-]+\.yaml)", text)
    assert paths
    assert [p for p in paths if not p.startswith("platform/gkr/") or not (REPO / p).is_file()] == []
