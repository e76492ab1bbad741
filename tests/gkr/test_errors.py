"""What a researcher sees when something is missing: one line that says how to fix it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import Result

from gkr import kube
from tests.gkr.conftest import EXAMPLES
from tests.gkr.jsonhandler import JsonHandler
from tests.gkr.test_kube import EAST4, use_kubeconfig
from tests.ports import free_port

GET_CREDENTIALS = (
    "gcloud container clusters get-credentials meridian-us-east4 --region us-east4 "
    "--project meridian-train-prod --dns-endpoint"
)
RAYCLUSTER = str(EXAMPLES / "persistent-raycluster.yaml")  # us-east4


def test_no_kubeconfig_says_how_to_get_credentials(
    gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    result = gkr("submit", "-f", RAYCLUSTER)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == f"error: no kubeconfig at {tmp_path / 'absent'}; run: {GET_CREDENTIALS}"


def test_no_context_for_the_cluster_says_how_to_get_credentials(
    gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_kubeconfig(tmp_path, monkeypatch, "some-other-cluster", "http://127.0.0.1:9")
    for args in (("submit", "-f", RAYCLUSTER), ("list", "--team", "research", "--region", "us-east4")):
        result = gkr(*args)
        assert result.exit_code == 2, result.stderr
        last = result.stderr.splitlines()[-1]  # after submit's summary
        assert last == f"error: no context {EAST4} in {tmp_path / 'kubeconfig'}; run: {GET_CREDENTIALS}"


def test_a_job_file_without_dash_f_is_explained(gkr: Callable[..., Result]) -> None:
    result = gkr("submit", "job.yaml")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: job.yaml is taken as the command; did you mean `gkr submit -f job.yaml`? (a command goes after --)\n",
    )


def test_a_misspelt_job_file_key_gets_did_you_mean(gkr: Callable[..., Result], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: exp-1\nteam: research\ngpus_per_node: 8\ncommand: python train.py\n")
    result = gkr("submit", "-f", str(job), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {job}:3: gpus_per_node: unknown field; did you mean gpus_per_pod? use one of"
    )


def test_help_shows_no_none_defaults(gkr: Callable[..., Result]) -> None:
    for command in ("submit", "list", "clusters", "logs", "dashboard"):
        text = gkr(command, "--help").stdout
        assert "default: None" not in text, command
    assert "[default: head]" in gkr("logs", "--help").stdout


def test_piped_tables_are_not_cut_to_80_columns(gkr: Callable[..., Result]) -> None:
    result = gkr("clusters")
    assert result.exit_code == 0, result.stderr
    rows = result.stdout.splitlines()
    assert max(len(r) for r in rows) > 80
    assert any("quota pretraining" in r and "quota evals" in r for r in rows)  # every column, on one line


class _Unauthorized(JsonHandler):
    def do_GET(self) -> None:
        self._reply({"kind": "Status", "code": 401, "reason": "Unauthorized"}, 401)


@pytest.fixture
def unauthorized() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


def test_why_a_region_is_unreachable(unauthorized: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = free_port()  # a port nothing listens on
    reasons = {}
    for name, server in (("refused", f"http://127.0.0.1:{closed}"), ("denied", unauthorized)):
        use_kubeconfig(tmp_path, monkeypatch, name, server)
        try:
            kube.cluster_queues(kube.client(name), timeout=5)
        except Exception as exc:
            reasons[name] = kube.unreachable(exc)
    assert reasons == {"refused": "connection refused", "denied": "unauthorized"}
    with pytest.raises(kube.NoContext) as missing:
        kube.client("absent")
    assert kube.unreachable(missing.value) == "no context"
    assert kube.unreachable(TimeoutError("timed out")) == "timeout"
