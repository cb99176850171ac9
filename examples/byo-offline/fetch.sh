#!/usr/bin/env bash
# Step 1 of the offline recipe (docs/harnesses.md, "A PyPI or npm CLI, with no network"),
# on the host, which has a network: download everything the image's build needs, so the
# build itself runs with none.
#
#   examples/byo-offline/fetch.sh        # wheels/, npm/node_modules/ and node, here
#   docker build --network none -t polar/byo-offline:latest examples/byo-offline
#
# `fetch.sh DEST` puts them in DEST instead. PYTHON and NODE name the host's interpreters
# (default: python3 and node on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-$here}
python=${PYTHON:-python3}
mkdir -p "$dest/wheels" "$dest/npm"

# (a) the PyPI CLI: every wheel it installs, for the image's Python (CPython 3.11 on x86-64
#     Linux), whatever the host's Python is. Wheels only: nothing is built, here or there.
"$python" -m pip download --quiet --only-binary=:all: \
  --python-version 3.11 --platform manylinux2014_x86_64 \
  --dest "$dest/wheels" -r "$here/requirements.txt"

# (b) the npm CLI: its node_modules, exactly as the lock file says; no install scripts run
#     (a package that downloads a binary at install would fail in the image anyway)
cp "$here/package.json" "$here/package-lock.json" "$dest/npm/"
(cd "$dest/npm" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)

# (c) Node itself: the host's binary, as infra/images/harness/Dockerfile takes it. It must be
#     a build that needs only libc and libstdc++ (nodejs.org's or NodeSource's); Debian's own
#     nodejs links libnode.so and does not run alone.
node=$(readlink -f "$(command -v "${NODE:-node}")")
cp "$node" "$dest/node"
echo "fetched: $(ls "$dest/wheels" | wc -l) wheels, $(ls "$dest/npm/node_modules" | wc -l) npm packages, node $("$dest/node" --version)"
