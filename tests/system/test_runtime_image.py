"""The default session image (`polar/runtime:py311`) installs a project offline.

Sessions have no network, so an instance's `pip install -e .` must build with
what the image holds: PEP 668's marker is gone and setuptools and wheel are
there for `--no-build-isolation` builds (infra/images/runtime/Dockerfile).
"""

from __future__ import annotations

import docker
import pytest

SCRIPT = r"""
set -e
mkdir -p /tmp/proj/pkg && cd /tmp/proj
printf '[project]\nname = "pkg"\nversion = "0"\n' > pyproject.toml
echo 'X = 1' > pkg/__init__.py
{pip}
cd / && python -c 'import pkg; print("imported", pkg.X, pkg.__file__)'
"""


@pytest.mark.parametrize(
    "pip", ["pip install --no-build-isolation -e .", "pip install --no-build-isolation ."]
)
def test_pip_install_works_offline(docker_image: str, pip: str) -> None:
    client = docker.from_env(timeout=120)
    container = client.containers.run(
        docker_image, ["bash", "-c", SCRIPT.format(pip=pip)], network_mode="none", detach=True
    )
    try:
        code = container.wait(timeout=120)["StatusCode"]
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    assert code == 0, logs
    assert "imported 1" in logs
    assert "externally-managed-environment" not in logs
