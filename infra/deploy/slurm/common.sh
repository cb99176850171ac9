# Sourced by Polar's sbatch templates: the site's settings, and the rendezvous dir.
# shellcheck shell=bash
if [[ -n "${POLAR_SLURM_ENV:-}" ]]; then
  set -a
  # shellcheck disable=SC1090
  source "$POLAR_SLURM_ENV"
  set +a
fi
POLAR_CMD=${POLAR_CMD:-polar}

# wait_for_file FILE SECONDS: until FILE exists and is not empty (another job writes it)
wait_for_file() {
  local file=$1 left=$2
  until [[ -s $file ]]; do
    (( left-- > 0 )) || { echo "polar: $file did not appear" >&2; return 1; }
    sleep 1
  done
}

# run_until_term CMD...: run CMD in the background; SIGTERM/SIGINT to this shell (Slurm's
# --signal=B:TERM@N before the time limit, `scancel --batch --signal=TERM`) goes on to it, and
# the shell waits for it to leave (Polar's worker: stops polling, lets running stages finish
# for POLAR_SHUTDOWN_GRACE_S, removes this node's runtimes, exits)
run_until_term() {
  "$@" &
  local pid=$!
  trap 'kill -TERM "$pid" 2>/dev/null' TERM INT
  local rc=0
  wait "$pid" || rc=$?
  while kill -0 "$pid" 2>/dev/null; do  # woken by the trap: wait for it to exit
    rc=0
    wait "$pid" || rc=$?
  done
  trap - TERM INT
  return "$rc"
}
