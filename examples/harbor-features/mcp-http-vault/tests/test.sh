#!/bin/bash
# reward 1 when /workspace/code.txt holds exactly the vault service's code for `orion`
if [ -f /workspace/code.txt ] && [ "$(cat /workspace/code.txt)" = "VAULT-F6FAF1DD5D" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
