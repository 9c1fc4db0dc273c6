"""A loopback fake of the two cloud hosts of Claude, strict about paths: Vertex AI
(``/v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict | :streamRawPredict``)
and Amazon Bedrock InvokeModel and Converse (``/model/{id}/invoke | invoke-with-response-stream | converse |
converse-stream``).

It answers only a path a test registered (``on``) with the bytes given (a recording); any other
path is 404 in the host's own error shape, a body that is not a JSON object is the host's 400.
Every request is kept (``requests``) to check what reached the host."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeCloud", "Answer"]

_VERTEX = re.compile(r"^/v1(?:beta1)?/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/[^/:]+"
                     r":(?:rawPredict|streamRawPredict)$")
_BEDROCK = re.compile(r"^/model/[^/]+/(?:invoke|invoke-with-response-stream|converse|converse-stream)$")


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _not_found(path: str) -> Answer:
    if path.startswith("/model/"):
        return Answer(404, b'{"message":"Not Found"}', {"content-type": "application/json",
                                                       "x-amzn-errortype": "UnknownOperationException:"})
    return Answer(404, json.dumps({"error": {"code": 404, "message": f"{path} not found",
                                             "status": "NOT_FOUND"}}).encode(),
                  {"content-type": "application/json"})


class FakeCloud:
    """``with FakeCloud() as fc: fc.on(path, Answer(...))``; ``fc.url``; ``fc.requests``."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                fake.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self._send(fake.answer(self.path, body))

            def do_GET(self) -> None:  # noqa: N802
                self._send(_not_found(self.path))

            def _send(self, a: Answer) -> None:
                self.send_response(a.status)
                for k, v in a.headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(a.body)))
                self.end_headers()
                self.wfile.write(a.body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def answer(self, path: str, body: bytes) -> Answer:
        if not (_VERTEX.match(path) or _BEDROCK.match(path)) or path not in self.answers:
            return _not_found(path)
        try:
            ok = isinstance(json.loads(body), dict)
        except ValueError:
            ok = False
        if not ok:
            if path.startswith("/model/"):
                return Answer(400, b'{"message":"Malformed input request, please reformat your input and try again."}',
                              {"content-type": "application/json", "x-amzn-errortype": "ValidationException:"})
            return Answer(400, b'{"error":{"code":400,"message":"Invalid JSON payload","status":"INVALID_ARGUMENT"}}',
                          {"content-type": "application/json"})
        return self.answers[path]

    def on(self, path: str, answer: Answer) -> None:
        self.answers[path] = answer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeCloud:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
