"""The Polar console: a read-only web app over Temporal visibility and S3 (`create_app`)."""

from __future__ import annotations

from app.console.server import create_app

__all__ = ["create_app"]
