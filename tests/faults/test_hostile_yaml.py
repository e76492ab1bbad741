"""Every program that reads YAML (and Warden, its JSON config) refuses hostile documents in one line, exit 2,
in bounded memory and time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import safeyaml
from fleet.yamlsource import parse
from tests.conftest import SHIPPED
from tests.faults.hostile import HOSTILE, HOSTILE_CONFIGS, run_bounded
from tests.gkr.conftest import registry_folder

BIN = Path(sys.executable).parent
IDS = list(HOSTILE)


@pytest.mark.parametrize("case", IDS)
def test_the_loader_refuses_in_one_line(case: str) -> None:
    text, words = HOSTILE[case]
    with pytest.raises(safeyaml.YamlError) as info:
        safeyaml.load(text)
    assert words in info.value.message
    assert "\n" not in info.value.message
    assert info.value.line >= 1


def _one_line(stderr: str, prefix: str, words: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(prefix), lines[0]
    assert words in lines[0]


def _refused(command: list[str], prefix: str, words: str) -> str:
    """Runs `command` (bounded): exit 2 and one line on stderr, starting with `prefix` and naming `words`; its stdout."""
    result = run_bounded(command)
    assert result.returncode == 2, result.stderr[-2000:]
    _one_line(result.stderr, prefix, words)
    return result.stdout


def _gkr(environment: dict[str, str], *args: str) -> list[str]:
    """gkr's command line in a fresh interpreter that sets `environment` first (its folders in the test's tmp)."""
    return [
        sys.executable,
        "-c",
        f"import os; os.environ.update({environment!r}); from gkr.cli import main; main()",
        *args,
    ]


@pytest.mark.parametrize("case", IDS)
def test_meridian_plan_refuses_hostile_specs(tmp_path: Path, case: str) -> None:
    text, words = HOSTILE[case]
    file = tmp_path / "fleet.yaml"
    file.write_text(text, encoding="utf-8")
    assert _refused([str(BIN / "meridian"), "plan", "--fleet", str(file)], f"error: {file}:", words) == ""


@pytest.mark.parametrize("case", IDS)
def test_gkr_refuses_hostile_job_files(tmp_path: Path, case: str) -> None:
    text, words = HOSTILE[case]
    file = tmp_path / "job.yaml"
    file.write_text(text, encoding="utf-8")
    home = str(tmp_path / "home")
    environment = {"XDG_CONFIG_HOME": home, "XDG_CACHE_HOME": home}
    command = _gkr(environment, "submit", "--registry", str(registry_folder()), "-f", str(file), "--dry-run")
    assert _refused(command, f"error: {file}:", words) == ""


@pytest.mark.parametrize("case", IDS)
def test_gkr_refuses_a_hostile_user_config(tmp_path: Path, case: str) -> None:
    text, words = HOSTILE[case]
    config = tmp_path / "home" / "gkr" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(text, encoding="utf-8")
    command = _gkr({"XDG_CONFIG_HOME": str(config.parent.parent)}, "list", "--team", "research")
    _refused(command, f"error: {config}:", words)


@pytest.mark.parametrize("case", list(HOSTILE_CONFIGS))
def test_warden_refuses_hostile_configs(tmp_path: Path, case: str) -> None:
    content, words = HOSTILE_CONFIGS[case]
    file = tmp_path / "config.json"
    file.write_bytes(content)
    _refused([sys.executable, "-m", "warden", "serve", "--config", str(file), "--once"], f"warden: {file}:", words)


def test_line_numbers_survive_and_point_at_the_problem() -> None:
    with pytest.raises(safeyaml.YamlError) as info:
        safeyaml.load("ok: 1\nalso: [1, 2]\nbad: " + "[" * 70 + "]" * 70 + "\n")
    assert info.value.line == 3
    source, problems = parse("a:\n  b: &x [1, 2]\n  c: *x\n")
    assert problems == []
    assert source.data == {"a": {"b": [1, 2], "c": [1, 2]}}
    assert source.line_of(("a", "c", 1)) == 2  # an alias's items were written at the anchor


def test_what_we_write_still_loads() -> None:
    """Anchors, merge keys, timestamps and the shipped fleet: the loader equals yaml.safe_load on them."""
    import yaml

    text = "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  z: 3\nwhen: 2026-12-01T00:00:00Z\nn: 1_000\nf: 1.5e3\n"
    assert safeyaml.load(text) == yaml.safe_load(text)
    shipped = SHIPPED.read_text()
    assert safeyaml.load(shipped) == yaml.safe_load(shipped)
    deep = "a: " + "[" * 63 + "]" * 63  # 64 levels with the top mapping
    assert safeyaml.load(deep) == yaml.safe_load(deep)


def test_limits_can_be_tightened() -> None:
    with pytest.raises(safeyaml.YamlError, match="larger than 10 bytes"):
        safeyaml.load("a: 1234567890\n", safeyaml.Limits(max_bytes=10))


def test_read_text_stops_at_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (safeyaml.DEFAULT.max_bytes + 10))
    with pytest.raises(safeyaml.YamlError, match="larger than"):
        safeyaml.read_text(big)
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(safeyaml.YamlError, match="not UTF-8") as info:
        safeyaml.read_text(bad)
    assert info.value.line == 2
