"""A real Slurm cluster on one machine: munged, slurmctld and one slurmd per namespace host.

Each node is a network + UTS namespace of tests/support/netns.py (its own
hostname and address, one veth to the root side); its `slurmd -N NAME` runs
inside it. slurmctld runs on the root side (its own UTS namespace, hostname
`ctl`), listening on the service address the nodes reach; munged serves a
Unix socket of the test's (AuthInfo=socket=...), so nothing of the host's
Slurm or munge is used or touched. Everything dies with the test process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from polar.processes import dying_with_parent
from tests.support import netns
from tests.support.netns import HostNetwork
from tests.support.ports import free_port

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
MUNGE_KEY = Path("/etc/munge/munge.key")


def unavailable() -> str | None:
    """Why a Slurm cluster cannot be made here (None: it can)."""
    for tool in TOOLS:
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"`{tool}` not found (infra/setup.sh installs slurmctld, slurmd, munge)"
    if not MUNGE_KEY.exists():
        return f"no munge key at {MUNGE_KEY} (the munge package makes one)"
    return netns.unavailable()


def _sbin(tool: str) -> str:
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or tool


@dataclass
class Cluster:
    root: Path
    net: HostNetwork
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.root / "slurm.conf")}

    def run(self, argv: list[str], user: list[str] | None = None) -> str:
        """A Slurm client command (as `user`'s argv prefix when given); its stdout."""
        proc = subprocess.run(
            [*(user or []), "env", f"SLURM_CONF={self.root / 'slurm.conf'}", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {proc.stderr.strip()}")
        return proc.stdout

    def jobs(self) -> list[str]:
        """Ids of jobs still pending or running."""
        return self.run(["squeue", "-h", "-o", "%i"]).split()

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _conf(root: Path, net: HostNetwork, ctl_port: int, d_port: int) -> str:
    nodes = "\n".join(
        f"NodeName={name} NodeAddr={host.address} CPUs=2 RealMemory=2000 State=UNKNOWN"
        for name, host in net.hosts.items()
    )
    return f"""ClusterName=polartest
SlurmctldHost=ctl({net.service_address})
SlurmctldPort={ctl_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
KillWait=30
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
{nodes}
PartitionName=polar Nodes={",".join(net.hosts)} Default=YES MaxTime=INFINITE State=UP
"""


@contextlib.contextmanager
def slurm_cluster(root: Path, names: list[str]) -> Iterator[Cluster]:
    """munged, slurmctld and a slurmd per name (a namespace host), until the block ends."""
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    shutil.copyfile(MUNGE_KEY, key)
    key.chmod(0o600)
    with netns.host_network(names) as net:
        (root / "slurm.conf").write_text(_conf(root, net, free_port(), free_port()))
        env = os.environ | {"SLURM_CONF": str(root / "slurm.conf")}
        cluster = Cluster(root, net)

        def start(argv: list[str], log: str) -> None:
            out = open(root / "log" / log, "ab")  # noqa: SIM115 - lives with the process
            cluster.procs.append(
                subprocess.Popen(
                    dying_with_parent(argv),
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

        try:
            munged = [
                _sbin("munged"),
                "--foreground",
                "--force",
                f"--socket={root}/munge.sock",
                f"--key-file={key}",
                f"--pid-file={root}/munge/munged.pid",
                f"--log-file={root}/log/munged.log",
                f"--seed-file={root}/munge/seed",
            ]
            start(munged, "munged.out")
            _wait(lambda: (root / "munge.sock").exists(), "munged", cluster)
            ctl = ["unshare", "--uts", "--", "sh", "-c", 'hostname ctl && exec "$@"', "ctl"]
            start([*ctl, _sbin("slurmctld"), "-D", "-i"], "slurmctld.out")
            time.sleep(1)
            for name, host in net.hosts.items():
                start([*host.enter, _sbin("slurmd"), "-D", "-N", name], f"slurmd-{name}.out")

            def idle() -> bool:
                out = subprocess.run(
                    ["sinfo", "-h", "-o", "%T %D"], env=env, capture_output=True, text=True
                ).stdout.split()
                return out == ["idle", str(len(names))]

            _wait(idle, "every node idle", cluster, 60)
            yield cluster
        finally:
            for proc in reversed(cluster.procs):
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            for proc in cluster.procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _wait(check: object, what: str, cluster: Cluster, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.5)
    logs = {n: cluster.log(n) for n in ("slurmctld.log", "slurmctld.out", "munged.out")}
    raise RuntimeError(f"Slurm cluster: {what} not reached: {logs}")
