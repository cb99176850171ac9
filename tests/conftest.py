"""One embedded stack for the whole suite: real Temporal dev server and real SeaweedFS.

Ports are picked free at start so the suite never collides with a developer's
own `polar dev up`. Heavier parts (vLLM, gateway, workers) have their own
session fixtures, started only by the tests that need them.

Lanes are folders (`pytest tests/unit`, `tests/integration`, `tests/system`):
* `tests/unit/`: no service, no network, no subprocess stack; mirrors the source tree;
* `tests/integration/`: Temporal and S3 of the dev stack (`devstack`, `storage`,
  `worker`, `polar`), gateways and workers in process;
* `tests/system/`: vLLM, Docker and podman, the harness CLIs, multi-host and compose
  stacks, trainers' own code, the adversarial suite.
A test that asks for a fixture beyond its lane fails at collection, naming it
(`LANE_FIXTURES`), so the folders stay true.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.devstack import DevStack, StackError
from polar.client.sdk import PolarClient
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.swe import SweInstance, load_instances
from tests.support import suite_vllm, workflow_fingerprint
from tests.support.harness_stack import HarnessStack, running_harness_stack
from tests.support.module_order import longest_first, module_seconds
from tests.support.ports import free_port
from tests.support.scripted_backend import serve_app
from tests.support.tap import Tap, tap_app

REPO = Path(__file__).resolve().parent.parent

INTEGRATION_FIXTURES = frozenset({"devstack", "storage", "worker", "polar", "base_settings"})
"""This file's fixtures that start the dev stack (Temporal and SeaweedFS)."""
SYSTEM_FIXTURES = frozenset(
    {
        "vllm",
        "tap",
        "gateway",
        "docker_engine",
        "docker_image",
        "podman_image",
        "harness_image",
        "harness_stack",
    }
)
"""This file's fixtures of the system lane: the real vLLM (and the tap and gateway in front
of it), a Docker engine and the images built for it, the harness CLIs' stack."""
LANE_FIXTURES: dict[str, frozenset[str]] = {
    "unit": INTEGRATION_FIXTURES | SYSTEM_FIXTURES,
    "integration": SYSTEM_FIXTURES,
    "system": frozenset(),
}
"""The fixtures of this file each lane may not use."""


def lane_of(item: pytest.Item) -> str | None:
    """`unit`, `integration` or `system`: the folder under tests/ that holds `item`."""
    path = Path(str(item.path))
    if not path.is_relative_to(REPO / "tests"):
        return None
    parts = path.relative_to(REPO / "tests").parts
    return parts[0] if len(parts) > 1 and parts[0] in LANE_FIXTURES else None


def fixtures_beyond_lane(item: pytest.Item, lane: str) -> list[str]:
    """This file's fixtures that `item` uses but its lane may not (a module's own fixture of
    the same name, e.g. an in-process `gateway`, is the module's business)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    beyond = []
    for name in sorted(LANE_FIXTURES[lane].intersection(info.names_closure)):
        defs = info.name2fixturedefs.get(name, ())
        if defs and defs[-1].func.__module__ == __name__:
            beyond.append(name)
    return beyond


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test lives in a lane folder and uses only what its lane starts (see above)."""
    errors = []
    for item in items:
        lane = lane_of(item)
        if lane is None:
            errors.append(f"{item.nodeid}: tests live in tests/unit, integration or system")
        elif beyond := fixtures_beyond_lane(item, lane):
            errors.append(f"{item.nodeid}: the {lane} lane may not use {', '.join(beyond)}")
    if errors:
        raise pytest.UsageError("tests outside their lane:\n" + "\n".join(errors))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the files a worker is handed: longest first
        file_of = {id(item): item.nodeid.split("::")[0] for item in items}
        items[:] = longest_first(items, file_of, module_seconds())


KEPT_RUNS = 3
"""Base temp dirs of earlier runs kept for a look after a failure (as pytest keeps 3)."""
STALE_RUN_S = 6 * 3600
"""An older run beyond `KEPT_RUNS` is removed once this old (so never one still running)."""


XDIST_UID_POOL = range(61000, 61400)
"""The local runtime's sandbox uids the suite's xdist workers share out (`xdist_uid_pool`);
61400-61999 are the chaos tests' own (tests/support/chaos.py)."""


