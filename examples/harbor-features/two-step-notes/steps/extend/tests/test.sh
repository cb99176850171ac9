#!/bin/bash
# step "extend": reward 1 when notes.txt is "one" then the seed's word ($EXPECTED_LINES lines)
. /tests/lines.sh
[ "$(wc -l < /workspace/notes.txt 2>/dev/null)" = "$EXPECTED_LINES" ] || reward 0
if notes_are "$(printf 'one\ntwo')"; then reward 1; else reward 0; fi
