"""The tiers stay honest without timing: a test that starts a live run or a scenario carries its marker
(tests/tiers.py reads what each test starts from the source), and a deliberately unmarked one is caught."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO
from tests.tiers import Suite, missing_live_groups, modules_of


def test_every_test_that_starts_a_run_carries_its_tier() -> None:
    suite = Suite(REPO)
    problems = [str(p) for module in modules_of(REPO) for p in suite.unmarked(module)]
    assert problems == []


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_an_unmarked_live_or_scenario_test_is_caught_through_helpers_fixtures_and_imports(tmp_path: Path) -> None:
    _write(tmp_path, "tests/trainer/conftest.py", "def run(): ...\n")
    _write(
        tmp_path,
        "tests/trainer/test_runs.py",
        "import pytest\nfrom tests.trainer.conftest import run\n\n"
        "def twice():\n    return run() + run()\n\n"
        "@pytest.fixture\ndef finished():\n    return twice()\n\n"
        "def test_calls_a_helper_that_runs():\n    twice()\n\n"
        "def test_takes_a_fixture_that_runs(finished):\n    assert finished\n\n"
        "@pytest.mark.live\ndef test_marked_alone():\n    run()\n\n"
        "def test_pure():\n    assert 1 + 1 == 2\n",
    )
    _write(
        tmp_path,
        "tests/review/test_other.py",
        "import subprocess\nimport ray\nfrom tests.trainer.test_runs import twice\n\n"
        "def test_imports_a_helper_that_runs():\n    twice()\n\n"
        "def test_starts_ray():\n    ray.init(address='local')\n\n"
        "def test_runs_make(sandbox):\n    subprocess.run(['make', 'plan'])\n",
    )
    _write(
        tmp_path,
        "tests/review/test_marked.py",
        "import pytest\npytestmark = pytest.mark.scenario\n\ndef test_in_the_sandbox(sandbox):\n    ...\n",
    )
    suite = Suite(tmp_path)
    found = {(p.test, p.tier) for module in modules_of(tmp_path) for p in suite.unmarked(module)}
    assert found == {
        ("test_calls_a_helper_that_runs", "live"),
        ("test_marked_alone", "live"),  # beside unit tests: its module is not live
        ("test_takes_a_fixture_that_runs", "live"),
        ("test_imports_a_helper_that_runs", "live"),
        ("test_starts_ray", "live"),
        ("test_runs_make", "scenario"),
    }
    assert str(next(iter(suite.unmarked("tests.review.test_other")))).startswith(
        "tests/review/test_other.py::test_imports_a_helper_that_runs starts a live run: move it to a module marked"
    )


def test_live_runs_that_would_collide_share_a_worker() -> None:
    """make live runs two modules at once: a local Ray, or fixed TLS ports, in a module outside its group would
    meet another such run."""
    marked = re.compile(r"^pytestmark = pytest\.mark\.live", re.M)
    live = [p for p in sorted((REPO / "tests").rglob("test_*.py")) if marked.search(p.read_text())]
    assert len(live) > 20
    missing = {str(p.relative_to(REPO)): missing_live_groups(str(p.relative_to(REPO)), p.read_text()) for p in live}
    assert {m: g for m, g in missing.items() if g} == {}
    new = "pytestmark = pytest.mark.live\n\ndef test_x():\n    ray.init(address=names.ray_address(os.environ))\n"
    assert missing_live_groups("tests/trainer/test_new_ray.py", new) == ["ray"]
    assert missing_live_groups("tests/trainer/test_ray.py", new) == []
    tls = 'start(tmp_path, "r", f"ft.lighthouse_tls={member}")'
    assert missing_live_groups("tests/rl/test_new.py", tls) == ["fixed-ports"]
