"""Where the suite's fixed files live, for tests in any lane folder."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout."""
TESTS = REPO / "tests"
HISTORIES = TESTS / "histories"
"""Stored workflow histories that CI replays (tests/integration/test_replay.py)."""
TEST_DATA = TESTS / "data"
