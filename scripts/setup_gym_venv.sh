#!/usr/bin/env bash
# .venv-gym: NeMo Gym 0.4.0 (Python 3.12) with Polar's SDK, for polar/trainers/nemo_gym/ and
# tests/system/test_nemo_gym.py. Idempotent: reinstalls only when the pins change (a stamp file).
#
#   bash scripts/setup_gym_venv.sh        # prints the venv's python when ready
#
# Gym starts each server in `<uv_venv_dir>/<server type>/<server dir>/.venv`; with
# `+skip_venv_if_present=true +uv_venv_dir=$PWD/.venv-gym/gym-servers` it sources the links made
# here to this venv instead of building one per server with uv.
#
# nemo-gym needs Python >= 3.12 (0.4.0 is the newest release that installs on 3.12; later
# ones want 3.13.14), so this venv cannot share .venv's packages the way .venv-trainers does.
# nemo-gym is installed with its own dependencies (ray, mlflow, wandb, ...: its server classes
# import them), held to infra/gym-constraints.txt. Polar itself goes in without dependencies
# (a .pth to this checkout), plus only what `polar.client.sdk` imports, at .venv's versions: the Gym
# servers submit sessions and read traces with Polar's own SDK, over Temporal and S3.
set -euo pipefail
cd "$(dirname "$0")/.."
# one install at a time: scripts/test.sh starts this in the background and the tests call it too
mkdir -p .polar/locks
exec 9>.polar/locks/gym-venv.lock
flock 9
ROOT=$PWD

PY=${POLAR_GYM_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python}
GYM_PIN="nemo-gym==0.4.0"
SDK_PINS="temporalio==1.35.0 nexus-rpc==1.4.0 boto3==1.44.8 obstore==0.12.1 orjson==3.13.0 \
pydantic-settings==2.16.3 python-dotenv==1.2.4 zstandard==0.25.0"
VENV=.venv-gym
CONSTRAINTS=infra/gym-constraints.txt

if [[ ! -x $PY ]]; then
  PY=$(command -v python3.12 || true)
  [[ -n $PY ]] || { echo "setup_gym_venv: no Python 3.12 (set POLAR_GYM_PYTHON)" >&2; exit 1; }
fi

STAMP=$VENV/.polar-installed
WANT="$GYM_PIN $SDK_PINS $(sha256sum "$CONSTRAINTS" | cut -c1-16)"
if [[ ! -x $VENV/bin/python || "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]]; then
  started=$SECONDS
  echo "setup_gym_venv: installing $GYM_PIN and Polar's SDK into $VENV" >&2
  [[ -x $VENV/bin/python ]] || "$PY" -m venv "$VENV"
  # shellcheck disable=SC2086  # the pins are words
  infra/pip-install.sh "$VENV" -q -c "$CONSTRAINTS" "$GYM_PIN" $SDK_PINS >&2
  site=$($VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$ROOT" > "$site/polar_checkout.pth"
  echo "$WANT" > "$STAMP"
  echo "setup_gym_venv: installed in $((SECONDS - started)) s" >&2
fi
for server in responses_api_agents/polar_agent resources_servers/polar; do
  mkdir -p "$VENV/gym-servers/$server"
  ln -sfn "$ROOT/$VENV" "$VENV/gym-servers/$server/.venv"
done
$VENV/bin/python -c 'import nemo_gym, polar.trainers.nemo_gym.servers' >&2
echo "$ROOT/$VENV/bin/python"
