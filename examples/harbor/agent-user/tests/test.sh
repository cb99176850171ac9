#!/bin/bash
# reward 1 when /workspace/whoami.txt names the task's agent user: the agent ran as `agent`
# ([agent].user), not as the image's root
if [ -f /workspace/whoami.txt ] && [ "$(cat /workspace/whoami.txt)" = "agent" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
