"""The rules names follow, written once (contract/names.py), and no second copy of them in shipped code.

Issue 40: the DNS label rule was written in gkr, fleet's model, fleet's rules, fleet's KubeRay check, the twin and
the registry, and the copies differed: fleet's KubeRay check anchored it with `$` and `match`, which lets a
trailing newline through; fleet's model refused dotted bucket names that the registry accepted, in words of its
own. Every string constant of the shipped code but docstrings is read for a character class that only a name
rule has (lowercase letters, digits and '-', perhaps '_' and '.'): outside names.py, each is listed below with why
it is not a name rule, or it is a second copy.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract import names
from tests.conftest import REPO

RULES = Path("platform/contract/src/contract/names.py")
# (file, pattern): why it is not one of the name rules.
NOT_NAME_RULES = {
    ("platform/fleet/src/fleet/gitops/remote.py", r"^(git::)?[a-z][a-z0-9-]*@"): "finds an SCP-style git remote's user",
    (
        "platform/fleet/src/fleet/model.py",
        r"[a-z0-9][-a-z0-9.]*(:\d+)?(/[a-z0-9][-_.a-z0-9]*)+:v?\d+(\.\d+){1,2}([-.+][-_.a-zA-Z0-9]+)?(@sha256:[0-9a-f]{64})?",
    ): "a pinned image reference (registry host, path, version), not a name",
}
_CLASS = re.compile(r"\[((?:\\.|[^\]\\])+)\]")


# --- The rules --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dns1035", "dns1123"),
    [
        ("a", True, True),
        ("my-job-2", True, True),
        ("2-jobs", False, True),  # a DNS-1123 label may start with a digit
        ("job-", False, False),
        ("-job", False, False),
        ("Job", False, False),
        ("a.b", False, False),
        ("job\n", False, False),  # `^...$` with match() took this
        ("", False, False),
        ("a" * 63, True, True),
        ("a" * 64, False, False),
    ],
)
def test_dns_labels(name: str, dns1035: bool, dns1123: bool) -> None:
    assert names.is_dns1035_label(name) is dns1035
    assert names.is_dns1123_label(name) is dns1123


def test_a_label_takes_a_tighter_limit() -> None:
    assert names.is_dns1035_label("a" * names.RAYJOB_NAME_MAX, names.RAYJOB_NAME_MAX)
    assert not names.is_dns1035_label("a" * (names.RAYJOB_NAME_MAX + 1), names.RAYJOB_NAME_MAX)
    assert (names.RAYCLUSTER_NAME_MAX, names.RAYJOB_NAME_MAX, names.GKE_NAME_MAX) == (53, 47, 40)


# rule: (names it accepts, names it refuses). Node names are DNS-1123 subdomains.
CASES: dict[Callable[[str], bool], tuple[list[str], list[str]]] = {
    names.is_dns1123_subdomain: (
        ["gke-meridian-h200-a-1b2c", "node-1.us-central1-a.c.project.internal", ".".join(["a" * 63] * 3 + ["d" * 61])],
        ["a..b", ".a", "a_b", "A", ".".join(["a" * 63] * 3 + ["d" * 62])],  # the last: 254 characters
    ),
    names.is_label_value: (["", "sb-1", "Sub_block.1"], ["-a", "a-", "a/b", "a" * 64]),
    # 6-30 characters, a letter first, not '-' last
    names.is_project_id: (["meridian-prod"], ["abcde", "a" * 31, "1abcdef", "abcdef-"]),
    # 3-63 characters of a-z 0-9 - _ ., a letter or digit at both ends, no "goog" prefix, no "google", not an
    # IPv4 address in dotted-decimal form, no ".."
    names.is_bucket_name: (
        ["meridian-ckpt-us-central1", "a_b.c-1"],
        ["ab", "a" * 64, "-abc", "abc_", "Abc", "goog-data", "my-google", "192.168.5.4", "a..b", "gs://abc"],
    ),
}


@pytest.mark.parametrize(
    ("rule", "value", "ok"),
    [
        (rule, v, ok)
        for rule, sides in CASES.items()
        for ok, values in zip((True, False), sides, strict=True)
        for v in values
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_each_rule(rule: Callable[[str], bool], value: str, ok: bool) -> None:
    assert rule(value) is ok


def test_the_buckets_the_fleet_creates_have_no_dots() -> None:
    assert names.is_bucket_name("a.b.c")
    assert not names.is_bucket_name("a.b.c", dots=False)
    assert names.bucket_problem("a.b.c", dots=False) == (
        "3-63 lowercase letters, digits, '-' or '_', starting and ending with a letter or digit"
    )
    assert (
        names.bucket_problem("goog-x")
        == "Cloud Storage refuses bucket names that start with 'goog' or contain 'google'"
    )


# --- No second copy ---------------------------------------------------------------------------------------------


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted([*REPO.glob("platform/*/src/**/*.py"), *REPO.glob("infra/**/*.py"), *REPO.glob("scripts/*.py")]):
        if not {".venv", "node_modules", "cdktf.out"} & set(path.parts):
            yield path.relative_to(REPO), ast.parse(path.read_text(), str(path))


def _docstrings(tree: ast.AST) -> set[int]:
    bodies = (n.body for n in ast.walk(tree) if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef) and n.body)
    return {id(b[0].value) for b in bodies if isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant)}


def _members(body: str) -> set[str]:
    """A character class's members: ranges ("a-z") and single characters, escapes resolved."""
    found, i = set(), 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            i += 1
        if i + 2 < len(body) and body[i + 1] == "-":
            found.add(body[i : i + 3])
            i += 3
        else:
            found.add(body[i])
            i += 1
    return found


def _is_name_rule(pattern: str) -> bool:
    """Has a class of lowercase letters, digits and '-' (and perhaps '_', '.'): a DNS label's or a bucket's."""
    classes = (_members(m[1]) for m in _CLASS.finditer(pattern))
    return any({"a-z", "0-9", "-"} <= c <= {"a-z", "0-9", "-", "_", "."} for c in classes)


def _rules_in(tree: ast.AST) -> list[str]:
    prose = _docstrings(tree)
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose and _is_name_rule(n.value)
    ]


def test_each_name_rule_is_written_once() -> None:
    found = {(str(path), rule) for path, tree in _sources() if path != RULES for rule in _rules_in(tree)}
    assert found - NOT_NAME_RULES.keys() == set(), "use contract.names (is_dns1035_label, is_bucket_name...)"
    assert NOT_NAME_RULES.keys() <= found, "an exception no longer in the code: drop it from NOT_NAME_RULES"


def test_the_check_sees_each_spelling_of_a_copy() -> None:
    """The check above passes on an empty tree: show it catches the spellings the copies had."""
    copies = [
        r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
        r"[a-z][a-z0-9-]{0,62}",
        r"gs://[a-z0-9][-_.a-z0-9]{1,61}[a-z0-9]/",
        r"[a-z0-9][a-z0-9_.\-]{0,62}",
    ]
    source = "\n".join(f"X{i} = re.compile({c!r})" for i, c in enumerate(copies))
    assert _rules_in(ast.parse(f'"""[a-z0-9-] in prose is fine."""\n{source}\n')) == copies
    others = [r"[A-Za-z0-9.\-]{1,253}", r"[0-9a-f]{64}", r"https?://[A-Za-z0-9.\-]+", r"[a-z][a-z_ ]{0,31}"]
    assert [p for p in others if _is_name_rule(p)] == []
    assert len(_rules_in(ast.parse((REPO / RULES).read_text()))) >= 5  # the rules themselves
