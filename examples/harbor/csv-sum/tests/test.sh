#!/bin/bash
# the expected total is computed here from the rows' rule, never read from the workspace
expected=$(python3 -c 'print(sum((i * 37) % 101 for i in range(40)))')
got=$(tr -d '[:space:]' < /workspace/total.txt 2>/dev/null)
if [ "$got" = "$expected" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
