"""The base of the tests' local HTTP servers (gkr's, Warden's): JSON replies, no request logging."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonReplies(BaseHTTPRequestHandler):
    def send_body(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, payload: Any) -> None:
        self.send_body(status, json.dumps(payload).encode())

    def log_message(self, *args: Any) -> None:
        pass  # the tests assert on what the servers recorded; a line per request would only bury failures
