"""The controller's HTTP service: hostile requests are one line each and the service goes on; /metrics serves RL's."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from trainer.rl.controller import Controller
from trainer.rl.grpo import make_task
from trainer.rl.metrics import RLMetrics
from trainer.rl.service import Client, RequestFailed, Service
from trainer.rl.settings import RL

from contract.metrics import RL as CATALOG
from tests.waiting import until

SETTINGS = RL(group_size=2, prompts_per_step=2, lease_prompts=2)


@pytest.fixture
def service() -> Iterator[Service]:
    controller = Controller(SETTINGS, make_task(SETTINGS, 256), vocab=256, steps=4)
    metrics = RLMetrics("run", "", -1, max_policy_age=1)
    served = Service(controller, metrics=metrics, poll_s=0.05)  # an ask with nothing to do answers "wait" at once
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
        ("/lease", b'{"generator": "g", "held": "x"}', 400, "is not a policy version"),
        ("/lease", b'{"generator": "g", "held": 1e400}', 400, "is not a policy version"),
        ("/lease", b'{"generator": "g", "held": 100000000000000000000}', 400, "is not a policy version"),
        ("/lease", b'{"generator": "g", "held": -2}', 400, "is not a policy version"),
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


def test_a_generator_waiting_for_work_gets_it_when_the_state_changes_not_at_its_next_ask() -> None:
    """A lease ask with nothing to do waits on the controller's state (a long poll, as /batch does): the run's
    start, a commit or a formed batch answers it at once. A generator told "wait" slept WAIT_S (0.2 s) and asked
    again: longer than a step of the arithmetic task (0.12-0.14 s), so trainer and generators took turns
    waiting for each other (issue 41: the trainer 53% waiting, the generators 79%)."""
    controller = Controller(SETTINGS, make_task(SETTINGS, 256), vocab=256, steps=4)
    service = Service(controller, poll_s=60.0)
    answers: list[dict[str, object]] = []
    try:
        asking = threading.Thread(
            target=lambda: answers.append(Client(service.address).post("/lease", {"generator": "g", "held": 0}))
        )
        asking.start()
        until(lambda: "g" in controller.askers, 10, "the ask reached the controller")
        assert not answers  # nothing to lease before a trainer group started: the ask waits, it is not told to sleep
        service.call(controller.start, 0, "t0", 0, None)
        asking.join(timeout=30)
        assert not asking.is_alive()
        assert "lease" in answers[0], answers[0]
    finally:
        service.close()


def counted_connections(service: Service) -> tuple[list[object], list[object]]:
    """The connections the service accepted and those it closed, as its server records them."""
    opened: list[object] = []
    closed: list[object] = []
    accept, close = service.server.process_request, service.server.shutdown_request

    def process_request(request: Any, client_address: Any) -> None:
        opened.append(client_address)
        accept(request, client_address)

    def shutdown_request(request: Any) -> None:
        closed.append(request)
        close(request)

    service.server.process_request = process_request  # type: ignore[method-assign]
    service.server.shutdown_request = shutdown_request  # type: ignore[method-assign]
    return opened, closed


def test_a_client_sends_every_request_over_one_connection(service: Service) -> None:
    """A connection and a server thread per request were 7-10% of the controller's CPU (issue 41)."""
    opened, _ = counted_connections(service)
    client = Client(service.address)
    service.controller.start(0, "t0", 0, None)
    for _ in range(20):
        client.post("/committed", {"group": 0, "step": 0, "stats": {}})
    with pytest.raises(RequestFailed, match="no such endpoint"):  # a refusal keeps the connection too
        client.post("/nowhere", {})
    client.post("/committed", {"group": 0, "step": 0, "stats": {}})
    assert len(opened) == 1


def test_a_connection_the_controller_closed_while_idle_is_opened_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainer.rl.service.IDLE_S", 0.2)
    controller = Controller(SETTINGS, make_task(SETTINGS, 256), vocab=256, steps=4)
    service = Service(controller, poll_s=0.05)
    try:
        opened, closed = counted_connections(service)
        client = Client(service.address)
        controller.start(0, "t0", 0, None)
        client.post("/committed", {"group": 0, "step": 0, "stats": {}})
        until(lambda: closed, 10, "the idle connection closed by the controller")
        assert client.post("/committed", {"group": 0, "step": 0, "stats": {}})["version"] == 0
        assert len(opened) == 2
    finally:
        service.close()


@pytest.mark.parametrize(
    ("length", "code", "says"),
    [("abc", 400, "is not a byte count"), ("-5", 400, "is not a byte count"), ("9" * 5000, 413, "at most")],
)
def test_a_content_length_that_is_no_byte_count_is_one_line(
    service: Service, length: str, code: int, says: str
) -> None:
    connection = http.client.HTTPConnection("localhost", int(service.address.rsplit(":", 1)[1]), timeout=10)
    connection.putrequest("POST", "/lease")
    connection.putheader("Content-Length", length)
    connection.endheaders()
    response = connection.getresponse()
    answer = json.loads(response.read())
    assert response.status == code
    assert says in answer["error"]
    assert response.will_close  # the body was never read: the connection is not used again
    connection.close()
    assert Client(service.address).post("/lease", {"generator": "g", "held": -1})["wait"]
