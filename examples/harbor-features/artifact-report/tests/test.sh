#!/bin/bash
# The report is not in the workspace: it reaches this (fresh) container only as a collected
# artifact, at its source path; the collect hook's snapshot comes the same way.
expected=$(printf 'count: 3\ncherry\nbanana\napple')
report=$(cat /srv/report/summary.txt 2>/dev/null)
lines=$(cat /var/snapshot/lines.txt 2>/dev/null)
if [ "$report" = "$expected" ] && [ "$lines" = "4" ] && [ ! -e /var/snapshot/junk.tmp ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
