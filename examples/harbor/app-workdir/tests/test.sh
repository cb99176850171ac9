#!/bin/bash
# reward 1 when every case of /tests/test_slug.py passes on /app/slug.py (run outside /app).
# test.sh runs as root; test_slug.py runs slug.py as `nobody` in a child process, which
# cannot write /logs/verifier (root's), and judges its answers (docs/harbor.md)
cd /tmp && python3 -I /tests/test_slug.py
