#!/usr/bin/env bash
# The main job: install what is missing, start the embedded stack, roll out the demo task.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
exec .venv/bin/polar demo "$@"
