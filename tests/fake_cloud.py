"""Loopback fakes of Amazon Bedrock's runtime and Vertex AI's Anthropic endpoints, as strict as the real
services about paths and credentials (threads, HTTP/1.1).

:class:`FakeBedrock` answers only ``POST /model/<model id>/converse | converse-stream | invoke |
invoke-with-response-stream | count-tokens``; anything else is a 404 ``UnknownOperationException``.
Every request must be signed with SigV4 (service ``bedrock``, the fake's region) by one of the
access keys it knows: the fake recomputes the signature with botocore from the request it
received, so a signature over anything but what arrived (another body, path, signed header value,
date) is a 403 ``InvalidSignatureException``; an unknown key a 403 ``UnrecognizedClientException``;
no credentials a 403 ``MissingAuthenticationTokenException`` (bodies ``{"message": ...}``, the type
in ``x-amzn-errortype``, as AWS answers). A Bedrock API key (``Authorization: Bearer``) it knows is
accepted too. Answers: a registered :class:`CloudReply` for the operation, else the first 200
recording of that operation in ../shared/fixtures/bedrock-converse or bedrock-invoke (event-stream
bodies byte for byte, ``application/vnd.amazon.eventstream``).

:class:`FakeVertex` answers only ``POST /v1/projects/P/locations/L/publishers/anthropic/models/M:
rawPredict | :streamRawPredict`` with a known ``Authorization: Bearer`` token (else 401
``UNAUTHENTICATED``); any query parameter (``?alt=sse``) is Google's 400 ``INVALID_ARGUMENT``; other
paths Google's 404. Answers: a registered reply, else the first vertex-anthropic recording.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["CloudReply", "FakeBedrock", "FakeVertex", "Received", "fixture_reply", "sigv4_signature"]

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
EVENTSTREAM = "application/vnd.amazon.eventstream"
BEDROCK_OPS = ("converse", "converse-stream", "invoke", "invoke-with-response-stream", "count-tokens")
_BEDROCK_PATH = re.compile(r"^/model/([^/]+)/(" + "|".join(BEDROCK_OPS) + r")$")
_VERTEX_PATH = re.compile(r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/models/([^/:]+)"
                          r":(rawPredict|streamRawPredict)$")
_AWS_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                       r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")
#: how far a request's X-Amz-Date may be from the fake's clock, as AWS allows
MAX_SKEW = 15 * 60
_CORAL = ":http://internal.amazon.com/coral/com.amazon.coral.service/"


@dataclass
class CloudReply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def json(cls, obj: Any, status: int = 200) -> CloudReply:
        return cls(status, json.dumps(obj).encode())

    @classmethod
    def aws_error(cls, status: int, error_type: str, message: str | None) -> CloudReply:
        return cls(status, json.dumps({"message": message}).encode(),
                   headers=[("x-amzn-errortype", error_type + _CORAL)])


def fixture_reply(folder: str, stem: str) -> CloudReply:
    """A recording as the service sent it: its body (``.json``, ``.eventstream``, ``.sse``) and status."""
    base = FIXTURES / folder / stem
    status = 200
    headers: list[tuple[str, str]] = []
    st = base.with_name(stem + ".status.json")
    if st.exists():
        meta = json.loads(st.read_text())
        status = meta["status"]
        if meta.get("x-amzn-errortype"):
            headers.append(("x-amzn-errortype", meta["x-amzn-errortype"]))
    for ext, ctype in ((".eventstream", EVENTSTREAM), (".sse", "text/event-stream"), (".json", "application/json")):
        p = base.with_name(stem + ext)
        if p.exists():
            return CloudReply(status, p.read_bytes(), ctype, headers)
    raise FileNotFoundError(base)


def _first_recording(folders: tuple[str, ...], suffix: str) -> tuple[str, str] | None:
    """(folder, stem) of the first 200 recording whose URL ends with ``suffix``."""
    for folder in folders:
        d = FIXTURES / folder
        if not d.is_dir():
            continue
        for url in sorted(d.glob("*.url.txt")):
            stem = url.name.removesuffix(".url.txt")
            if url.read_text().strip().endswith(suffix) and not (d / f"{stem}.status.json").exists():
                return folder, stem
    return None


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    #: who the request authenticated as: an access key id, or "bearer:<token>"
    principal: str | None = None

    def json(self) -> Any:
        return json.loads(self.body)


class _Fake:
    """The HTTP server both fakes share: a reply per operation, the requests received."""

    folders: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.replies: dict[str, CloudReply] = {}
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                rec = Received(self.command, self.path, headers, body)
                with fake._lock:
                    fake.requests.append(rec)
                fake._send(self, fake.handle(rec))

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> _Fake:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def on(self, operation: str, reply: CloudReply) -> None:
        """Answer ``operation`` (``converse``, ``invoke-with-response-stream``, ``rawPredict``, ...) so."""
        self.replies[operation] = reply

    def _reply_for(self, operation: str) -> CloudReply:
        if operation in self.replies:
            return self.replies[operation]
        sep = ":" if operation in ("rawPredict", "streamRawPredict") else "/"
        found = _first_recording(self.folders, sep + operation)
        if found is None:
            return self.no_reply(operation)
        return fixture_reply(*found)

    def no_reply(self, operation: str) -> CloudReply:
        raise NotImplementedError

    def handle(self, rec: Received) -> CloudReply:
        raise NotImplementedError

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, r: CloudReply) -> None:
        h.send_response(r.status)
        h.send_header("content-type", r.content_type)
        h.send_header("content-length", str(len(r.body)))
        h.send_header("x-amzn-requestid", str(uuid.uuid4()))
        for k, v in r.headers:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(r.body)


class FakeBedrock(_Fake):
    """Bedrock runtime (see the module docstring). ``keys``: access key id -> (secret, session token)."""

    folders = ("bedrock-converse", "bedrock-invoke")

    def __init__(self, keys: dict[str, tuple[str, str | None]] | None = None, *, region: str = "us-east-1",
                 api_keys: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.keys = dict(keys or {})
        self.region = region
        self.api_keys = set(api_keys)

    def no_reply(self, operation: str) -> CloudReply:
        return CloudReply.aws_error(400, "ValidationException", f"no recording of {operation}")

    def handle(self, rec: Received) -> CloudReply:
        path, _, _query = rec.path.partition("?")
        m = _BEDROCK_PATH.match(path)
        if rec.method != "POST" or m is None:
            return CloudReply.aws_error(404, "UnknownOperationException", None)
        denied = self.authenticate(rec)
        if denied is not None:
            return denied
        return self._reply_for(m.group(2))

    def authenticate(self, rec: Received) -> CloudReply | None:
        auth = rec.headers.get("authorization", "")
        if auth.startswith("Bearer "):
            if auth[7:] in self.api_keys:
                rec.principal = "bearer:" + auth[7:]
                return None
            return CloudReply.aws_error(403, "UnrecognizedClientException", "Invalid API Key format: Must start "
                                        "with pre-defined prefix")
        if not auth:
            return CloudReply.aws_error(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        m = _AWS_AUTH.match(auth)
        if m is None:
            return CloudReply.aws_error(403, "IncompleteSignatureException",
                                        f"Authorization header requires 'Credential', 'Signature' and "
                                        f"'SignedHeaders' parameters. Authorization={auth[:20]}")
        access, day, region, service, signed, signature = m.groups()
        if access not in self.keys:
            return CloudReply.aws_error(403, "UnrecognizedClientException",
                                        "The security token included in the request is invalid.")
        secret, token = self.keys[access]
        bad = CloudReply.aws_error(403, "InvalidSignatureException", (
            "The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method. Consult the service documentation for details."))
        amz_date = rec.headers.get("x-amz-date", "")
        names = signed.split(";")
        if (region != self.region or service != "bedrock" or "host" not in names or "x-amz-date" not in names
                or not amz_date.startswith(day) or any(n not in rec.headers for n in names)):
            return bad
        if token is not None and (rec.headers.get("x-amz-security-token") != token
                                  or "x-amz-security-token" not in names):
            return CloudReply.aws_error(403, "UnrecognizedClientException",
                                        "The security token included in the request is invalid.")
        try:
            when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            return bad
        if abs(time.time() - when.timestamp()) > MAX_SKEW:
            return CloudReply.aws_error(403, "InvalidSignatureException", "Signature expired: "
                                        f"{amz_date} is now earlier than the allowed time window.")
        if signature != sigv4_signature(rec, access, secret, token, region, names, amz_date):
            return bad
        rec.principal = access
        return None


def sigv4_signature(rec: Received, access: str, secret: str, token: str | None, region: str, names: list[str],
           amz_date: str) -> str:
    """The signature botocore computes for the request as received, over its signed headers."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import ReadOnlyCredentials

    req = AWSRequest(method=rec.method, url=f"http://{rec.headers['host']}{rec.path}", data=rec.body,
                     headers={n: rec.headers[n] for n in names})
    req.context["timestamp"] = amz_date
    auth = SigV4Auth(ReadOnlyCredentials(access, secret, token), "bedrock", region)
    return auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)


