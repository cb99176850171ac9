"""Where the dev stack's console answers, for the clients of the same data dir.

`polar dev up` records the console's URL in the data dir while the console runs (and `down`
forgets it), so that a task submitted against the dev stack links its Temporal Web UI summary
to the console without POLAR_CONSOLE_PUBLIC_URL. A set `console_public_url` always wins.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

RECORD = Path("run") / "console.url"


def record_console_url(data_dir: Path, url: str) -> None:
    """Note that the dev stack's console of `data_dir` answers at `url`."""
    path = data_dir.resolve() / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(url.rstrip("/") + "\n")


def forget_console_url(data_dir: Path) -> None:
    """The dev stack's console of `data_dir` stopped."""
    with contextlib.suppress(FileNotFoundError):
        (data_dir.resolve() / RECORD).unlink()


def dev_console_url(data_dir: Path) -> str | None:
    """The URL the dev stack of `data_dir` noted for its running console, or None."""
    try:
        url = (data_dir.resolve() / RECORD).read_text().strip()
    except OSError:
        return None
    return url if url.startswith(("http://", "https://")) else None
