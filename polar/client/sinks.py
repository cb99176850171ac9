"""Where `polar export` writes rows: one at a time, never a whole file in memory.

JSON lines as they come (`JsonlSink`), Parquet in row groups (`ParquetSink`), a `datasets`
Arrow file in batches (`ArrowSink`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

ROW_GROUP = 256
"""Rows per Parquet row group: what a Parquet writer holds in memory at once."""


class RowSink(Protocol):
    """Where rows go, one at a time."""

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """JSON lines, written as they come (floats as Python repr's them: exact)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        self._file = path.open("w")

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.rows += 1

    def close(self) -> None:
        self._file.close()


class ParquetSink:
    """A Parquet file written in row groups of `row_group` rows (at most that many held)."""

    def __init__(self, path: Path, schema: Any, row_group: int = ROW_GROUP) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.rows = 0
        self._schema = schema
        self._row_group = row_group
        self._pending: list[dict[str, Any]] = []
        self._writer = pq.ParquetWriter(str(path), schema)

    def write(self, row: dict[str, Any]) -> None:
        self._pending.append(row)
        self.rows += 1
        if len(self._pending) >= self._row_group:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._pending:
            table = pa.Table.from_pylist(self._pending, schema=self._schema)
            self._writer.write_table(table, row_group_size=self._row_group)
            self._pending = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


class ArrowSink:
    """A `datasets` Arrow file written in batches (`datasets.arrow_writer.ArrowWriter`)."""

    def __init__(self, path: Path, features: Any, batch: int = ROW_GROUP) -> None:
        from datasets.arrow_writer import ArrowWriter

        self.path = path
        self.rows = 0
        self._writer = ArrowWriter(features=features, path=str(path), writer_batch_size=batch)

    def write(self, row: dict[str, Any]) -> None:
        self._writer.write(row)
        self.rows += 1

    def close(self) -> None:
        self._writer.finalize()
        self._writer.close()
