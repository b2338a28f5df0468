"""Processes and ports on this machine: free ports, liveness (zombies count as gone), marked JVMs, and
stopping a set of processes politely, then firmly."""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

# Every JVM we start carries -Dkaudit.cluster=<folder>, so a stray whose pid file was lost is still found.
MARKER_PROPERTY = "kaudit.cluster"


_HANDED_OUT: set[int] = set()  # ports free_port gave this process

# Ports come from below the kernel's ephemeral range (32768-60999 on Linux): the kernel never picks
# these for port 0 or for an outgoing connection, so a port we hand out stays ours until our server
# binds it. Processes that start servers at the same time on one machine (parallel test workers) set
# KAUDIT_PORT_SLOT to different numbers and draw from disjoint blocks.
PORT_SLOT_ENV = "KAUDIT_PORT_SLOT"
_PORT_BLOCKS_START, _PORT_BLOCK_SIZE, _PORT_SLOTS = 20000, 2000, 6


def port_block(slot: int | None = None) -> range:
    """The ports this process draws from: its slot's block of `_PORT_BLOCK_SIZE`."""
    if slot is None:
        slot = int(os.environ.get(PORT_SLOT_ENV, "0"))
    start = _PORT_BLOCKS_START + (slot % _PORT_SLOTS) * _PORT_BLOCK_SIZE
    return range(start, start + _PORT_BLOCK_SIZE)


def free_port(host: str = "127.0.0.1") -> int:
    """A port of this process's block that nobody listens on now and that this process was never given
    before: clusters set up one after the other bind their ports only when they start."""
    candidates = [port for port in port_block() if port not in _HANDED_OUT]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port left in {port_block()} ({len(_HANDED_OUT)} handed out by this process)")


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
