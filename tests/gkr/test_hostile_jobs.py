"""Hostile job files and flags: user strings reach the cluster exactly as written, and what cannot
work ends in one line, exit 2, never a traceback (issue 15, item 8)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.problem import Invalid
from gkr.commands.common import print_objects, print_per_cluster
from gkr.flags import as_flags, from_flags
from gkr.render import render
from gkr.resolve import resolve
from gkr.spec import parse_job
from gkr.submit import MAX_OBJECT_BYTES, prepare
from tests.gkr.conftest import shipped

SHIPPED = shipped()
FLEET = SHIPPED.registry
BASE = {"name": "exp-1", "team": "research", "region": "us-east4", "pods": 2, "gpus_per_pod": 8}
IMAGE = "us-docker.pkg.dev/meridian-train-prod/meridian/trainer:1.2.3"

# Strings a YAML template would misread if written bare, and characters YAML itself changes.
HOSTILE_STRINGS = [
    "a: b",
    "# not a comment",
    "line1\nline2\n",
    "{{ name }}{% raw %}",
    "!!python/object/apply:os.system ['id']",
    "*alias",
    "&anchor value",
    "- item",
    "'single' \"double\" back\\slash",
    "tab\there\r\n",
    "emoji \U0001f600 and \u00e9",
    "NEL\x85 LS\u2028 PS\u2029",
    "DEL\x7f C1\x9b BOM\ufeff",
    "  leading and trailing  ",
    "",
    "null",
    "true",
    "0x1F",
    "1e3",
    "~",
    "<script>&amp;",
    "%TAG ! tag:x",
    "--- \n...\n",
    "|\n  block",
    "[1, 2]",
    "{a: 1}",
    "@at `tick`",
]


def _containers(obj: Any) -> Iterator[dict[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _containers(item)


@pytest.mark.parametrize("value", HOSTILE_STRINGS, ids=[repr(s)[:30] for s in HOSTILE_STRINGS])
@pytest.mark.parametrize("kind", ["rayjob", "job"])
def test_user_strings_round_trip(value: str, kind: str) -> None:
    flags = {**as_flags({"kind": kind, "command": ["echo", value]}), **from_flags({"--env": [f"HOSTILE={value}"]})}
    spec, invalid = parse_job({**BASE, "kind": kind, **{k: v for k, (_, v) in flags.items()}})
    assert spec is not None, invalid
    resolved, problems = resolve(spec, FLEET)
    assert resolved is not None
    assert not problems, problems
    objects = render(resolved)
    mains = [c for o in objects for c in _containers(o) if c["name"] != "preflight"]
    assert mains
    for container in mains:
        assert {"name": "HOSTILE", "value": value} in container["env"]
    wanted = shlex.join(["echo", value])
    if kind == "job":
        (job_obj,) = [o for o in objects if o["kind"] == "Job"]
        command = job_obj["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[-1].endswith(f"exec {wanted}")
    else:
        assert objects[0]["spec"]["entrypoint"].endswith(wanted)


@pytest.mark.parametrize("value", HOSTILE_STRINGS, ids=[repr(s)[:30] for s in HOSTILE_STRINGS])
def test_what_a_dry_run_prints_reads_back_as_rendered(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The YAML printed (libyaml's emitter where present) is the objects, hostile strings and all."""
    flags = {**as_flags({"kind": "job", "command": ["echo", value]}), **from_flags({"--env": [f"HOSTILE={value}"]})}
    spec, invalid = parse_job({**BASE, **{k: v for k, (_, v) in flags.items()}})
    assert spec is not None, invalid
    resolved, problems = resolve(spec, FLEET)
    assert resolved is not None
    assert not problems, problems
    objects = render(replace(resolved, image=value))
    print_objects(objects, "yaml")
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == objects
    print_per_cluster([("gke_p_r_c", o) for o in objects], "yaml")  # a run across regions: each headed by its context
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == objects


@pytest.mark.parametrize("value", HOSTILE_STRINGS, ids=[repr(s)[:30] for s in HOSTILE_STRINGS])
def test_images_round_trip(value: str) -> None:
    """Even an image that resolve would refuse is written as one quoted string: the template never trusts it."""
    spec, _ = parse_job({**BASE, "command": "true"})
    assert spec is not None
    resolved, problems = resolve(spec, FLEET)
    assert resolved is not None
    assert not problems
    objects = render(replace(resolved, image=value))
    images = {c["image"] for o in objects for c in _containers(o)}
    assert images == {value}


def test_object_size_is_measured_against_etcd() -> None:
    assert MAX_OBJECT_BYTES == 1536 * 1024  # etcd's --max-request-bytes default, 1.5 MiB


