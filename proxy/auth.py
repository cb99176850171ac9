"""Resolve the calling session from the API key the harness sends.

Keys are Polar session keys (`polar.session_keys`): HMAC-signed, so the
gateway verifies them without a registry and one session cannot write into
another. Accepted carriers, first valid one wins: `X-Polar-Session-Key`,
`Authorization: Bearer <key>`, `x-api-key` (Anthropic), `x-goog-api-key`
(Google) and the `?key=` query parameter (Google).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import Request

from polar.providers import APIError
from polar.session_keys import (
    ExpiredSessionKey,
    InvalidSessionKey,
    SessionIdentity,
    verify_session_key,
)

KEY_HEADERS = ("x-polar-session-key", "authorization", "x-api-key", "x-goog-api-key")
KEY_QUERY = "key"


def candidate_keys(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> list[str]:
    """The keys a request carries, in order of preference (header names are case-insensitive)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    keys: list[str] = []
    for name in KEY_HEADERS:
        value = (lowered.get(name) or "").strip()
        if name == "authorization":
            scheme, _, rest = value.partition(" ")
            value = rest.strip() if scheme.lower() == "bearer" else ""
        if value:
            keys.append(value)
    from_query = ((query or {}).get(KEY_QUERY) or "").strip()
    if from_query:
        keys.append(from_query)
    return keys


def resolve_session(
    headers: Mapping[str, str], secret: str | None, query: Mapping[str, str] | None = None
) -> SessionIdentity:
    """The session named by the request's key; 401 `invalid_api_key` if none verifies
    (`expired_api_key` when the only valid one has expired)."""
    keys = candidate_keys(headers, query)
    if not keys:
        raise APIError(
            401,
            "You didn't provide an API key: send a Polar session key as "
            "'Authorization: Bearer <key>', 'x-api-key', 'x-goog-api-key', '?key=' "
            "or 'X-Polar-Session-Key'.",
            code="invalid_api_key",
        )
    expired: ExpiredSessionKey | None = None
    for key in keys:
        try:
            return verify_session_key(key, secret)
        except ExpiredSessionKey as exc:
            expired = expired or exc
        except InvalidSessionKey:
            continue
    if expired is not None:
        raise APIError(
            401,
            f"Your API key has expired: {expired}. Keys live for their session's budget.",
            code="expired_api_key",
        )
    shown = keys[0][:8] + "..." if len(keys[0]) > 8 else "***"
    raise APIError(
        401,
        f"Incorrect API key provided: {shown} is not a valid Polar session key.",
        code="invalid_api_key",
    )


def authenticate(request: Request) -> SessionIdentity:
    """FastAPI dependency: the session of this request, verified with the app's secret."""
    return resolve_session(
        request.headers, request.app.state.settings.session_secret, request.query_params
    )
