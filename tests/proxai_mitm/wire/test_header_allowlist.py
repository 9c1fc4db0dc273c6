"""Toward another host a routed request keeps only allowlisted headers (routing.rewrite_headers)."""

from __future__ import annotations

import pytest
from mitmproxy import http

from proxai_core import Protocol
from proxai_core.codecs import get
from proxai_mitm.wire import routing

#: credential-bearing headers of providers, gateways and proxies (and two harmless-looking names)
CREDENTIAL_HEADERS = [
    "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie",
    "x-portkey-api-key", "x-portkey-virtual-key", "helicone-auth", "x-helicone-api-key", "openai-organization",
    "openai-project", "anthropic-organization-id", "chatgpt-account-id", "x-auth-token", "x-access-token",
    "x-amz-security-token", "ocp-apim-subscription-key", "x-litellm-api-key", "cf-aig-authorization",
    "cf-access-client-secret", "x-session-token", "x-forwarded-authorization", "authentication",
    "x-openrouter-key", "x-tenant-binding", "x-custom-thing",
]
HARMLESS = {"content-type": "application/json", "accept": "text/event-stream", "user-agent": "sdk/1.0",
            "x-stainless-lang": "python", "x-stainless-retry-count": "0", "idempotency-key": "idem-1"}


def _headers() -> http.Headers:
    h = http.Headers(**{k.replace("-", "_"): v for k, v in HARMLESS.items()})
    for i, name in enumerate(CREDENTIAL_HEADERS):
        h.add(name, f"secret-value-{i:02d}")
    h.add("x-api-key", "second-value-of-a-repeated-header")
    h["anthropic-version"] = "2023-06-01"
    h["anthropic-beta"] = "tools-2024"
    h["openai-beta"] = "assistants=v2"
    return h


def test_credential_header_list_is_long_enough():
    assert len(set(CREDENTIAL_HEADERS)) >= 20


@pytest.mark.parametrize("target", list(Protocol))
def test_other_host_keeps_only_the_allowlist(target):
    h = _headers()
    routing.rewrite_headers(h, client=Protocol.CHAT, target=target, same_host=False, key="injected-key-123",
                            upstream_host="api.example.com")
    values = " ".join(h.values())
    assert "secret-value" not in values and "second-value" not in values
    for name in h.keys():
        # besides the allowlist: the injected key in the target's own header, and ours
        assert routing.forwardable(name, target) or name.lower() in (
            *get(target).wire.credentials.key_headers, "accept-encoding"), name
    for k, v in HARMLESS.items():
        if k != "content-type":
            assert h[k] == v
    if target is Protocol.ANTHROPIC:
        assert h["x-api-key"] == "injected-key-123" and h["anthropic-beta"] == "tools-2024"
        assert "openai-beta" not in h
    elif target is Protocol.GEMINI:
        assert h["x-goog-api-key"] == "injected-key-123" and "authorization" not in h
        assert "anthropic-beta" not in h and "anthropic-version" not in h and "openai-beta" not in h
    else:
        assert h["authorization"] == "Bearer injected-key-123"
        assert "anthropic-beta" not in h and "anthropic-version" not in h


def test_same_host_keeps_other_headers():
    h = _headers()
    routing.rewrite_headers(h, client=Protocol.CHAT, target=Protocol.CHAT, same_host=True, key="client-key-1",
                            upstream_host="api.example.com")
    assert h["x-custom-thing"].startswith("secret-value")
    assert h["authorization"] == "Bearer client-key-1"
