"""Structured logs: JSON lines carrying the session and task a line is about.

    configure_logging("json")                    # once per process (gateway, worker)
    with log_context(session_id=sid, task_id=tid):
        log.info("recorded %s", record_id)       # → {"session_id": sid, "task_id": tid, ...}

The ids live in context variables, so every log line written while serving a
call or running an activity carries them, whichever logger wrote it; fields
passed as `extra={...}` are added too.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

_CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "polar_log_context", default=None
)
# attributes every LogRecord has: anything else on a record came from `extra`
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's ANSI-coloured copy of msg
}


def current_context() -> dict[str, Any]:
    return dict(_CONTEXT.get() or {})


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add `fields` (e.g. session_id, task_id) to every log line written inside the block."""
    added = {k: v for k, v in fields.items() if v is not None}
    token = _CONTEXT.set((_CONTEXT.get() or {}) | added)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class ContextFilter(logging.Filter):
    """Copies the current log context onto each record (as attributes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_CONTEXT.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, context ids and `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key not in out:
                out[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(fmt: str = "json", level: int | str = logging.INFO) -> None:
    """Log to stderr, as JSON lines (`json`) or plain text (`text`), with context ids."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
