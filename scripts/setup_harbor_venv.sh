#!/usr/bin/env bash
# .venv-harbor: Harbor 0.25.0 (Python 3.12), the task format's own loader, for
# tests/integration/test_harbor_agreement.py (Polar's loader, polar/tasks/harbor.py, compared
# field by field with Harbor's task model on every bundled task). Idempotent: reinstalls only
# when the pin changes (a stamp file).
#
#   bash scripts/setup_harbor_venv.sh        # prints the venv's python when ready
#
# harbor needs Python >= 3.12, so it cannot live in .venv (3.11). Nothing of Polar goes in:
# the test runs harbor's model there and compares its JSON with Polar's loader in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PY=${POLAR_HARBOR_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python}
PIN="harbor==0.25.0"
VENV=.venv-harbor

if [[ ! -x $PY ]]; then
  PY=$(command -v python3.12 || true)
  [[ -n $PY ]] || { echo "setup_harbor_venv: no Python 3.12 (set POLAR_HARBOR_PYTHON)" >&2; exit 1; }
fi

STAMP=$VENV/.polar-installed
if [[ ! -x $VENV/bin/python || "$(cat "$STAMP" 2>/dev/null)" != "$PIN" ]]; then
  started=$SECONDS
  echo "setup_harbor_venv: installing $PIN into $VENV" >&2
  [[ -x $VENV/bin/python ]] || "$PY" -m venv "$VENV"
  infra/pip-install.sh "$VENV" -q "$PIN" >&2
  echo "$PIN" > "$STAMP"
  echo "setup_harbor_venv: installed in $((SECONDS - started)) s" >&2
fi
$VENV/bin/python -c 'import harbor.models.task.task' >&2
echo "$ROOT/$VENV/bin/python"
