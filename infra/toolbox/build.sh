#!/usr/bin/env bash
# Build Polar's static helper (infra/toolbox/polar-helper.c: `setsid -w` and the gateway
# forwarder of every session container, activities/runtimes/toolbox.py) into
# /usr/local/libexec/polar/polar-helper (or $1), root's and read-only; cached: rebuilt only
# when the source changed (the source's hash is kept beside it).
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-/usr/local/libexec/polar/polar-helper}
want=$(sha256sum polar-helper.c | cut -c1-16)
if [[ -x $out && "$(cat "$out.src" 2>/dev/null)" == "$want" ]]; then exit 0; fi
if command -v musl-gcc >/dev/null; then cc=(musl-gcc); else cc=(gcc); fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
"${cc[@]}" -static -O2 -Wall -Werror -pthread -o "$tmp" polar-helper.c
strip "$tmp" 2>/dev/null || true
chmod 0555 "$tmp"
mv -f "$tmp" "$out"
echo "$want" > "$out.src"
echo "toolbox: built $out with ${cc[0]}"
