#!/usr/bin/env bash
# The whole test suite, on the real embedded stack (the suite starts its own services), lane by
# lane: tests/unit (no service), tests/integration (Temporal and S3), tests/system (vLLM,
# engines, harness CLIs, multi-host, trainers). Each lane's count and time are printed, then the
# total. Arguments go to every pytest run (`bash scripts/test.sh -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .  # the formatter is the style: no `# fmt: skip`
.venv/bin/mypy  # types of polar/, proxy/, workflows/, activities/ (mypy.ini)
NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict --quiet --site-dir build/site  # the docs site; broken links fail
reports=$(mktemp -d)
status=0
# Each lane runs on POLAR_TEST_WORKERS pytest-xdist workers (default 2), a test file at a time
# each (`--dist loadfile`: a module's stacks stay in one process); a worker has its own stack,
# ports, run dir and sandbox uids (tests/conftest.py). Most of the system lane waits on
# services, sessions and timeouts, so two workers overlap those waits on two cores.
workers=${POLAR_TEST_WORKERS:-2}
for lane in unit integration system; do
  started=$SECONDS
  .venv/bin/pytest "tests/$lane" -n "$workers" --dist loadfile --durations=10 \
    --junitxml="$reports/$lane.xml" "$@" || status=$?
  echo "lane $lane: $((SECONDS - started)) s"
done
.venv/bin/python scripts/lane_summary.py "$reports"/{unit,integration,system}.xml
exit $status
