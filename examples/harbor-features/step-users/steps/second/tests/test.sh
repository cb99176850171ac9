#!/bin/bash
# step "second": reward 1 when second.txt says the step's own agent user, bob, and
# first.txt still says alice
. /tests/users.sh
if says /workspace/second.txt bob && says /workspace/first.txt alice; then
  reward 1
else
  reward 0
fi
