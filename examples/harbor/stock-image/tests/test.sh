#!/bin/bash
# Harbor runs `bash /tests/test.sh`: on an image without bash, Polar's toolbox gives one.
# The expected sum comes from the tests' own copy of the numbers (never the workspace's);
# bash builtins only.
expected=0
while read -r n; do (( expected += n )); done < /tests/numbers.txt
got=""
if [[ -f /workspace/sum.txt && ! -L /workspace/sum.txt ]]; then
  read -r got < /workspace/sum.txt || true
fi
if [[ "$got" == "$expected" ]]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "expected $expected, got '${got}'"
  echo 0 > /logs/verifier/reward.txt
fi
