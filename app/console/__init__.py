"""The Polar console: a read-only web app over Temporal visibility and S3 (`create_app`).

`create_app` is imported on first use: the CLI's session commands read this package's
readers and views without loading the web app (FastAPI) at every `polar` start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.console.server import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from app.console.server import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
