"""The base of the tests' local HTTP servers (gkr's, Warden's, the CRD download's): replies, no request logging."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


@contextmanager
def serving(
    handler: type[BaseHTTPRequestHandler], server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer
) -> Iterator[str]:
    """Serve `handler` on a free local port in a thread of its own; yields the base URL, then stops the server."""
    server = server_class(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
