#!/bin/bash
# run in the workspace before step "extend"'s agent: the word it must add
echo two > seed.txt
