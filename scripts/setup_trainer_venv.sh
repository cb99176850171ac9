#!/usr/bin/env bash
# .venv-trainers: the trainers' own data code (TRL, verl), pinned, for
# scripts/check_trainer_layouts.py, then the check itself.
#
#   bash scripts/setup_trainer_venv.sh                 # check a sample export (tests/integration/test_export.py's)
#   bash scripts/setup_trainer_venv.sh EXPORT_DIR [ARGS...]   # check a `polar export --format all` dir
#   bash scripts/setup_trainer_venv.sh --install-only  # only build the venv (tests/system/)
#
# The venv reads .venv's packages (Polar, CPU torch 2.13.0, transformers, datasets, pyarrow) through
# a .pth, and a constraint keeps torch at 2.13.0 so nothing pulls a CUDA build. On top of that:
# trl (with its accelerate), and verl with only what its agent loop module imports (ray, tensordict,
# hydra-core, codetiming, cachetools). verl itself is installed --no-deps: its full requirements would add
# wandb, tensorboard, peft and ray[default], and would move transformers below 5.11, none of which
# `AgentLoopOutput` needs. slime is not on PyPI (PyPI's `slime` is an unrelated project), so the
# check tests slime.jsonl against slime's documented `Sample` schema (THUDM/slime 624b824a), or with
# `Sample.from_dict` when a slime checkout is on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
# one install at a time: scripts/test.sh starts this in the background and the tests call it too
mkdir -p .polar/locks
exec 9>.polar/locks/trainer-venv.lock
flock 9

# tensordict 0.10.0: the newest verl 0.9.1 allows; its pyvers 0.1.0 holds packaging below 26 here
# (pip then warns that .venv's virtualenv wants packaging>=26.3: nothing here runs virtualenv)
TRAINER_PINS="trl==1.16.0 ray==2.60.0 tensordict==0.10.0 pyvers==0.1.0 hydra-core==1.3.8 \
codetiming==1.4.0 cachetools==8.0.2"
VERL_PIN="verl==0.9.1"
VENV=.venv-trainers

[[ -x .venv/bin/python ]] || { echo "setup_trainer_venv: no .venv; run infra/setup.sh first" >&2; exit 1; }
pipq() { { "$@" 2>&1; } | { grep -vE "is ignored: it is neither a file nor a directory" || true; }; }

STAMP=$VENV/.polar-installed
WANT="$TRAINER_PINS $VERL_PIN torch==2.13.0"
if [[ ! -x $VENV/bin/python || "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]]; then
  started=$SECONDS
  echo "setup_trainer_venv: installing $WANT into $VENV"
  base=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
  [[ -x $VENV/bin/python ]] || "$base" -m venv "$VENV"
  polar_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  own_site=$($VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # addsitedir (not a bare path) so that .venv's own .pth files (Polar's editable install) apply
  echo "import site; site.addsitedir('$polar_site')" > "$own_site/polar_venv.pth"
  constraints=$VENV/constraints.txt
  echo "torch==2.13.0" > "$constraints"
  # shellcheck disable=SC2086  # the pins are words
  pipq $VENV/bin/pip install -q -c "$constraints" $TRAINER_PINS
  pipq $VENV/bin/pip install -q --no-deps "$VERL_PIN"
  echo "$WANT" > "$STAMP"
  echo "setup_trainer_venv: installed in $((SECONDS - started)) s"
fi
$VENV/bin/python -c 'import torch, trl, verl; print(f"setup_trainer_venv: torch {torch.__version__}, trl {trl.__version__}, verl {verl.__version__}")'

[[ ${1:-} == --install-only ]] && exit 0
if (( $# )); then
  exec $VENV/bin/python scripts/check_trainer_layouts.py "$@" --require verl,trl
fi
sample=$(mktemp -d)
trap 'rm -rf "$sample"' EXIT
.venv/bin/python -m tests.support.sample_export "$sample"
$VENV/bin/python scripts/check_trainer_layouts.py "$sample/export" \
  --traces "$sample/polar-traces.jsonl" --model .polar/models/tiny-qwen3 --require verl,trl
