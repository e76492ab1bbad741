"""The controller's HTTP service: hostile requests are one line each and the service goes on; /metrics serves RL's."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from trainer.rl.controller import Controller
from trainer.rl.grpo import make_task
from trainer.rl.metrics import RLMetrics
from trainer.rl.service import Client, RequestFailed, Service
from trainer.rl.settings import RL

from contract.metrics import RL as CATALOG

SETTINGS = RL(group_size=2, prompts_per_step=2, lease_prompts=2)


@pytest.fixture
def service() -> Iterator[Service]:
    controller = Controller(SETTINGS, make_task(SETTINGS, 256), vocab=256, steps=4)
    metrics = RLMetrics("run", "", -1, max_policy_age=1)
    served = Service(controller, metrics=metrics)
    yield served
    served.close()


def raw(service: Service, path: str, data: bytes) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(service.address + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("path", "body", "code", "says"),
    [
        ("/lease", b"not json", 400, "malformed request"),
        ("/lease", b"[1, 2]", 400, "not a JSON object"),
        ("/lease", b'{"generator": "g"}', 400, "malformed request"),
        ("/lease", b'{"generator": "g", "held": "x"}', 400, "malformed request"),
        ("/lease", b'{"generator": "g", "held": -1, "members": 0}', 400, "members '0' is not a process count"),
        ("/lease", b'{"generator": "g", "held": -1, "members": 65}', 400, "is not a process count 1..64"),
        ("/lease", b'{"generator": "g", "held": -1, "members": "2"}', 400, "is not a process count 1..64"),
        ("/lease", b'{"generator": "g", "held": -1, "members": true}', 400, "is not a process count 1..64"),
        ("/nowhere", b"{}", 400, "no such endpoint"),
        ("/result", b'{"generator": "g", "lease": 99}', 400, "not one it holds"),
    ],
)
def test_a_bad_request_is_one_line_and_the_service_goes_on(
    service: Service, path: str, body: bytes, code: int, says: str
) -> None:
    status, answer = raw(service, path, body)
    assert status == code
    assert says in answer["error"]
    assert "\n" not in answer["error"]
    client = Client(service.address)
    assert client.post("/lease", {"generator": "g", "held": -1}) == {"wait": 0.2, "store": service.store.port}


def test_a_body_over_the_limit_is_refused_before_it_is_read(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainer.rl.service.MAX_BODY", 10)
    status, answer = raw(service, "/lease", b'{"generator": "g", "held": -1}')
    assert status == 413
    assert "at most 10" in answer["error"]


def test_a_refusal_reaches_the_client_as_one_line(service: Service) -> None:
    with pytest.raises(RequestFailed, match="no such endpoint"):
        Client(service.address).post("/nowhere", {})


def test_metrics_are_served_with_the_rl_catalog(service: Service) -> None:
    with urllib.request.urlopen(service.address + "/metrics", timeout=10) as response:
        text = response.read().decode()
    assert CATALOG.stale_trained.name in text
    assert CATALOG.reissued.name in text


def test_a_refused_answer_tells_the_generator_why_and_is_counted_per_generator(service: Service) -> None:
    client = Client(service.address)
    service.controller.start(0, "t0", 0, None)
    lease = client.post("/lease", {"generator": "g", "held": 0})
    groups = [{"index": i, "completions": [{"response": [ord("a")], "logprobs": [-0.5], "version": 0}] * 2}
              for i, _ in lease["prompts"]]  # fmt: skip
    with pytest.raises(RequestFailed, match="outside the allowed tokens") as refused:
        client.post("/result", {"generator": "g", "lease": lease["lease"], "groups": groups})
    assert refused.value.reason == "token"
    with urllib.request.urlopen(service.address + "/metrics", timeout=10) as response:
        text = response.read().decode()
    assert f'{CATALOG.refused_answers.name}{{generator="g",group="-1",reason="token",region="",run="run"}} 1.0' in text
