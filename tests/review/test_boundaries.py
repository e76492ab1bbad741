"""The review sits above fleet and infra, and runs each checkout's commands with that checkout's code."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from review import review as review_module
from review.snapshot import LAUNCHER, PRODUCER, Snapshot, take
from tests.conftest import REPO


def imported_modules(folder: Path) -> dict[str, list[str]]:
    """Module -> the files under `folder` that import it (absolute imports only)."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            for name in names:
                found.setdefault(name, []).append(path.relative_to(folder).as_posix())
    return found


def review_imports(folder: Path) -> dict[str, list[str]]:
    return {
        m: files
        for m, files in imported_modules(folder).items()
        if m == "review" or m.startswith(("review.", "fleet.review"))
    }


@pytest.mark.parametrize("folder", ["infra", "platform/fleet/src"])
def test_nothing_below_the_review_imports_it(folder: str) -> None:
    assert review_imports(REPO / folder) == {}


def test_the_scan_sees_an_import_of_the_review(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("from fleet.review.terraform import x\nimport review.cli\n")
    assert set(review_imports(tmp_path)) == {"fleet.review.terraform", "fleet.review.terraform.x", "review.cli"}


def test_the_review_reads_node_pools_through_infra() -> None:
    assert "meridian_infra.report" in imported_modules(REPO / "platform/review/src/review")
    assert not (REPO / "platform/fleet/src/fleet/review").exists()


def launcher_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_checkout", REPO / LAUNCHER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launcher_knows_this_checkouts_commands() -> None:
    launcher = launcher_module()
    scripts = launcher.entry_points()
    assert scripts["meridian-synth"] == "meridian_infra.synth:main"  # infra's public entry point
    assert scripts["meridian"] == "fleet.cli:main"
    assert scripts["meridian-review"] == "review.cli:main"
    paths = launcher.code_paths()
    assert str(REPO / "infra") in paths
    assert str(REPO / "platform/fleet/src") in paths
    assert str(REPO / "platform/review/src") in paths


FAKE = {  # distribution folder -> its console script, where its packages lie, the entry point's file
    "platform/fleet": (
        'meridian = "fleet.cli:main"',
        '[tool.setuptools.packages.find]\nwhere = ["src"]',
        "src/fleet/cli.py",
    ),
    "infra": (
        'meridian-synth = "meridian_infra.synth:main"',
        '[tool.setuptools]\npackages = ["meridian_infra"]',
        "meridian_infra/synth.py",
    ),
}


def fake_checkout(root: Path, tag: str) -> Path:
    """A checkout whose `meridian` and `meridian-synth` say where their code lies, and exit 7."""
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / LAUNCHER, root / LAUNCHER)
    for folder, (script, packages, module) in FAKE.items():
        entry = root / folder / module
        entry.parent.mkdir(parents=True)
        (root / folder / "pyproject.toml").write_text(f"[project.scripts]\n{script}\n{packages}\n")
        (entry.parent / "__init__.py").write_text("")
        entry.write_text(f"import sys\n\ndef main():\n    print({tag!r}, __file__, sys.argv[1:])\n    return 7\n")
    return root


