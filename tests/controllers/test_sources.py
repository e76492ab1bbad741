"""Every rule names its upstream sources as file and line, at the version it was read at (fleet.controllers.sources).

The rules a Finding can name are read from the code (the second argument of every `Finding(...)` in
fleet.controllers), so a new rule without a citation fails here; and every citation's version is READ_AT's,
so a bump of READ_AT fails until the lines are read again at the new tag.
"""

from __future__ import annotations

import ast
import re

import pytest

from fleet.controllers import sources, versions
from fleet.controllers.sources import Source
from tests.conftest import REPO

CONTROLLERS = REPO / "platform/fleet/src/fleet/controllers"
ALL = [*sources.RULES.values(), *sources.BEHAVIOURS.values()]
PATH = re.compile(r"[\w.-]+(/[\w.-]+)*\.(go|cc|h|md|py)")


def finding_rules() -> set[str]:
    """The rule names the code gives its Findings (a non-literal one fails: a rule must be greppable)."""
    found = set()
    for path in sorted(CONTROLLERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
                rule = node.args[1]
                assert isinstance(rule, ast.Constant), f"{path.name}:{node.lineno}: a rule name must be a literal"
                found.add(str(rule.value))
    return found


def test_every_rule_a_finding_names_cites_its_sources() -> None:
    assert len(finding_rules()) >= 15
    assert finding_rules() == set(sources.RULES)  # none uncited, none cited that no finding names


@pytest.mark.parametrize("source", [s for group in ALL for s in group], ids=str)
def test_each_citation_is_a_file_and_line_at_the_version_read(source: Source) -> None:
    assert PATH.fullmatch(source.path), source.path
    assert source.line >= 1
    assert source.version == versions.READ_AT[source.release]
    assert source.what
    if source.test:
        assert re.fullmatch(r'[\w./-]+:\d+( ".+")?|[\w./-]+ ".+"', source.test), source.test
    assert re.match(rf"{re.escape(source.path)}:{source.line} ", str(source))


def test_a_file_read_off_its_tag_names_the_commit() -> None:
    off_tag = [s for group in ALL for s in group if s.commit]
    assert all(re.fullmatch(r"[0-9a-f]{40}", s.commit) for s in off_tag)
    assert [str(s) for s in off_tag] == [
        "src/ray/gcs/gcs_health_check_manager.cc:126 StartHealthCheck: each check waits timeout_ms, the next"
        " period_ms after a failure (ray commit 2a48f197d35680bf86d63d43e27ad38403f3f228, the tag not being stored)"
    ]
