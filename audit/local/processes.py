"""Processes and ports on this machine: free ports, liveness (zombies count as gone), marked JVMs, and
stopping a set of processes politely, then firmly."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

# Every JVM we start carries -Dkaudit.cluster=<folder>, so a stray whose pid file was lost is still found.
MARKER_PROPERTY = "kaudit.cluster"


_HANDED_OUT: set[int] = set()  # ports free_port gave this process


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel's pick for port 0), and never one this process was
    given before: clusters set up one after the other bind their ports only when they start, and the
    kernel may pick a released port again (dc1 and aggregate once both got 58637 as controller port)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child still answers kill(0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def marked_pids(marker_prefix: str) -> list[int]:
    """Pids of JVMs whose command line carries our marker for a folder under `marker_prefix`."""
    needle = f"-D{MARKER_PROPERTY}={marker_prefix}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry.name))
    return found


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def terminate(pids: set[int], timeout_s: float) -> None:
    """SIGTERM, up to `timeout_s` to exit, then SIGKILL; returns once every process is gone (or 10 s more)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    remaining = wait_gone(pids, timeout_s)
    for pid in remaining:
        log.warning("process ignored SIGTERM; killing", extra={"pid": pid})
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_gone(remaining, 10)


def wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    remaining = [pid for pid in pids if pid_alive(pid)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.1)
        reap(remaining)
        remaining = [pid for pid in remaining if pid_alive(pid)]
    return remaining


def reap(pids: Iterable[int]) -> None:
    """Collect our own exited children so they do not linger as zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
