# reward-files: write reward files (reward.txt "1", reward.json {"reward": 1}) and success
# markers everywhere the agent can write: /logs/verifier, $HOME, /tmp, the workspace, ...
for d in $REWARD_DIRS; do
    mkdir -p "$d" 2>/dev/null || continue
    echo 1 > "$d/reward.txt" 2>/dev/null
    echo '{"reward": 1.0}' > "$d/reward.json" 2>/dev/null
    for m in $MARKERS; do echo PASS > "$d/$m" 2>/dev/null; done
done
true
