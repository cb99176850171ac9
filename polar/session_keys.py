"""Per-session API keys that cannot be forged.

A key is `pk-<payload>.<mac>`: the payload names the session, task and
activity attempt; the mac is an HMAC-SHA256 over it with the secret the
workers (which mint keys) and the gateways (which verify them) share. The
gateway needs no registry, and a harness cannot write into another session.
The ids a key names are checked (`polar.models.checked_id`) when it is minted
and when it is verified: a key never names a path outside its session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

from polar.models import InvalidId, checked_id

PREFIX = "pk-"


class InvalidSessionKey(ValueError):
    """The key is malformed or its signature does not verify."""


@dataclass(frozen=True)
class SessionIdentity:
    session_id: str
    task_id: str
    attempt: int = 1


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def mint_session_key(identity: SessionIdentity, secret: str) -> str:
    """Sign a session identity into an API key a harness can send as its key (InvalidId for
    an unsafe session or task id)."""
    checked_id(identity.session_id, "session id")
    checked_id(identity.task_id, "task id")
    body = json.dumps(
        {"s": identity.session_id, "t": identity.task_id, "a": identity.attempt},
        separators=(",", ":"),
    )
    payload = _b64(body.encode())
    return f"{PREFIX}{payload}.{_mac(secret, payload)}"


def verify_session_key(key: str, secret: str) -> SessionIdentity:
    """Return the identity in `key`, or raise InvalidSessionKey."""
    if not key.startswith(PREFIX) or key.count(".") != 1:
        raise InvalidSessionKey("not a Polar session key")
    payload, mac = key[len(PREFIX) :].split(".")
    if not hmac.compare_digest(mac, _mac(secret, payload)):
        raise InvalidSessionKey("session key signature does not verify")
    try:
        data = json.loads(_unb64(payload))
        identity = SessionIdentity(str(data["s"]), str(data["t"]), int(data.get("a", 1)))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidSessionKey("session key payload is malformed") from exc
    try:
        checked_id(identity.session_id, "session id")
        checked_id(identity.task_id, "task id")
    except InvalidId as exc:  # signed with the secret, yet not a safe id: refused all the same
        raise InvalidSessionKey(f"session key names an {exc}") from None
    return identity
