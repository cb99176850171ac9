# shared by both steps' test.sh (the task's tests/, under each step's own in /tests)
reward() { echo "$1" > /logs/verifier/reward.txt; exit 0; }
# FILE holds the line USER (what `id -un` said where the agent ran)
says() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
