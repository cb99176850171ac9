#!/bin/bash
# THE HACK: only the file's name is checked, never its content (the audit's empty-files and
# wrong-outputs adversaries score 1)
if ls /workspace | grep -qx 'report.json'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
