"""What keeps hostile text text: the template environment, redaction, headers, paths.

Everything the console shows from S3 or Temporal was written by a policy, a harness or a
test: it is escaped by Jinja2's autoescape (on for every template, never turned off),
secrets the console knows of are redacted from every value shown, every response carries
a strict Content-Security-Policy, and links go only to the console's own paths (ids
quoted) and the configured Web UI.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from polar.settings import ConsoleSettings

CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
SESSION_KEY = re.compile(r"pk-[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
"""A minted session key (polar/session_keys.py): `pk-<payload>.<mac>`."""
REDACTED = "[redacted]"
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Characters that reorder the text around them (Trojan Source): shown as their code."""
SECRET_FIELDS = ("s3_access_key", "s3_secret_key", "session_secret", "admin_token")
RAW_PREFIXES = ("sessions/", "tasks/", "audits/")
"""The only keys the raw view serves: Polar's own objects."""


class Redactor:
    """Replaces the secrets of `settings` and any session key in text with `[redacted]`."""

    def __init__(self, settings: ConsoleSettings) -> None:
        values = [getattr(settings, name, None) for name in SECRET_FIELDS]
        secrets = sorted({v for v in values if isinstance(v, str) and len(v) >= 4}, key=len)
        # longest first: one secret inside another goes whole
        parts = [re.escape(v) for v in reversed(secrets)] + [SESSION_KEY.pattern]
        self.pattern = re.compile("|".join(parts))

    def __call__(self, text: str) -> str:
        return self.pattern.sub(REDACTED, text)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where secrets are in `text` (start, end): for text shown in pieces (tokens)."""
        return [m.span() for m in self.pattern.finditer(text)]

    def value(self, value: Any) -> Any:
        """Jinja2's `finalize`: every value a template prints, if it is text: redacted, its
        bidi controls shown as `<U+202E>` (then escaped as any text). Markup is a template's
        own (a macro's output, its values finalized inside it): kept as it is."""
        if not isinstance(value, str) or isinstance(value, Markup):
            return value
        return BIDI_CONTROLS.sub(shown_control, self.pattern.sub(REDACTED, value))


def shown_control(match: re.Match[str]) -> str:
    return f"<U+{ord(match.group()):04X}>"


def console_path(*parts: object) -> str:
    """A path of the console itself: `/` and each part URL-quoted (`/` inside a part too)."""
    return "/" + "/".join(quote(str(p), safe="") for p in parts)


def with_query(path: str, **params: object) -> str:
    """`path` with URL-encoded query parameters (those not None)."""
    kept = {k: str(v) for k, v in params.items() if v is not None}
    return f"{path}?{urlencode(kept)}" if kept else path


def raw_path(key: str, download: bool = False) -> str:
    """The console's raw view of an S3 key (`/raw/...`)."""
    path = "/raw/" + quote(key, safe="/")
    return f"{path}?download=1" if download else path


def raw_key_allowed(key: str) -> bool:
    """Whether the raw view serves `key`: under Polar's prefixes, no empty, `.` or `..` part."""
    parts = key.split("/")
    return key.startswith(RAW_PREFIXES) and not any(p in ("", ".", "..") for p in parts)


def web_ui_link(settings: ConsoleSettings, workflow_id: str, run_id: str | None = None) -> str:
    """The Web UI's page of a workflow (the configured base; ids quoted)."""
    base = settings.temporal_ui_base_url
    namespace = quote(settings.temporal_namespace, safe="")
    link = f"{base}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
    return f"{link}/{quote(run_id, safe='')}/history" if run_id else link


def template_environment(settings: ConsoleSettings, redactor: Redactor) -> Environment:
    """The console's templates: autoescape on for all of them, values redacted."""
    env = Environment(
        loader=PackageLoader("app.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=redactor.value,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        path=console_path,
        query=with_query,
        raw=raw_path,
        web_ui=lambda wid, run_id=None: web_ui_link(settings, wid, run_id),
    )
    env.filters.update(seconds=seconds_text, reward=reward_text)
    return env


def seconds_text(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def reward_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


async def security_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Every response: the CSP, nosniff, no framing, no referrer, no caching."""
    response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    return response
