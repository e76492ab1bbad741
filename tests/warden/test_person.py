"""A person's commands for Warden (`warden hold / release / report / held`) against a fake API server.

Each test runs the CLI as an operator would (a kubeconfig, the node's name, a reason) and then asks
Warden's own pure functions what they make of the Node it left: held nodes are left alone, a released
one is checked before it returns, a report is a signal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract import names
from contract.warden import Config
from tests.warden.fakes import ApiState, FakeApiServer, node, serving
from tests.warden.test_kube import write_kubeconfig
from warden import person
from warden.actions import TAINT
from warden.cli import main
from warden.observe import signals
from warden.state import Budget, Facts, decide, read_record

ALL = Budget(may_quarantine=True, may_remediate=True)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[ApiState, str]]:
    state = ApiState()
    state.nodes = {n: state.bump(node(n)) for n in ("n-1", "n-2")}
    with serving(FakeApiServer, state) as url:
        yield state, str(write_kubeconfig(tmp_path, url))


def run(kubeconfig: str, *args: str) -> int:
    return main([*args, "--kubeconfig", kubeconfig])


def test_hold_takes_the_node_for_a_person_and_warden_leaves_it(
    api: tuple[ApiState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    state, kubeconfig = api
    assert run(kubeconfig, "hold", "n-1", "--reason", "NCCL timeouts in run r, INC-7") == 0
    assert "hold: n-1 by oncall@meridian.example.com" in capsys.readouterr().out
    n = state.nodes["n-1"]
    record, unreadable = read_record(n["metadata"]["annotations"])
    assert (record.phase, unreadable) == ("held", None)
    assert record.reason == "held by oncall@meridian.example.com: NCCL timeouts in run r, INC-7"
    assert n["metadata"]["labels"][names.WARDEN_PHASE_LABEL] == "held"
    assert n["spec"]["unschedulable"] is True
    assert TAINT in n["spec"]["taints"]
    [entry] = person.audit_trail(n)
    assert (entry.who, entry.verb, entry.why) == (
        "oncall@meridian.example.com",
        "hold",
        "NCCL timeouts in run r, INC-7",
    )
    # The patch carried the resourceVersion it was computed from (a Warden round in between is a 409).
    patch = next(r for r in state.requests if r.method == "PATCH")
    assert patch.body["metadata"]["resourceVersion"] == "101"
    # Warden, given a fault on it, does nothing to a held node.
    decision = decide(record, list(signals(n, 2e9, Config())), Facts(), 2e9, Config(), ALL)
    assert decision.commands == ()
    assert decision.record == record


def test_release_sends_the_node_through_wardens_check_first(api: tuple[ApiState, str]) -> None:
    state, kubeconfig = api
    assert run(kubeconfig, "hold", "n-1", "--reason", "reseated GPU 3") == 0
    assert run(kubeconfig, "release", "n-1", "--reason", "GPU 3 replaced, INC-7") == 0
    n = state.nodes["n-1"]
    record = read_record(n["metadata"]["annotations"])[0]
    assert (record.phase, record.burn_in) == ("probation", True)
    assert n["spec"]["unschedulable"] is True  # still out of service until the check passes
    # Warden starts its deep check, and returns the node when it passes.
    started = decide(record, [], Facts(check_missing=True), 2e9, Config(), ALL)
    assert [c.verb for c in started.commands] == ["preflight"]
    passed = decide(record, [], Facts(preflight="pass"), 2e9, Config(), ALL)
    assert passed.record.phase == "healthy"
    assert passed.commands[0].verb == "uncordon"
    assert [e.verb for e in person.audit_trail(n)] == ["hold", "release"]


def test_release_skip_check_returns_it_and_keeps_a_persons_earlier_cordon(api: tuple[ApiState, str]) -> None:
    state, kubeconfig = api
    state.nodes["n-2"]["spec"]["unschedulable"] = True  # cordoned by a person before anyone held it
    for n in ("n-1", "n-2"):
        assert run(kubeconfig, "hold", n, "--reason", "checked by hand") == 0
        assert run(kubeconfig, "release", n, "--reason", "fine after all", "--skip-check") == 0
    one, two = state.nodes["n-1"], state.nodes["n-2"]
    assert read_record(one["metadata"]["annotations"])[0].phase == "healthy"
    assert one["spec"]["unschedulable"] is False
    assert TAINT not in one["spec"]["taints"]
    assert two["spec"]["unschedulable"] is True
    assert TAINT not in two["spec"]["taints"]


def test_release_refuses_a_node_warden_is_acting_on(
    api: tuple[ApiState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    state, kubeconfig = api
    assert run(kubeconfig, "release", "n-1", "--reason", "looks fine") == 2
    err = capsys.readouterr().err.strip()
    assert err == "warden: n-1: is healthy, not held: Warden is acting on it; hold it first to take it over"
    assert [r for r in state.mutations() if r.method == "PATCH"] == []


def test_report_is_a_signal_warden_reads(api: tuple[ApiState, str]) -> None:
    state, kubeconfig = api
    assert run(kubeconfig, "report", "n-2", "--reason", "run r's NCCL hangs always include this node") == 0
    found = signals(state.nodes["n-2"], 2e9, Config())
    assert [(s.kind, s.detail) for s in found] == [("preflight", person.REPORT_CHECK)]
    assert read_record(state.nodes["n-2"]["metadata"]["annotations"])[0].phase == "healthy"  # Warden decides


def test_held_lists_each_held_node_with_why(api: tuple[ApiState, str], capsys: pytest.CaptureFixture[str]) -> None:
    state, kubeconfig = api
    assert run(kubeconfig, "held") == 0
    assert capsys.readouterr().out.strip() == "no node is held"
    assert run(kubeconfig, "hold", "n-2", "--reason", "SXid storm") == 0
    state.nodes["n-1"]["metadata"]["annotations"][names.WARDEN_RECORD_ANNOTATION] = "{not json"
    capsys.readouterr()
    assert run(kubeconfig, "held") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "POOL", "HELD", "FOR", "WHY", "LAST", "PERSON"]
    assert lines[1].startswith("n-1")
    assert "unreadable meridian.dev/warden annotation" in lines[1]
    assert "held by oncall@meridian.example.com: SXid storm" in lines[2]
    assert lines[2].endswith("hold by oncall@meridian.example.com 0h0m ago")


def test_dry_run_prints_the_patch_and_writes_nothing(
    api: tuple[ApiState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    state, kubeconfig = api
    assert run(kubeconfig, "hold", "n-1", "--reason", "to see", "--dry-run") == 0
    patch = json.loads(capsys.readouterr().out)
    assert patch["metadata"]["labels"] == {names.WARDEN_PHASE_LABEL: "held"}
    assert [r for r in state.requests if r.method == "PATCH"] == []


def test_the_audit_trail_is_bounded() -> None:
    n = node("n-1")
    for i in range(person.MAX_AUDIT + 5):
        patch = person.report(n, "a@b", f"{i} " + "x" * 1000, float(i))
        n["metadata"]["annotations"] = patch["metadata"]["annotations"]
    trail = person.audit_trail(n)
    assert len(trail) == person.MAX_AUDIT
    assert trail[0].at == 5.0
    assert all(len(e.why) == person.MAX_WHY for e in trail)
    n["metadata"]["annotations"][names.WARDEN_AUDIT_ANNOTATION] = '[{"who": 1}]'  # not ours: started afresh
    assert person.audit_trail(n) == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["hold", "n-9", "--reason", "why not"], "warden: n-9: no such Node; `kubectl get nodes` lists them"),
        (["hold", "n-1", "--reason", " "], "warden: --reason: say why, for the audit trail"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    api: tuple[ApiState, str], capsys: pytest.CaptureFixture[str], args: list[str], line: str
) -> None:
    _, kubeconfig = api
    assert run(kubeconfig, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith(line)
    assert err.count("\n") == 1