# (id, job file changes, flags, words the one line must contain)
CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("image with a newline", {}, ["--image", IMAGE + "\nkind: Secret"], "flag --image: "),
    ("image as a YAML tag", {}, ["--image", "!!python/object/apply:os.system ['id']"], "is not in the fleet registry"),
    ("image as an alias", {}, ["--image", "*alias"], "is not in the fleet registry"),
    ("image with a comment", {"image": IMAGE + " # pinned"}, [], "is not a valid image reference"),
    ("NUL in an env value", {}, ["--env", "A=x\x00y"], "flag --env: contains a NUL character"),
    ("invalid Unicode in a flag", {}, ["--env", "A=\udcff"], "flag --env: is not valid Unicode text"),
    ("line separator in an env name", {}, ["--env", "A\u2028B=1"], "is not a valid environment variable name"),
    ("newline in the name", {}, ["--name", "exp\nkind: Secret"], "flag --name: 'exp\\nkind: Secret' is not a valid"),
    (
        "thousands of env vars",
        {},
        [a for n in range(4000) for a in ("--env", f"V{n}={'x' * 300}")],
        "env: the rendered RayJob is 2,",
    ),
    ("one huge command argument", {}, ["--", "python", "-c", "x" * 200_000], "Linux passes at most 131,072"),
    (
        "a huge command",
        {},
        ["--", "python", *(["x" * 100] * 20_000)],
        "the command after --: the rendered RayJob is",
    ),
    ("an env value over the exec limit", {}, ["--env", "BIG=" + "x" * 140_000], "flag --env: BIG=... is 140,004 bytes"),
    (
        "CPUs beyond any number",
        {},
        ["--cpus-per-pod", str(10**30)],
        f"flag --cpus-per-pod: {10**30} CPUs per pod do not fit",
    ),
    ("topology with a newline", {}, ["--topology", "required:\nblock"], "flag --topology: '\\nblock' is not one of"),
    (
        "binary env value",
        {"env": {"A": b"hi"}},
        [],
        "env.A: b'hi' is not a string; set env.A in the job file or with --env",
    ),
    ("pods as a string", {"pods": "2"}, [], "pods: '2' is not an integer; set pods in the job file or with --pods"),
    (
        "command of numbers",
        {"command": [1, 2]},
        [],
        "command: [1, 2] is not a string or a list or null; set command in the job file or after --",
    ),
    ("env as a list", {"env": ["A=1"]}, [], "env: ['A=1'] is not an object; set env in the job file or with --env"),
    ("deep nesting", {"ray": {"x": "DEEP"}}, [], "refused: nested more than 64 levels deep"),
    ("aliases", {"env": "LAUGHS"}, [], "refused: the document expands to more than 200,000 values"),
]


def _job_text(changes: dict[str, Any]) -> str:
    job = {**BASE, "command": "python train.py", **changes}
    text = yaml.safe_dump(job, sort_keys=False, allow_unicode=False)
    if "DEEP" in text:
        text = text.replace("DEEP", "[" * 100 + "]" * 100)
    if "LAUGHS" in text:
        from tests.faults.hostile import LAUGHS

        text = text.replace("env: LAUGHS\n", "") + "laughs:\n" + "".join(f"  {line}\n" for line in LAUGHS.splitlines())
    return text


def _assert_one_line(result: Result, words: str, tmp_path: Path) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.stdout[-500:] + result.stderr[-2000:]
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[:2000]
    assert lines[0].startswith("error: ")
    assert words in lines[0].replace(str(tmp_path) + "/", ""), lines[0][:500]


@pytest.mark.parametrize(("changes", "flags", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_job_gives_one_line(
    gkr: Callable[..., Result], tmp_path: Path, changes: dict[str, Any], flags: list[str], words: str
) -> None:
    file = tmp_path / "job.yaml"
    file.write_text(_job_text(changes))
    command = [a for a in flags if flags.index("--") <= flags.index(a)] if "--" in flags else []
    options = flags[: flags.index("--")] if "--" in flags else flags
    if command:  # the command comes after --, so the file's command must go
        file.write_text(_job_text({**changes, "command": None}).replace("command: null\n", ""))
    result = gkr("submit", "-f", str(file), *options, *command)  # no --dry-run: would apply if it got that far
    _assert_one_line(result, words, tmp_path)


TEXT = st.text(
    alphabet=st.sampled_from(
        [
            "a",
            "-",
            "1",
            ":",
            " ",
            "#",
            "\n",
            "{",
            "}",
            "!",
            "*",
            "&",
            "'",
            '"',
            "\\",
            "\x85",
            "\u2028",
            "\x00",
            "\ud800",
            "\U0001f600",
            "=",
        ]
    ),
    max_size=12,
)
FLAG_NAMES = [
    "--name",
    "--image",
    "--priority",
    "--pool",
    "--region",
    "--team",
    "--topology",
    "--kind",
    "--env",
    "--dataset",
]


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(st.lists(st.tuples(st.sampled_from(FLAG_NAMES), TEXT), max_size=4), st.lists(TEXT, max_size=3))
def test_fuzzed_flags_never_crash(gkr: Callable[..., Result], flags: list[tuple[str, str]], command: list[str]) -> None:
    args = [a for pair in flags for a in pair]
    result = gkr("submit", "--team", "research", "--dry-run", *args, "--", "python", *command)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    if result.exit_code == 0:
        documents = list(yaml.safe_load_all(result.stdout))
        assert documents
        return
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines()
    assert all(line.startswith("error: ") for line in result.stderr.splitlines()), result.stderr


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.sampled_from(["A", "B", "PATH_X", "Z"]), TEXT, max_size=3))
def test_fuzzed_env_values_round_trip_or_are_refused(env: dict[str, str]) -> None:
    flags = {**as_flags({"command": ["true"]}), **from_flags({"--env": [f"{k}={v}" for k, v in env.items()]})}
    try:
        _, objects = prepare(None, {**flags, **{k: (k, v) for k, v in BASE.items()}}, SHIPPED, None)
    except Invalid as exc:
        (line,) = exc.lines
        assert "\n" not in line
        assert "NUL" in line or "Unicode" in line
        return
    main = next(c for o in objects for c in _containers(o) if c["name"] == "ray-worker")
    assert {e["name"]: e["value"] for e in main["env"] if e["name"] in env} == env