class FakeVertex(_Fake):
    """Vertex AI's Anthropic publisher endpoints (see the module docstring)."""

    folders = ("vertex-anthropic",)

    def __init__(self, tokens: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.tokens = set(tokens)

    def no_reply(self, operation: str) -> CloudReply:
        return _google_error(400, "INVALID_ARGUMENT", f"no recording of {operation}")

    def handle(self, rec: Received) -> CloudReply:
        path, _, query = rec.path.partition("?")
        m = _VERTEX_PATH.match(path)
        if rec.method != "POST" or m is None:
            return _google_error(404, "NOT_FOUND", f"The requested URL {path} was not found on this server.")
        if query:
            name = query.partition("=")[0]
            return _google_error(400, "INVALID_ARGUMENT", f'Invalid JSON payload received. Unknown name "{name}": '
                                 "Cannot bind query parameter. Field '" + name + "' could not be found in request "
                                 "message.")
        auth = rec.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
            return _google_error(401, "UNAUTHENTICATED", (
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
                "other valid authentication credential. See https://developers.google.com/identity/sign-in/web/"
                "devconsole-project."))
        rec.principal = "bearer:" + auth[7:]
        return self._reply_for(m.group(4))


def _google_error(code: int, status: str, message: str) -> CloudReply:
    return CloudReply.json({"error": {"code": code, "message": message, "status": status}}, code)
