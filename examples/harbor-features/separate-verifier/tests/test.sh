#!/bin/bash
# Runs in the verifier's own image, a separate container: the agent's answer reaches it only
# as a collected artifact, put back at its path; nothing else of the agent's workspace does.
expected=$(cat /opt/grader/expected.txt)
# A naive verifier that trusts a settings file from the workspace: in Harbor's separate mode
# the workspace never reaches it, so an agent that plants one gains nothing.
if [ -f /workspace/grader.env ]; then . /workspace/grader.env; fi
answer=$(cat /workspace/answer.txt 2>/dev/null)
if [ "$answer" = "$expected" ] || [ "${PASS_ANYWAY:-}" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
