#!/usr/bin/env bash
# The docs site's venv (.venv-docs: MkDocs, Material, mkdocstrings; pinned in
# infra/docs/requirements.txt). Idempotent: reinstalled only when the pins change.
# Build the site with `.venv-docs/bin/mkdocs build --strict` (scripts/test.sh does).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
STAMP=.venv-docs/.polar-installed
WANT=$(sha256sum infra/docs/requirements.txt | cut -c1-16)
if [[ -x .venv-docs/bin/mkdocs && "$(cat $STAMP 2>/dev/null)" == "$WANT" ]]; then
  exit 0
fi
echo "setup: installing the docs tools into .venv-docs"
[[ -x .venv-docs/bin/python ]] || "$PY" -m venv .venv-docs
infra/pip-install.sh .venv-docs -q -r infra/docs/requirements.txt
echo "$WANT" > $STAMP
