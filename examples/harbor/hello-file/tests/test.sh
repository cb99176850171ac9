#!/bin/bash
# reward 1 when /workspace/hello.txt holds exactly "Hello, world!" (one line)
if [ -f /workspace/hello.txt ] && [ "$(cat /workspace/hello.txt)" = "Hello, world!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
