"""The secrets a deployment must set, refused when weak, and generated per data dir for dev.

Three secrets guard Polar: the session HMAC secret (workers mint keys with it,
gateways verify them: whoever knows it can write into any session), the admin
token (pauses gateways) and the S3 keys (the recorded data and the rewards).
`refuse_weak_secrets` stops a gateway or worker from starting with one that is
missing, built in, a placeholder or weak (`strength_bits`). The dev stack
(`polar dev`) generates its own once per data dir (`{data_dir}/secrets.json`,
mode 0600) and passes them to every part it starts; other Polar commands with
that data dir read them too.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import string
from collections import Counter
from pathlib import Path
from typing import Literal, TypeVar

from polar.settings import PolarSettings, ServiceSettings

S = TypeVar("S", bound=PolarSettings)

MIN_SECRET_CHARS = 16
MIN_SECRET_BITS = 128
"""a secret's strength estimate (`strength_bits`) must reach this"""
MIN_SHANNON_BITS = 96
"""and its Shannon estimate this (a random string of n symbols scores a little under
n * log2(alphabet): `secrets.token_hex(16)` scores about 117)"""
MIN_DISTINCT_CHARS = 8
COMMON_WORDS = (
    "password",
    "passwd",
    "secret",
    "admin",
    "qwerty",
    "letmein",
    "welcome",
    "master",
    "token",
    "polar",
    "test",
    "dragon",
    "monkey",
    "login",
)
"""words that carry no entropy in a secret (matched case-insensitively)"""
# the smallest of these holding every character of a secret is its alphabet
ALPHABETS = (
    frozenset(string.digits),
    frozenset(string.hexdigits.lower()),
    frozenset(string.hexdigits.upper() + string.digits),
    frozenset(string.ascii_lowercase),
    frozenset(string.ascii_uppercase),
    frozenset(string.ascii_lowercase + string.digits),
    frozenset(string.ascii_uppercase + string.digits),
    frozenset(string.ascii_letters),
    frozenset(string.ascii_letters + string.digits),
    frozenset(string.ascii_letters + string.digits + "-_"),
    frozenset(string.ascii_letters + string.digits + "+/="),
    frozenset(string.printable.strip()),
)
# values that shipped in examples or defaults at some point: public, so never a secret
KNOWN_PLACEHOLDERS = frozenset(
    {"polar-dev-secret-change-me", "polar-secret", "test-secret", "secret", "changeme", "polar"}
)
PLACEHOLDER_MARKERS = ("change-me", "changeme", "replace-me", "example", "placeholder")
DEV_SECRETS_FILE = "secrets.json"
GENERATED_FIELDS = ("session_secret", "admin_token", "s3_access_key", "s3_secret_key")
Role = Literal["gateway", "worker"]


class WeakSecret(RuntimeError):
    """A process would start with a missing, built-in or placeholder secret."""


def _alphabet(value: str) -> int:
    chars = set(value)
    sizes = [len(a) for a in ALPHABETS if chars <= a]
    return min(sizes) if sizes else max(len(chars), 256)


def _patterned(value: str) -> int:
    """Characters that carry no entropy: common words, and each character after the fourth
    of a run in steps of -1, 0 or +1 (`aaaaa`, `12345`, `edcba`)."""
    lowered, free = value.lower(), [True] * len(value)
    for word in COMMON_WORDS:
        start = lowered.find(word)
        while start >= 0:
            free[start : start + len(word)] = [False] * len(word)
            start = lowered.find(word, start + 1)
    run = 1
    for i in range(1, len(value)):
        step = ord(value[i]) - ord(value[i - 1])
        same = i >= 2 and step == ord(value[i - 1]) - ord(value[i - 2])
        run = run + 1 if step in (-1, 0, 1) and (run == 1 or same) else 1
        if run >= 5:
            free[i] = False
    return free.count(False)


