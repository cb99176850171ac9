#!/bin/bash
# step "first": reward 1 when first.txt says the task's agent user, alice
. /tests/users.sh
if says /workspace/first.txt alice; then reward 1; else reward 0; fi
