#!/bin/bash
# reward 1 when /workspace/stamp.txt holds exactly the stamp the skill describes for version 7
if [ -f /workspace/stamp.txt ] && [ "$(cat /workspace/stamp.txt)" = "ZQ-7:sealed" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
