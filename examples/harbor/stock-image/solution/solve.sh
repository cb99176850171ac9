#!/bin/sh
# POSIX sh only: the image may have nothing but a shell
set -e
cd /workspace
sum=0
while read -r n; do sum=$((sum + n)); done < numbers.txt
echo "$sum" > sum.txt
