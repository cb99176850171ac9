#!/usr/bin/env bash
# `pip install` into a venv, through uv where it can:
#
#   infra/pip-install.sh VENV [PIP INSTALL ARGS...]   # e.g. .venv -q -e '.[server,dev]'
#
# uv (pinned, from PyPI, installed once into .polar/tools/uv) resolves and installs several
# times faster than pip, which matters most on a fresh 2-core machine. It is handed pip's own
# configuration (`pip config list`, files and PIP_* variables alike: find-links, index URLs,
# constraints, certificate), so both install from the same places under the same caps, with
# pip's rule of taking the best version across all indexes. Where uv cannot be had or fails,
# pip installs as before. POLAR_PIP_ONLY=1 skips uv.
set -euo pipefail
VENV=$1
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
UV_PIN="uv==0.13.9"
UV_VENV=$ROOT/.polar/tools/uv
UV=$UV_VENV/bin/uv

# pip's own noise about this machine's find-links folders is dropped; its exit code is kept
pipq() { { "$@" 2>&1; } | { grep -vE "is ignored: it is neither a file nor a directory" || true; }; }

with_pip() { pipq "$VENV/bin/python" -m pip install "$@"; }

ensure_uv() {
  [[ -x $UV ]] && return 0
  mkdir -p "$ROOT/.polar/tools"
  (
    flock 9  # setup's steps run side by side: one installs uv, the others wait for it
    [[ -x $UV ]] && exit 0
    rm -rf "$UV_VENV"
    "$VENV/bin/python" -m venv "$UV_VENV" && pipq "$UV_VENV/bin/pip" install -q "$UV_PIN"
  ) 9>"$ROOT/.polar/tools/uv.lock"
  [[ -x $UV ]]
}

# pip's configuration as uv arguments (missing local folders and files left out, as pip
# ignores them)
uv_args() {
  local line key value word
  while IFS= read -r line; do
    [[ $line =~ ^[^.]*\.([a-z-]+)=\'(.*)\'$ ]] || continue
    key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
    for word in $value; do
      case $key in
        find-links) [[ $word != /* || -d $word ]] && echo "--find-links=$word" ;;
        index-url) echo "--index-url=$word" ;;
        extra-index-url) [[ $word != file://* || -d ${word#file://} ]] && echo "--extra-index-url=$word" ;;
        constraint) [[ -f $word ]] && echo "--constraint=$word" ;;
        cert) echo "--cert=$word" ;;
      esac
    done
  done < <("$VENV/bin/python" -m pip config list 2>/dev/null)
}

if [[ ${POLAR_PIP_ONLY:-} != 1 ]] && ensure_uv; then
  args=() cert=""
  while IFS= read -r arg; do
    if [[ $arg == --cert=* ]]; then cert=${arg#--cert=}; else args+=("$arg"); fi
  done < <(uv_args | awk '!seen[$0]++')
  [[ -n $cert ]] && export SSL_CERT_FILE=$cert  # pip's certificate bundle, for uv too
  if "$UV" pip install --python "$VENV/bin/python" --index-strategy unsafe-best-match \
      "${args[@]}" "$@"; then
    exit 0
  fi
  echo "pip-install: uv failed for $VENV; installing with pip" >&2
fi
with_pip "$@"