def xdist_uid_pool() -> str | None:
    """This pytest-xdist worker's share of `XDIST_UID_POOL` as POLAR_SANDBOX_UID_POOL
    (None outside xdist): a uid is claimed per runtimes root, and two workers' roots differ,
    so without this two workers' sessions could run as one uid and a teardown of one (which
    kills its uid's processes) would hit the other."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw"):
        return None
    size = len(XDIST_UID_POOL) // max(count, 1)
    first = XDIST_UID_POOL.start + int(worker[2:]) * size
    return f"{first}-{first + size - 1}"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """A base temp dir of this run's own (unless `--basetemp` is given), under
    /srv/polar-pt-USER as root, else the temp dir's polar-pt-USER (0711): pytest's
    shared /tmp/pytest-of-USER is set back to 0700 by every pytest that starts, which would
    cut a concurrent run's harness users off their session dirs. Not under /tmp as root: a
    `local` session has a /tmp, /var/tmp and /dev/shm of its own (local_sandbox.py), so a
    harness reads the tests' files (an agent script, a patch) only outside them. The oldest
    runs beyond `KEPT_RUNS` are removed. Under pytest-xdist, each worker takes its share of
    the sandbox uids (`xdist_uid_pool`) and of the ports (tests/support/ports.py)."""
    if (pool := xdist_uid_pool()) is not None:
        os.environ["POLAR_SANDBOX_UID_POOL"] = pool
        # a run dir of its own, not xdist's `<run>/popen-gwN`: those 10 bytes more put some
        # session dirs' Unix sockets past the 107-byte limit
        config.option.basetemp = None
    if config.option.basetemp is not None:
        return
    # a short name: Unix socket paths under it must stay within 107 bytes
    parent = Path("/srv") if os.geteuid() == 0 else Path(tempfile.gettempdir())
    root = parent / f"polar-pt-{getpass.getuser()}"
    root.mkdir(mode=0o711, exist_ok=True)
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise pytest.UsageError(f"{root} is not a directory of this user's")
    root.chmod(0o711)
    runs = sorted(root.glob("r*"), key=lambda p: p.stat().st_mtime)
    stale = time.time() - STALE_RUN_S  # a run that may still be going is never removed
    for old in runs[: max(0, len(runs) - (KEPT_RUNS - 1))]:
        if old.stat().st_mtime < stale:
            # rm, not shutil.rmtree: a session's planted tree can be deeper than Python's
            # recursion limit (a RecursionError here failed every later pytest start)
            subprocess.run(["rm", "-rf", "--one-file-system", str(old)], check=False)
    config.option.basetemp = tempfile.mkdtemp(prefix="r", dir=root)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Recording histories (POLAR_RECORD_HISTORIES=1) also records the workflow code they
    were made by (tests/support/workflow_fingerprint.py), once every test passed."""
    if os.environ.get("POLAR_RECORD_HISTORIES") and exitstatus == 0:
        workflow_fingerprint.write()


def open_for_harness(path: Path, factory: pytest.TempPathFactory) -> Path:
    """`path` and the pytest dirs above it made traversable (o+x, still not listable): the
    local runtime's unprivileged harness user must reach the session dirs under them."""
    top = factory.getbasetemp().parent  # this user's dir of runs
    for parent in (path, *path.parents):
        if not parent.is_relative_to(top):
            break
        parent.chmod(parent.stat().st_mode | stat.S_IXOTH)
    return path


