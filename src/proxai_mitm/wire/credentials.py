"""Upstream credentials that are not a plain API key: AWS SigV4, Bedrock API keys, Google tokens.

A route's ``auth`` (option ``proxai_auth``) names one source:

* ``aws[:profile][@region]``: botocore's credential chain (environment, shared files, SSO, container
  and instance metadata), or the named profile; every request is signed with SigV4 (service
  ``bedrock``). The region is the ``@region``, else the one in a ``bedrock-runtime.<region>.
  amazonaws.com`` host, else ``AWS_REGION`` or the profile's.
* ``aws-bearer[:ENV]``: a Bedrock API key from ``ENV`` (default ``AWS_BEARER_TOKEN_BEDROCK``),
  sent as ``Authorization: Bearer``.
* ``google``: Application Default Credentials via google-auth, cloud-platform scope, refreshed
  before they expire; sent as ``Authorization: Bearer``.
* ``bearer:ENV``: a token from ``ENV``, sent as ``Authorization: Bearer``.

Nothing here touches mitmproxy: :meth:`Source.refresh` may block (files, SSO, instance metadata,
token endpoints) and is run in a worker thread by the signer addon; :meth:`Source.authorize` is
pure CPU and reads only what ``refresh`` cached (or the process environment).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = [
    "AUTH_HEADERS",
    "AwsSigV4",
    "CredentialError",
    "EnvBearer",
    "GoogleADC",
    "Source",
    "Unavailable",
    "make_source",
    "seen_secrets",
]

#: the headers a credential source sets; the client's own values are removed before signing
AUTH_HEADERS = ("authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256")
#: what botocore must not log (its DEBUG lines show the canonical request and the signature) and
#: google-auth (its DEBUG lines can show token responses)
_QUIET_LOGGERS = ("botocore.auth", "google.auth", "google.oauth2")
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
#: credentials this close to their expiry are refreshed before use
REFRESH_MARGIN = dt.timedelta(minutes=5)
#: one HTTP request of a token refresh (google-auth's default is 120 s)
HTTP_TIMEOUT = 10.0
DEFAULT_BEARER_ENV = "AWS_BEARER_TOKEN_BEDROCK"
_BEDROCK_HOST = re.compile(r"^bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$", re.IGNORECASE)
_SIGV4 = re.compile(r"Credential=([A-Za-z0-9]+)/|Signature=([0-9a-f]{64})")


class CredentialError(Exception):
    """No usable credential (401 to the client). The message names the profile or variable, never
    a secret."""


class Unavailable(CredentialError):
    """The credential could not be fetched (a token endpoint or metadata service failed: 502)."""


def _quiet() -> None:
    for name in _QUIET_LOGGERS:
        lg = logging.getLogger(name)
        if lg.level == logging.NOTSET or lg.level < logging.INFO:
            lg.setLevel(logging.INFO)


class Source:
    """One credential source; shared by every route that names it."""

    #: what the client error and the log line call it
    label: str = ""

    def ready(self) -> bool:
        """True when :meth:`authorize` can run without :meth:`refresh` (no I/O)."""
        return True

    def refresh(self) -> None:
        """Fetch or renew the credential (blocking: run it in a worker thread)."""

    def authorize(self, method: str, url: str, headers: Mapping[str, str], body: bytes, host: str) -> dict[str, str]:
        """The headers to set on the final request (``headers`` without the client's credentials)."""
        raise NotImplementedError

    def secrets(self) -> tuple[str, ...]:
        """Every secret value this source currently sends, for redaction."""
        return ()


class EnvBearer(Source):
    """A bearer token read from an environment variable at each request (``aws-bearer``, ``bearer``)."""

    def __init__(self, env: str, what: str) -> None:
        self.env = env
        self.label = f"{what} (environment variable {env})"

    def _token(self) -> str:
        value = os.environ.get(self.env, "").strip()
        if not value:
            raise CredentialError(f"environment variable {self.env} is not set in mitmproxy's environment")
        return value

    def authorize(self, method: str, url: str, headers: Mapping[str, str], body: bytes, host: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self._token()}"}

    def secrets(self) -> tuple[str, ...]:
        v = os.environ.get(self.env, "").strip()
        return (v,) if v else ()


class AwsSigV4(Source):
    """SigV4 by botocore over botocore's credential chain (or one profile)."""

    def __init__(self, profile: str | None = None, region: str | None = None) -> None:
        self.profile = profile
        self.region = region
        self.label = f"AWS credentials (profile {profile})" if profile else "AWS credentials (default chain)"
        self._lock = threading.Lock()
        self._creds: Any = None  # botocore Credentials (maybe refreshable)
        self._frozen: Any = None  # ReadOnlyCredentials: what authorize signs with
        self._default_region: str | None = None
        _quiet()

    def ready(self) -> bool:
        if self._frozen is None:
            return False
        needed = getattr(self._creds, "refresh_needed", None)
        return needed is None or not needed(int(REFRESH_MARGIN.total_seconds()))

    def refresh(self) -> None:
        import botocore.exceptions
        import botocore.session

        with self._lock:
            try:
                if self._creds is None:
                    session = botocore.session.Session(profile=self.profile)
                    creds = session.get_credentials()
                    if creds is None:
                        raise CredentialError(f"no {self.label} found (environment, shared files, SSO, "
                                              "container or instance metadata)")
                    self._default_region = os.environ.get("AWS_REGION") or session.get_config_variable("region")
                    self._creds = creds
                self._frozen = self._creds.get_frozen_credentials()
            except botocore.exceptions.ProfileNotFound:
                raise CredentialError(f"AWS profile {self.profile!r} is not in the shared config files") from None
            except CredentialError:
                raise
            except botocore.exceptions.BotoCoreError as e:
                raise Unavailable(f"{self.label} could not be loaded: {type(e).__name__}") from None
            if not self._frozen.access_key or not self._frozen.secret_key:
                self._frozen = None
                raise CredentialError(f"{self.label}: incomplete (no access key id or secret key)")

    def region_for(self, host: str) -> str:
        if self.region:
            return self.region
        m = _BEDROCK_HOST.match(host)
        if m:
            return m.group(1).lower()
        if self._default_region:
            return self._default_region
        raise CredentialError(f"{self.label}: no AWS region for {host}: write auth = \"aws@<region>\", use a "
                              "bedrock-runtime.<region>.amazonaws.com base_url or set AWS_REGION")

    def authorize(self, method: str, url: str, headers: Mapping[str, str], body: bytes, host: str) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        frozen = self._frozen
        if frozen is None:
            raise CredentialError(f"{self.label} are not loaded")
        req = AWSRequest(method=method, url=url, data=body,
                         headers={k: v for k, v in headers.items() if _signed(k.lower())})
        SigV4Auth(frozen, "bedrock", self.region_for(host)).add_auth(req)
        out = {"authorization": req.headers["Authorization"], "x-amz-date": req.headers["X-Amz-Date"]}
        if frozen.token:
            out["x-amz-security-token"] = frozen.token
        return out

    def secrets(self) -> tuple[str, ...]:
        f = self._frozen
        return tuple(s for s in (f.access_key, f.secret_key, f.token) if s) if f is not None else ()


def _signed(name: str) -> bool:
    """The headers SigV4 covers, as AWS's SDKs choose them: the host, the content headers and the
    AWS headers. The others (user agent, lengths, an SDK's or the proxy's own) may be changed on the
    way without breaking the signature."""
    return name in ("host", "content-type", "accept") or (
        name.startswith(("x-amz-", "x-amzn-")) and name not in AUTH_HEADERS)


class GoogleADC(Source):
    """Application Default Credentials (google-auth), cloud-platform scope."""

    label = "Google Application Default Credentials"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._creds: Any = None
        _quiet()

    def ready(self) -> bool:
        c = self._creds
        if c is None or not c.token:
            return False
        expiry = c.expiry  # naive UTC, or None for a token that does not expire
        return expiry is None or expiry - dt.datetime.now(dt.UTC).replace(tzinfo=None) > REFRESH_MARGIN

    def refresh(self) -> None:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests

        with self._lock:
            if self.ready():
                return  # another flow refreshed it meanwhile
            try:
                if self._creds is None:
                    self._creds, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
                self._creds.refresh(_Bounded(google.auth.transport.requests.Request()))
            except google.auth.exceptions.DefaultCredentialsError as e:
                raise CredentialError(f"{self.label}: none found ({_first_line(e)})") from None
            except google.auth.exceptions.GoogleAuthError as e:
                raise Unavailable(f"{self.label} could not be refreshed: {type(e).__name__}") from None
            if not self._creds.token:
                raise Unavailable(f"{self.label}: the token endpoint gave no access token")

    def authorize(self, method: str, url: str, headers: Mapping[str, str], body: bytes, host: str) -> dict[str, str]:
        c = self._creds
        if c is None or not c.token:
            raise CredentialError(f"{self.label} are not loaded")
        return {"authorization": f"Bearer {c.token}"}

    def secrets(self) -> tuple[str, ...]:
        c = self._creds
        if c is None:
            return ()
        own = (getattr(c, "token", None), getattr(c, "refresh_token", None), getattr(c, "client_secret", None))
        return tuple(s for s in own if isinstance(s, str) and s)


class _Bounded:
    """google-auth's transport with a bounded timeout on every request it makes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, url: str, method: str = "GET", body: Any = None, headers: Any = None,
                 timeout: float | None = None, **kwargs: Any) -> Any:
        t = HTTP_TIMEOUT if timeout is None else min(timeout, HTTP_TIMEOUT)
        return self.inner(url, method=method, body=body, headers=headers, timeout=t, **kwargs)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def make_source(auth: str) -> Source:
    """The source an ``auth`` value names (validated by the config: see ``routes.parse_auth``)."""
    kind, _, arg = auth.partition(":")
    if kind.startswith("aws@"):
        kind, arg = "aws", "@" + kind[4:]
    if kind == "aws":
        profile, _, region = arg.partition("@")
        return AwsSigV4(profile or None, region or None)
    if kind == "aws-bearer":
        return EnvBearer(arg or DEFAULT_BEARER_ENV, "Bedrock API key")
    if kind == "bearer":
        return EnvBearer(arg, "bearer token")
    if kind == "google":
        return GoogleADC()
    raise ValueError(f"unknown credential source {auth!r}")


def seen_secrets(headers: Mapping[str, str]) -> list[str]:
    """The secret parts of a client's own AWS credentials: the access key id and signature of a
    SigV4 ``authorization``, and a session token (redacted wherever they appear)."""
    out: list[str] = []
    auth = headers.get("authorization", "")
    if "AWS4-HMAC-SHA256" in auth.upper():  # repeated fields come joined: look at the whole value
        out += [a or b for a, b in _SIGV4.findall(auth)]
    token = headers.get("x-amz-security-token", "").strip()
    if token:
        out.append(token)
    return out
