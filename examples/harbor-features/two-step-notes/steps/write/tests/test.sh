#!/bin/bash
# step "write": reward 1 when /workspace/notes.txt is exactly the line "one"
. /tests/lines.sh
if notes_are "one"; then reward 1; else reward 0; fi
