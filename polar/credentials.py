"""The secrets a deployment must set, refused when weak, and generated per data dir for dev.

Three secrets guard Polar: the session HMAC secret (workers mint keys with it,
gateways verify them: whoever knows it can write into any session), the admin
token (pauses gateways) and the S3 keys (the recorded data and the rewards).
`refuse_weak_secrets` stops a gateway or worker from starting with one that is
missing, built in or a placeholder. The dev stack (`polar dev`) generates its
own once per data dir (`{data_dir}/secrets.json`, mode 0600) and passes them to
every part it starts; other Polar commands with that data dir read them too.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Literal

from polar.settings import Settings

MIN_SECRET_CHARS = 16
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


def weakness(value: str | None, *, required: bool = True) -> str | None:
    """Why `value` is not a usable secret (None when it is, or when it is optional and unset)."""
    if value is None or value == "":
        return "is not set" if required else None
    lowered = value.lower()
    if lowered in KNOWN_PLACEHOLDERS or any(m in lowered for m in PLACEHOLDER_MARKERS):
        return "is a placeholder or built-in value"
    if len(value) < MIN_SECRET_CHARS:
        return f"is shorter than {MIN_SECRET_CHARS} characters"
    return None


def refuse_weak_secrets(settings: Settings, role: Role) -> None:
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


def with_dev_secrets(settings: Settings, *, create: bool = False) -> Settings:
    """`settings` with each secret it leaves unset taken from its data dir's dev secrets
    (generated first when `create`: the dev stack). Set values always win."""
    unset = [f for f in GENERATED_FIELDS if getattr(settings, f) in (None, "")]
    if not unset:
        return settings
    dev = load_dev_secrets(settings.data_dir, create=create)
    missing = {f: dev[f] for f in unset if f in dev}
    if "s3_secret_key" not in missing or "s3_access_key" not in missing:
        # a pair or nothing: a generated secret key with the user's access key signs nothing
        missing.pop("s3_secret_key", None)
        missing.pop("s3_access_key", None)
    return settings.model_copy(update=missing)
