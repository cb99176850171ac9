#!/bin/bash
# reward 1 when every case of /tests/test_slug.py passes on /app/slug.py (run outside /app)
cd /tmp && python3 /tests/test_slug.py