@pytest.fixture
def tmp_path(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's `tmp_path`, reachable by the local runtime's harness user."""
    return open_for_harness(tmp_path, tmp_path_factory)


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data_dir = Path(
        os.environ.get("POLAR_TEST_DATA_DIR")
        or open_for_harness(tmp_path_factory.mktemp("polar"), tmp_path_factory)
    )
    # one block of ports for the whole suite: Temporal uses +0/+10/+20, SeaweedFS +30..+37
    base = free_port(span=48)
    temporal_port, s3_port = base, base + 30
    return Settings(
        data_dir=data_dir,
        temporal_address=f"127.0.0.1:{temporal_port}",
        temporal_ui_port=base + 1,
        s3_endpoint=f"http://127.0.0.1:{s3_port}",
        s3_bucket="polar-test",
        gateway_port=base + 40,
        vllm_port=base + 41,
        admin_port=base + 42,
        # tasks of the suite read their sources from pytest's temp dirs and the checkout
        source_roots=f"{tmp_path_factory.getbasetemp().parent},{REPO}",
        # real secrets, as a deployment must have (polar.credentials refuses weak ones)
        session_secret=secrets.token_urlsafe(32),
        s3_access_key=f"polar-test-{secrets.token_hex(4)}",
        s3_secret_key=secrets.token_urlsafe(32),
    )


@pytest.fixture(scope="session")
def devstack(base_settings: Settings) -> Iterator[DevStack]:
    stack = DevStack(base_settings, with_model=False, workers=0, die_with_parent=True)
    stack.start(stack.temporal())
    stack.start(stack.seaweedfs())
    Storage(base_settings).ensure_bucket()
    yield stack
    for name in ("temporal", "seaweedfs"):
        stack.stop(name, quiet=True, grace_s=0)  # throwaway data: no graceful stop to wait for


@pytest.fixture(scope="session")
def storage(devstack: DevStack) -> Storage:
    return Storage(devstack.settings)


@pytest.fixture(scope="session")
async def worker(devstack: DevStack) -> AsyncIterator[None]:
    """An in-process worker serving every queue of the suite's task queue."""
    from activities.worker import running_workers

    async with running_workers(devstack.settings):
        yield


@pytest.fixture(scope="session")
async def polar(devstack: DevStack, worker: None) -> PolarClient:
    return await PolarClient.connect(devstack.settings)


@pytest.fixture(scope="session")
def docker_engine(base_settings: Settings) -> Iterator[None]:
    """A Docker engine: the one that answers, else `dockerd` started here and stopped after."""
    stack = DevStack(base_settings, with_model=False, workers=0, die_with_parent=True)
    try:
        started = stack.ensure_docker(log=lambda _: None)
    except StackError as exc:
        pytest.fail(f"no Docker engine: {exc}")
    yield
    if started:
        stack.stop("docker", quiet=True)


@pytest.fixture(scope="session")
def docker_image(docker_engine: None, base_settings: Settings) -> str:
    """The default session image, built locally (infra/images/build.py; cached by recipe)."""
    DevStack(base_settings, with_model=False, workers=0, with_docker=True).build_images(
        log=lambda _: None
    )
    return "polar/runtime:py311"


@pytest.fixture(scope="session")
def podman_image(docker_image: str) -> str:
    """The default session image in podman's stores (rootless, and root's when we are root):
    `docker save | podman load` from the local engine, skipped when the image id matches."""
    from activities.runtimes.kinds.podman import load_from_docker, resolve_mode, rootless_support

    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run infra/setup.sh (apt-get install podman)")
    modes = {resolve_mode()[0]}
    if rootless_support()[0]:
        modes.add("rootless")
    if os.geteuid() == 0:
        modes.add("root")
    for mode in sorted(modes):
        load_from_docker(docker_image, mode)
    return docker_image


@pytest.fixture(scope="session")
def harness_image(docker_image: str) -> str:
    """The harness CLIs' session image (`build.py --harness`: the host's Node and
    infra/harnesses/node_modules on top of the runtime image; cached by recipe)."""
    script = REPO / "infra" / "images" / "build.py"
    argv = [sys.executable, str(script), "--harness"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"harness image build failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return "polar/harness:node20"


@pytest.fixture(scope="module")
def swe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled SWE-style tasks (infra/tasks/build_swe_tasks.py), built offline."""
    from tests.support.swe_tasks import load_task_builder

    # harnesses of the tests read their patches from here (the local runtime's harness user)
    out = open_for_harness(tmp_path_factory.mktemp("swe-tasks"), tmp_path_factory)
    load_task_builder().build(out)
    return out


@pytest.fixture(scope="module")
def instances(swe_dir: Path) -> dict[str, SweInstance]:
    return {i.instance_id: i for i in load_instances(swe_dir / "instances.jsonl")}


@pytest.fixture(scope="module")
async def harness_stack(devstack: DevStack, model_dir: Path) -> AsyncIterator[HarnessStack]:
    """Agent backend and gateway in threads, a worker on its own queue pointed at that gateway."""
    async with running_harness_stack(devstack.settings, model_dir) as stack:
        yield stack


@pytest.fixture(scope="session")
def model_dir(base_settings: Settings) -> Path:
    """The project's tiny local model (built by infra/setup.sh; built here if missing)."""
    target = REPO / ".polar" / "models" / "tiny-qwen3"
    if not (target / ".complete").exists():
        script = REPO / "infra" / "tiny_model" / "build_tiny_model.py"
        subprocess.run(
            [str(REPO / ".venv-vllm" / "bin" / "python"), str(script), str(target)], check=True
        )
    return target


@pytest.fixture(scope="session")
def vllm(devstack: DevStack, model_dir: Path) -> Iterator[str]:
    """The real vLLM OpenAI server (CPU build) serving the tiny model; yields its /v1 base:
    the lane's shared one where scripts/test.sh started it (tests/support/suite_vllm.py),
    else one of this worker's own."""
    shared = os.environ.get("POLAR_TEST_VLLM_RUN_DIR")
    url = suite_vllm.shared_url(Path(shared)) if shared else None
    if url is not None:
        yield url
        return
    settings = devstack.settings.model_copy(
        update={"model_dir": model_dir, "vllm_python": REPO / ".venv-vllm" / "bin" / "python"}
    )
    stack = DevStack(settings, workers=0, die_with_parent=True)
    stack.start(stack.vllm())
    yield f"http://127.0.0.1:{settings.vllm_port}/v1"
    stack.stop("vllm", quiet=True)


@pytest.fixture(scope="session")
def tap(vllm: str) -> Iterator[Tap]:
    """A recording tap in front of vLLM: what the backend really sampled."""
    handle = Tap(upstream=vllm)
    with serve_app(tap_app(handle)) as url:
        handle.url = f"{url}/v1"
        yield handle


@pytest.fixture(scope="session")
def gateway(devstack: DevStack, tap: Tap) -> Iterator[str]:
    """The gateway as its own process (`polar gateway`), forwarding to vLLM through the tap."""
    settings = devstack.settings.model_copy(update={"upstream_urls": tap.url})
    stack = DevStack(settings, with_model=False, workers=0, die_with_parent=True)
    stack.start(stack.gateway())
    yield settings.gateway_base_url
    stack.stop("gateway", quiet=True)
