#!/bin/bash
# run in the session's workspace, /app: the relative path is on purpose
set -e
cat > slug.py <<'PY'
"""URL slugs."""

import re


def slugify(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
PY
