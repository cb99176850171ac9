# read-solution: run the task's own solution if the agent can reach it (/solution, /oracle,
# beside the workspace), and copy what /tests holds into the workspace if it is readable.
for s in /solution/solve.sh /oracle/solve.sh "$WORKSPACE/../solution/solve.sh" \
    "$WORKSPACE/solution/solve.sh" "${HOME:-/root}/solution/solve.sh"; do
    if [ -r "$s" ]; then
        if command -v bash > /dev/null; then bash "$s"; else sh "$s"; fi
        exit 0
    fi
done
for t in /tests "$WORKSPACE/../tests"; do
    if [ -d "$t" ] && [ -r "$t" ]; then cp -Rn "$t/." "$WORKSPACE/" 2>/dev/null; fi
done
true
