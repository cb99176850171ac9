"""Hosts as network namespaces: each its own network and hostname, reached over one veth pair.

`host_network(["ha", "hb"])` makes, per name, a network + UTS namespace held by
a small sleeping process (`unshare --net --uts`; its hostname is the name, so a
worker's Temporal identity inside reads `pid@ha`), with a veth pair: the root
end has the service address `10.231.X.1` and a route to the host's own
`10.231.X.(10+i)` (point to point), the host end the reverse. Its loopback is
its own. A namespace can reach only the service address, where the test binds
the shared services (Temporal, S3, the gateway); nothing is routed anywhere
else. `X` is a /24 of 10.231.0.0/16 that no interface here uses.

Everything goes when the test ends, whatever happens: the namespaces die with
their last process (the holders die with the test process), and a veth pair
goes with its namespace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from polar.processes import dying_with_parent

HOLD = "import signal, socket, sys; socket.sethostname(sys.argv[1]); print('ready', flush=True); "
HOLD += "signal.pause()"


def _ip(*args: str, enter: list[str] | None = None) -> None:
    proc = subprocess.run([*(enter or []), "ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


@dataclass
class NetHost:
    """One namespace host: its name, address, holder process and root-side veth."""

    name: str
    address: str
    holder: subprocess.Popen
    root_link: str
    net_inode: int = 0

    @property
    def enter(self) -> list[str]:
        """argv prefix that runs a command inside this host's network and UTS namespaces."""
        ns = f"/proc/{self.holder.pid}/ns"
        return ["nsenter", f"--net={ns}/net", f"--uts={ns}/uts", "--"]

    def pids(self) -> set[int]:
        """Every live process in this host's network namespace (the holder included)."""
        inode, out = self.net_inode, set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(entry / "ns" / "net").st_ino == inode:
                        out.add(int(entry.name))
        return out

    def holds(self, pid: int) -> bool:
        """Whether process `pid` runs in this host's network namespace."""
        try:
            return os.stat(f"/proc/{pid}/ns/net").st_ino == self.net_inode
        except OSError:
            return False

    def linked(self) -> bool:
        """Whether the root end of this host's veth pair still exists."""
        return Path(f"/sys/class/net/{self.root_link}").exists()

    def kill(self) -> None:
        """SIGKILL every process in the namespace; it goes, and its veth pair with it."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.holder.wait()


@dataclass
class HostNetwork:
    """The namespace hosts of a test and the root-side address they all reach."""

    service_address: str
    hosts: dict[str, NetHost]


def unavailable() -> str | None:
    """Why namespace hosts cannot be made here (None: they can): tools, privileges, veths."""
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found (infra/setup.sh installs iproute2 and util-linux)"
    try:
        with host_network(["probe"]):
            return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot make a network namespace with a veth pair: {exc}"


def _free_subnet() -> int:
    """A third octet X such that no interface here has an address in 10.231.X.0/24."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    start = os.getpid() % 250
    for step in range(250):
        octet = (start + step) % 250 + 1
        if f"10.231.{octet}." not in used:
            return octet
    raise OSError("no free /24 in 10.231.0.0/16")


def _holder(name: str) -> subprocess.Popen:
    argv = ["unshare", "--net", "--uts", "--", sys.executable, "-c", HOLD, name]
    proc = subprocess.Popen(
        dying_with_parent(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    if proc.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
        proc.kill()
        raise OSError(f"unshare --net --uts: {proc.communicate()[1].strip()}")
    return proc


@contextmanager
def host_network(names: list[str]) -> Iterator[HostNetwork]:
    """One namespace host per name, all reaching the root side at `service_address`."""
    octet = _free_subnet()
    service = f"10.231.{octet}.1"
    hosts: dict[str, NetHost] = {}
    try:
        for index, name in enumerate(names):
            holder = _holder(name)
            inode = os.stat(f"/proc/{holder.pid}/ns/net").st_ino
            host = NetHost(
                name, f"10.231.{octet}.{10 + index}", holder, f"pl{octet}h{index}", inode
            )
            hosts[name] = host
            _ip(
                "link",
                "add",
                host.root_link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                str(holder.pid),
            )
            _ip("addr", "add", service, "peer", host.address, "dev", host.root_link)
            _ip("link", "set", host.root_link, "up")
            inside = host.enter
            _ip("addr", "add", host.address, "peer", service, "dev", "eth0", enter=inside)
            _ip("link", "set", "eth0", "up", enter=inside)
            _ip("link", "set", "lo", "up", enter=inside)
        yield HostNetwork(service, hosts)
    finally:
        for host in hosts.values():
            host.kill()
            with contextlib.suppress(OSError):  # gone with its namespace already
                _ip("link", "del", host.root_link)
