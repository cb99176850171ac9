"""A session's traces as a download in each text export format (`polar export`'s own writers,
polar/client/export.py): the RL rows, the SFT view, TRL's and slime's rows. Written for one
session into a temporary folder, read back, and redacted like every console text."""

from __future__ import annotations

import tempfile
from pathlib import Path

from polar.client.export import FORMATS, ExportFormat, SessionRecords, export_traces
from polar.storage import Storage

DOWNLOADS = (ExportFormat.JSONL, ExportFormat.SFT, ExportFormat.TRL, ExportFormat.SLIME)
"""The formats offered (text ones: the console redacts what it serves)."""


def session_export(storage: Storage, traces_key: str, fmt: ExportFormat) -> tuple[str, str]:
    """One session's traces (`traces_key`, its rewards sidecar joined) written in `fmt`: the
    file's name and text."""
    if fmt not in DOWNLOADS:
        raise ValueError(
            f"{fmt.value}: not a download (choose from {[f.value for f in DOWNLOADS]})"
        )
    with tempfile.TemporaryDirectory(prefix="polar-console-export-") as folder:
        out = Path(folder)
        export_traces(
            storage.iter_traces(traces_key),
            out,
            [fmt],
            records=SessionRecords(storage),
            source={"traces": traces_key},
        )
        name = FORMATS[fmt].file
        return name, (out / name).read_text()
