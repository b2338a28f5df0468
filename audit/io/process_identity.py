"""Which process holds a lease, told well enough to prove it dead or alive from another process.

A pid means something only inside its pid namespace, on one boot of one kernel: two containers that share a
hostname (host networking) but not a pid namespace each have their own pid 4711. So a lease records the kernel's
boot id, the pid namespace's inode and the process's start time beside its pid, and only a reader in that same
namespace of that same boot may look the pid up. The start time tells a pid reused since from the holder.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

PROC = Path("/proc")


class Liveness(Enum):
    ALIVE = "alive"  # the very process, still running, seen from its own namespace
    DEAD = "dead"  # its namespace is ours and its pid is gone, or now names another process
    UNKNOWN = "unknown"  # another namespace, another boot or host, or nothing to tell by: only time can say


@dataclass(frozen=True)
class ProcessIdentity:
    host: str
    pid: int
    boot_id: str | None  # the kernel's boot: a pid namespace inode is reused after a reboot, and on another host
    pid_ns: int | None  # the inode of the pid namespace `pid` belongs to
    started: int | None  # the process's start, in clock ticks since boot (/proc/<pid>/stat, field 22)

    @classmethod
    def here(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _boot_id(), _pid_namespace(), start_ticks(pid))

    def fields(self) -> dict:
        return asdict(self)

    def liveness_of(self, holder: dict) -> Liveness:
        """Whether the process a lease body names is alive, as far as this process can prove it."""
        same_boot = self.boot_id is not None and holder.get("boot_id") == self.boot_id
        if not (same_boot and self.pid_ns is not None and holder.get("pid_ns") == self.pid_ns):
            return Liveness.UNKNOWN
        pid, started = holder.get("pid"), holder.get("started")
        if not isinstance(pid, int) or not isinstance(started, int):
            return Liveness.UNKNOWN
        now_started = self.started if pid == self.pid else start_ticks(pid)
        if now_started is None:  # no such process here, unless this host has no /proc to look in
            return Liveness.DEAD if (PROC / "self").exists() and not (PROC / str(pid)).exists() else Liveness.UNKNOWN
        return Liveness.ALIVE if now_started == started else Liveness.DEAD


def start_ticks(pid: int) -> int | None:
    """When process `pid` of this namespace started (clock ticks since boot); None when there is none or no /proc."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces and parentheses: the fields that follow come after the last.
    after_name = stat.rpartition(")")[2].split()
    return int(after_name[19]) if len(after_name) > 19 else None


def _boot_id() -> str | None:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _pid_namespace() -> int | None:
    try:
        return os.stat(PROC / "self/ns/pid").st_ino
    except OSError:
        return None