def test_the_launcher_runs_its_checkouts_code_before_the_installed_one(tmp_path: Path) -> None:
    # This environment has its own fleet and meridian_infra (installed editable from some checkout, or on
    # PYTHONPATH, which the child inherits): the launcher's checkout still wins over both.
    assert importlib.util.find_spec("fleet") is not None
    assert importlib.util.find_spec("meridian_infra") is not None
    root = fake_checkout(tmp_path / "base", "base")
    run = subprocess.run(
        [sys.executable, str(root / LAUNCHER), "meridian", "plan", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (run.returncode, run.stdout) == (7, f"base {root / 'platform/fleet/src/fleet/cli.py'} ['plan', '--json']\n")
    run = subprocess.run(
        [sys.executable, str(root / LAUNCHER), "meridian-synth", "--fleet", "f.yaml", "--outdir", "out"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 7, run.stderr
    assert run.stdout.startswith(f"base {root / 'infra/meridian_infra/synth.py'} ['--fleet', 'f.yaml'")
    run = subprocess.run([sys.executable, str(root / LAUNCHER), "nope"], capture_output=True, text=True, check=False)
    assert (run.returncode, run.stderr) == (
        2,
        "usage: run_checkout.py NAME [ARGS...]; NAME is one of this checkout's: meridian, meridian-synth\n",
    )


def test_every_top_level_module_has_exactly_one_owner() -> None:
    owners = launcher_module().module_owners()
    assert owners["safeyaml"] == ["platform/safeyaml"]
    assert owners["meridian_infra"] == ["infra"]
    assert {name: where for name, where in owners.items() if len(where) != 1} == {}
    assert not set(owners) & sys.stdlib_module_names


SHADOW = "import sys\nprint('shadow ran', file=sys.stderr)\n"  # issue 36's ran only under `cdktn deploy`


@pytest.mark.parametrize(
    ("where", "name", "said"),
    [
        ("platform/fleet/src/meridian_infra/__init__.py", "meridian_infra", "defined by platform/fleet and infra"),
        ("infra/fleet.py", "fleet", "defined by platform/fleet and infra"),
        ("platform/fleet/src/json/__init__.py", "json", "shadows the standard library"),
    ],
)
def test_the_launcher_refuses_a_module_defined_twice_before_importing_anything(
    tmp_path: Path, where: str, name: str, said: str
) -> None:
    root = fake_checkout(tmp_path / "head", "head")
    (root / where).parent.mkdir(parents=True, exist_ok=True)
    (root / where).write_text(SHADOW)
    for argv in (
        ["meridian", "plan"],
        ["--module", "fleet.cli:main", "meridian", "plan"],
        ["--check"],
    ):  # --check: make setup
        run = subprocess.run(
            [sys.executable, str(root / LAUNCHER), *argv], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert run.returncode == 2
        (line,) = run.stderr.splitlines()  # one line, and nothing of the checkout ran (no "shadow ran")
        assert line.startswith("error: "), line
        assert f"top-level module {name}" in line, line
        assert said in line, line


def test_another_checkout_runs_under_this_launchers_rules(tmp_path: Path) -> None:
    # The deciding workflow's plan job: the default branch's launcher over the pull request's tree (`--root`).
    trusted = fake_checkout(tmp_path / "trusted", "trusted")
    pr = fake_checkout(tmp_path / "pr", "pr")
    (pr / LAUNCHER).write_text("raise SystemExit(0)\n")  # the pull request's own launcher is never asked
    run = subprocess.run(
        [sys.executable, str(trusted / LAUNCHER), "--root", str(pr), "--module", "fleet.cli:main", "meridian", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (run.returncode, run.stdout) == (7, f"pr {pr / 'platform/fleet/src/fleet/cli.py'} ['x']\n")
    (pr / "platform/fleet/src/safeyaml").mkdir()
    (pr / "platform/fleet/src/safeyaml/__init__.py").write_text(SHADOW)
    (pr / "infra/safeyaml.py").write_text(SHADOW)
    run = subprocess.run(
        [sys.executable, str(trusted / LAUNCHER), "--root", str(pr), "meridian", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2
    assert "top-level module safeyaml" in run.stderr
    assert "shadow ran" not in run.stderr


def test_each_side_is_planned_by_its_own_producer_without_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], Path, dict[str, str]]] = []

    def run(args: list[str], cwd: Path, env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append((args, cwd, env))
        Path(args[-1]).write_text(
            '{"format": "meridian-plan-side/1", "plan": {}, "stacks": {}, '
            '"generate_check": {"returncode": 0, "stderr": ""}}'
        )
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)  # what snapshot.produce calls
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / PRODUCER).write_text("")
    (root / "fleet.yaml").write_text("")
    for inherited in ("/somewhere/else", None):
        if inherited is None:
            monkeypatch.delenv("PYTHONPATH", raising=False)
        else:
            monkeypatch.setenv("PYTHONPATH", inherited)
        calls.clear()
        take(root, "BASE main", tmp_path / "out")
        # By its file path, not by a console script any distribution of the checkout could redefine.
        assert [args for args, _, _ in calls] == [
            [sys.executable, str(root / PRODUCER), "--out", str(tmp_path / "out/side.json")]
        ]
        assert {cwd for _, cwd, _ in calls} == {root}
        # Passed on as the review got it: neither set nor rewritten.
        assert [env.get("PYTHONPATH") for _, _, env in calls] == [inherited]


def test_the_producer_calls_its_commands_by_module() -> None:
    # The producer names each function itself: a checkout's pyproject.toml files cannot swap what runs.
    text = (REPO / PRODUCER).read_text()
    assert 'FLEET_CLI, SYNTH = "fleet.cli:main", "meridian_infra.synth:main"' in text
    assert '"--module", target' in text


def test_a_command_two_distributions_declare_is_refused(tmp_path: Path) -> None:
    root = fake_checkout(tmp_path / "base", "base")
    # A new folder whose pyproject redefines a command: the later definition used to win.
    (root / "platform/zz-lint/src/zz").mkdir(parents=True)
    (root / "platform/zz-lint/pyproject.toml").write_text(
        '[project.scripts]\nmeridian = "zz.cli:main"\n[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    run = subprocess.run(
        [sys.executable, str(root / LAUNCHER), "meridian", "plan"], capture_output=True, text=True, check=False
    )
    assert (run.returncode, run.stdout, run.stderr) == (
        2,
        "",
        "error: platform/zz-lint/pyproject.toml: console script meridian is already declared by "
        "platform/fleet/pyproject.toml; rename one of them\n",
    )
    # Named by module, the function runs whatever the pyproject files say.
    run = subprocess.run(
        [sys.executable, str(root / LAUNCHER), "--module", "fleet.cli:main", "meridian", "plan"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (run.returncode, run.stdout) == (7, f"base {root / 'platform/fleet/src/fleet/cli.py'} ['plan']\n")


@pytest.mark.parametrize("old_launcher", [False, True])
def test_a_base_from_before_the_producer_gets_heads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_launcher: bool
) -> None:
    # BASE from before the producer, with no launcher or with a launcher that knows no `--module`: HEAD's
    # producer and launcher both go into its temporary worktree.
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    (repo / "fleet.yaml").write_text("name: old\n")
    if old_launcher:
        (repo / "scripts").mkdir()
        (repo / LAUNCHER).write_text("# an older launcher\n")
    git("add", "-A")
    git("commit", "-qm", "before the producer")
    base = git("rev-parse", "HEAD")
    (repo / "scripts").mkdir(exist_ok=True)
    shutil.copy2(REPO / LAUNCHER, repo / LAUNCHER)
    shutil.copy2(REPO / PRODUCER, repo / PRODUCER)
    seen: list[str] = []

    def fake_take(root: Path, side: str, *_: Any, **__: Any) -> Snapshot:
        seen.extend([(root / LAUNCHER).read_text(), (root / PRODUCER).read_text()])
        return Snapshot(None, notes=[f"{side} taken"])

    monkeypatch.setattr(review_module, "take", fake_take)
    sha, taken, inputs = review_module.base_snapshot(repo, base, tmp_path / "work", "kubectl")
    assert sha == base
    assert seen == [(REPO / LAUNCHER).read_text(), (REPO / PRODUCER).read_text()]
    assert taken.notes == [
        f"BASE {base} has no scripts/plan_side.py fit for the review: HEAD's ran BASE's own code",
        f"BASE {base} has no scripts/run_checkout.py fit for the review: HEAD's ran BASE's own code",
        f"BASE {base} taken",
    ]
    # What BASE's review reads: the helpers HEAD brought are machinery, reported first.
    assert "scripts/" in inputs
    assert review_module.changed_files(repo, base) == ["scripts/plan_side.py", "scripts/run_checkout.py"]
    assert not (tmp_path / "work/base").exists()  # the worktree, and the copy in it, are gone
