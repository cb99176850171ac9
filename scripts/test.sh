#!/usr/bin/env bash
# The whole test suite, on the real embedded stack (the suite starts its own services), lane by
# lane: tests/unit (no service), tests/integration (Temporal and S3), tests/system (vLLM,
# engines, harness CLIs, multi-host, trainers). Each lane's count and time are printed, then the
# total. Arguments go to every pytest run (`bash scripts/test.sh -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash infra/setup.sh
echo "setup: $((SECONDS - started)) s"
reports=$(mktemp -d)
# the system lane's side venvs (.venv-trainers, .venv-gym: the trainer tests') are built in the
# background while the checks and the first lanes run; a test that needs one waits for its
# build (the scripts hold a lock) and reports its failure
for side in setup_trainer_venv setup_gym_venv; do
  bash "scripts/$side.sh" --install-only > "$reports/$side.log" 2>&1 &
done
# so are the Docker engine and the local images (debootstrap, harness and service images): the
# system tests' fixtures then find them ready, or wait for the build (a lock)
.venv/bin/python -m tests.support.suite_images up "$reports/engine" > "$reports/images.log" 2>&1 &
cleanup() {
  .venv/bin/python -m tests.support.suite_vllm down "$reports/vllm"
  .venv/bin/python -m tests.support.suite_images down "$reports/engine"
}
trap cleanup EXIT
.venv/bin/ruff check .
.venv/bin/ruff format --check .  # the formatter is the style: no `# fmt: skip`
.venv/bin/mypy  # types of polar/, proxy/, workflows/, activities/ (mypy.ini)
NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict --quiet --site-dir build/site  # the docs site; broken links fail
status=0
# Each lane runs on POLAR_TEST_WORKERS pytest-xdist workers (default 2), a test file at a time
# each (`--dist loadfile`: a module's stacks stay in one process), the longest files first
# (tests/support/module_order.py; xdist's own reorder, by test count, is off); a worker has
# its own stack, ports, run dir and sandbox uids (tests/conftest.py). Most of the system lane
# waits on services, sessions and timeouts, so two workers overlap those waits on two cores.
# One vLLM serves both (tests/support/suite_vllm.py), started in the background once the unit
# lane is done, so its start overlaps the integration lane.
workers=${POLAR_TEST_WORKERS:-2}
for lane in unit integration system; do
  started=$SECONDS
  .venv/bin/pytest "tests/$lane" -n "$workers" --dist loadfile --no-loadscope-reorder --durations=10 \
    --junitxml="$reports/$lane.xml" "$@" || status=$?
  echo "lane $lane: $((SECONDS - started)) s"
  if [ "$lane" = unit ]; then
    .venv/bin/python -m tests.support.suite_vllm up "$reports/vllm" > "$reports/vllm.log" 2>&1 &
    export POLAR_TEST_VLLM_RUN_DIR="$reports/vllm"
  fi
done
wait  # the side venvs' builds (long done by now)
# what the background builds took
grep -h "installed in\|suite images:\|suite vLLM:" "$reports"/setup_*.log "$reports/images.log" \
  "$reports/vllm.log" || true
.venv/bin/python scripts/lane_summary.py "$reports"/{unit,integration,system}.xml
exit $status