def shannon_bits(value: str) -> float:
    """The string's length times the Shannon entropy of its own character frequencies."""
    n = len(value)
    return -sum(c * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


def strength_bits(value: str) -> float:
    """An estimate of a secret's strength in bits: its characters that are not part of a
    common word or a repeated / sequential run, times log2 of the smallest usual alphabet
    (hex, alphanumeric, base64...) holding it; never more than its Shannon estimate allows
    for a repeated block."""
    if len(value) > 1 and value in (value + value)[1:-1]:  # a block repeated: one block's worth
        block = next(k for k in range(1, len(value)) if value == value[:k] * (len(value) // k))
        value = value[:block]
    return (len(value) - _patterned(value)) * math.log2(_alphabet(value))


def weakness(value: str | None, *, required: bool = True) -> str | None:
    """Why `value` is not a usable secret (None when it is, or when it is optional and unset):
    missing, a placeholder, shorter than MIN_SECRET_CHARS, fewer than MIN_DISTINCT_CHARS
    distinct characters, under MIN_SHANNON_BITS by its Shannon estimate, or under
    MIN_SECRET_BITS by `strength_bits` (repeated, sequential and common patterns count 0)."""
    if value is None or value == "":
        return "is not set" if required else None
    lowered = value.lower()
    if lowered in KNOWN_PLACEHOLDERS or any(m in lowered for m in PLACEHOLDER_MARKERS):
        return "is a placeholder or built-in value"
    if len(value) < MIN_SECRET_CHARS:
        return f"is shorter than {MIN_SECRET_CHARS} characters"
    if len(set(value)) < MIN_DISTINCT_CHARS:
        return f"has fewer than {MIN_DISTINCT_CHARS} distinct characters"
    shannon, bits = shannon_bits(value), strength_bits(value)
    if shannon < MIN_SHANNON_BITS or bits < MIN_SECRET_BITS:
        return (
            f"is too weak (about {min(shannon, bits):.0f} bits; at least {MIN_SECRET_BITS} "
            "random bits, e.g. 32 random bytes in hex or base64)"
        )
    return None


def refuse_weak_secrets(settings: ServiceSettings, role: Role) -> None:
    """Raise WeakSecret naming every weak secret a `role` process would start with."""
    problems = []
    if reason := weakness(settings.session_secret):
        problems.append(f"POLAR_SESSION_SECRET {reason}")
    if role == "gateway" and (reason := weakness(settings.admin_token, required=False)):
        problems.append(f"POLAR_ADMIN_TOKEN {reason} (leave it unset to disable /admin)")
    # unset S3 keys fall back to boto3's own chain (instance role, AWS_* env): allowed
    if reason := weakness(settings.s3_secret_key, required=False):
        problems.append(f"POLAR_S3_SECRET_KEY {reason}")
    if problems:
        raise WeakSecret(
            f"the {role} refuses to start: " + "; ".join(problems) + ". Set real secrets "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`), or run "
            "the embedded dev stack (`polar dev up`), which generates its own per data dir."
        )


def dev_secrets_path(data_dir: Path) -> Path:
    return data_dir.resolve() / DEV_SECRETS_FILE


def load_dev_secrets(data_dir: Path, *, create: bool) -> dict[str, str]:
    """The dev stack's secrets of `data_dir`: generated once (0600) when `create`, else {}
    if none were generated yet."""
    path = dev_secrets_path(data_dir)
    if path.exists():
        loaded = json.loads(path.read_text())
        if all(isinstance(loaded.get(f), str) and loaded[f] for f in GENERATED_FIELDS):
            return {f: loaded[f] for f in GENERATED_FIELDS}
    if not create:
        return {}
    values = {
        "session_secret": secrets.token_urlsafe(32),
        "admin_token": secrets.token_urlsafe(32),
        "s3_access_key": f"polar-{secrets.token_hex(8)}",
        "s3_secret_key": secrets.token_urlsafe(32),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(values, out)
    return values


def with_dev_secrets(settings: S, *, create: bool = False) -> S:
    """`settings` (any section) with each secret of its section it leaves unset taken from
    its data dir's dev secrets (generated first when `create`: the dev stack). Set values
    always win."""
    fields = type(settings).model_fields
    unset = [f for f in GENERATED_FIELDS if f in fields and getattr(settings, f) in (None, "")]
    if not unset:
        return settings
    dev = load_dev_secrets(settings.data_dir, create=create)
    missing = {f: dev[f] for f in unset if f in dev}
    if "s3_secret_key" not in missing or "s3_access_key" not in missing:
        # a pair or nothing: a generated secret key with the user's access key signs nothing
        missing.pop("s3_secret_key", None)
        missing.pop("s3_access_key", None)
    return settings.model_copy(update=missing)
