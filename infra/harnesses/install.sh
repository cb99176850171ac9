#!/usr/bin/env bash
# Install the four real harness CLIs (pinned in package-lock.json) into infra/harnesses/node_modules.
# Idempotent and cached: `npm ci` runs only when the lock file, this script or Node's major
# version changed since the last successful install. Needs Node >= 20 and npm; reaches only
# the npm registry.
# Usage: infra/harnesses/install.sh [--force]
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "harnesses: node and npm are needed (Node >= 20); skipping the harness CLIs" >&2
  exit 0
fi

STAMP=node_modules/.polar-installed
WANT="$(cat package-lock.json install.sh | sha256sum | cut -c1-16) node-$(node -p 'process.versions.node.split(".")[0]')"
BINS=(codex claude qwen pi)

installed() {
  [[ "$(cat "$STAMP" 2>/dev/null)" == "$WANT" ]] || return 1
  for b in "${BINS[@]}"; do [[ -x node_modules/.bin/$b ]] || return 1; done
}

if [[ "${1:-}" != "--force" ]] && installed; then
  exit 0
fi

echo "harnesses: installing codex, claude, qwen and pi with npm ci (~1.2 GB, a minute or two)"
# Claude Code and Qwen Code declare node >= 22 but run on 20 (checked by tests/system/test_harness_clis.py):
# the engine warnings are expected noise. Claude Code's postinstall links its native binary.
npm ci --no-audit --no-fund --loglevel=error 2>&1 | { grep -v "EBADENGINE" || true; }
# @qwen-code/qwen-code 0.24.4 ships its vendored ripgrep without the exec bit (spawn EACCES,
# then a slower built-in grep): restore it
chmod +x node_modules/@qwen-code/qwen-code/vendor/ripgrep/*/rg 2>/dev/null || true
for b in "${BINS[@]}"; do
  if ! node_modules/.bin/$b --version >/dev/null 2>&1; then
    echo "harnesses: $b does not run after install" >&2
    exit 1
  fi
done
echo "$WANT" > "$STAMP"
echo "harnesses: $(for b in "${BINS[@]}"; do printf '%s %s; ' "$b" "$(node_modules/.bin/$b --version 2>&1 | head -1)"; done)"
