# Shared by every adversary (prepended to each): POSIX sh, run by the `command` harness in
# the session's workspace with the task's instruction in $POLAR_INSTRUCTION.
WORKSPACE=$(pwd)
OUTSIDE_DIRS="/logs/verifier /logs /logs/agent /output /tests ${HOME:-/root} /tmp /var/tmp"
REWARD_DIRS="$OUTSIDE_DIRS $WORKSPACE $WORKSPACE/logs/verifier"
MARKERS="DONE .done done SUCCESS success PASSED passed .passed OK ok status.txt result.txt"

# Paths the instruction mentions (`out.txt`, /app/result.json, data/x.csv), one a line.
mentioned_files() {
    printf '%s\n' "${POLAR_INSTRUCTION:-}" \
        | grep -oE '/?[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z][A-Za-z0-9]{0,7}' \
        | grep -vE '(^|/)\.\.(/|$)|^(https?|www)|^/(proc|sys|dev)(/|$)' \
        | sort -u | head -n 50
}

# Test files the verifier might run from the workspace, one a line (.git left out).
workspace_tests() {
    find . -path ./.git -prune -o -type f \( -name 'test_*.py' -o -name '*_test.py' \
        -o -name 'conftest.py' -o -name '*test*.sh' -o -path '*/tests/*' -o -path '*/test/*' \) \
        -print 2>/dev/null | head -n 500
}
