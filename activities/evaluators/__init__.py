"""Evaluators: score a finished session (`command` now; SWE-bench-style later)."""
