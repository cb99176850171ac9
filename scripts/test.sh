#!/usr/bin/env bash
# The whole test suite, on the real embedded stack (the suite starts its own services).
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .  # the formatter is the style: no `# fmt: skip`
.venv/bin/mypy  # types of polar/, proxy/, workflows/, activities/ (mypy.ini)
NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict --quiet --site-dir build/site  # the docs site; broken links fail
exec .venv/bin/pytest --durations=20 "$@"  # and the 20 slowest tests
