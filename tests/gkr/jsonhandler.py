"""The base of the local API servers gkr's tests run: JSON replies, no request logging."""

from __future__ import annotations

from typing import Any

from tests.httpfake import JsonReplies


class JsonHandler(JsonReplies):
    def _reply(self, payload: dict[str, Any], status: int = 200) -> None:
        self.send_json(status, payload)
