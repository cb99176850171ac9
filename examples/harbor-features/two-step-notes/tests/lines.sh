# shared by both steps' test.sh (the task's tests/, under each step's own in /tests)
reward() { echo "$1" > /logs/verifier/reward.txt; exit 0; }
notes_are() { [ -f /workspace/notes.txt ] && [ "$(cat /workspace/notes.txt)" = "$1" ]; }
