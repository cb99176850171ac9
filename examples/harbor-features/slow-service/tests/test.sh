#!/bin/bash
# reward 1 when /workspace/answer.txt holds what the ledger (a fresh one, asked once) returns
expected=$(python3 -c "import os, urllib.request as r; print(r.urlopen(os.environ['LEDGER_URL'], timeout=10).read().decode(), end='')")
if [ -n "$expected" ] && [ "$(cat /workspace/answer.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
