#!/bin/bash
set -eu
total=0
while read -r n; do total=$((total + n)); done < numbers.txt
echo "$total" > /workspace/answer.txt
