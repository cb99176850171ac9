"""Per-session API keys that cannot be forged.

A key is `pk-<payload>.<mac>`: the payload names the session, task and
activity attempt, and when the key expires (unix seconds); the mac is an
HMAC-SHA256 over it with the secret the workers (which mint keys) and the
gateways (which verify them) share. The gateway needs no registry, and a
harness cannot write into another session. A session's key also stops working
when the session closes (`proxy.session_gate`).
The ids a key names are checked (`polar.ids.checked_id`) when it is minted
and when it is verified: a key never names a path outside its session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from polar.ids import InvalidId, checked_id

PREFIX = "pk-"
DEFAULT_TTL_S = 24 * 3600.0
"""lifetime of a key minted without one (hand-run harnesses); workers mint for the run's
budget plus EXPIRY_MARGIN_S."""
EXPIRY_MARGIN_S = 600.0
WORKER_ATTEMPT = 0
"""The attempt of the keys the worker mints for its own calls (the rubric judge's): a
harness run's attempts count from 1, and keys are signed, so no harness holds one; a pool
that is not the policy answers only these (proxy/pools.py)."""


class InvalidSessionKey(ValueError):
    """The key is malformed, its signature does not verify, or it has expired."""


class ExpiredSessionKey(InvalidSessionKey):
    """The key verifies but its expiry has passed."""


@dataclass(frozen=True)
class SessionIdentity:
    session_id: str
    task_id: str
    attempt: int = 1
    expires_at: float | None = None
    """unix seconds; set on every verified key (minting takes it from the ttl when None)."""
    only_model: str | None = None
    """Set when the task refuses unknown models (`harness.unknown_models: refuse`): the one
    policy model name this session may ask for besides the gateway's own and its pools'."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def mint_session_key(
    identity: SessionIdentity, secret: str | None, *, ttl_s: float = DEFAULT_TTL_S
) -> str:
    """Sign a session identity into an API key a harness can send as its key, valid until
    `identity.expires_at` or else for `ttl_s` from now (InvalidId for an unsafe session or
    task id; ValueError without a secret)."""
    checked_id(identity.session_id, "session id")
    checked_id(identity.task_id, "task id")
    if not secret:
        raise ValueError("no session secret: set POLAR_SESSION_SECRET (or run `polar dev up`)")
    expires_at = identity.expires_at if identity.expires_at is not None else time.time() + ttl_s
    body = json.dumps(
        {
            "s": identity.session_id,
            "t": identity.task_id,
            "a": identity.attempt,
            "e": int(expires_at),
            **({"m": identity.only_model} if identity.only_model is not None else {}),
        },
        separators=(",", ":"),
    )
    payload = _b64(body.encode())
    return f"{PREFIX}{payload}.{_mac(secret, payload)}"


def verify_session_key(key: str, secret: str | None, now: float | None = None) -> SessionIdentity:
    """Return the identity in `key`, or raise InvalidSessionKey (ExpiredSessionKey when
    its expiry has passed; a key without one never verifies)."""
    if not secret:
        raise InvalidSessionKey("this gateway has no session secret")
    if not key.startswith(PREFIX) or key.count(".") != 1:
        raise InvalidSessionKey("not a Polar session key")
    payload, mac = key[len(PREFIX) :].split(".")
    if not hmac.compare_digest(mac, _mac(secret, payload)):
        raise InvalidSessionKey("session key signature does not verify")
    try:
        data = json.loads(_unb64(payload))
        only = data.get("m")
        identity = SessionIdentity(
            str(data["s"]),
            str(data["t"]),
            int(data.get("a", 1)),
            float(data["e"]),
            None if only is None else str(only),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidSessionKey("session key payload is malformed or has no expiry") from exc
    try:
        checked_id(identity.session_id, "session id")
        checked_id(identity.task_id, "task id")
    except InvalidId as exc:  # signed with the secret, yet not a safe id: refused all the same
        raise InvalidSessionKey(f"session key names an {exc}") from None
    assert identity.expires_at is not None
    if (time.time() if now is None else now) >= identity.expires_at:
        raise ExpiredSessionKey(f"session key of {identity.session_id} has expired")
    return identity
