"""free_port: a port of this process's block, free now, never the same one twice in a process."""

from __future__ import annotations

import socket

from audit.local import processes


def test_ports_are_distinct_free_and_below_the_kernels_ephemeral_range(monkeypatch):
    monkeypatch.setattr(processes, "_HANDED_OUT", set())
    ports = [processes.free_port() for _ in range(200)]
    ephemeral_low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert len(set(ports)) == 200
    assert all(port in processes.port_block() and port < ephemeral_low for port in ports)
    assert not any(processes.port_open("127.0.0.1", port) for port in ports[:5])


def test_a_port_someone_listens_on_is_never_handed_out(monkeypatch):
    monkeypatch.setattr(processes, "_HANDED_OUT", set())
    monkeypatch.setattr(processes, "_PORT_BLOCK_SIZE", 40)
    block = processes.port_block()
    listeners = []
    try:
        for port in block[:-3]:  # all but three ports of the block are taken
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sock.listen()
            listeners.append(sock)
        taken = {sock.getsockname()[1] for sock in listeners}
        handed = {processes.free_port() for _ in range(3)}
        assert not handed & taken and len(handed) == 3
    finally:
        for sock in listeners:
            sock.close()


def test_the_slots_blocks_are_disjoint():
    blocks = [set(processes.port_block(slot)) for slot in range(processes._PORT_SLOTS)]
    assert all(not (a & b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    assert processes.port_block(1) == processes.port_block(1 + processes._PORT_SLOTS)


def test_an_exhausted_block_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(processes, "_HANDED_OUT", set(processes.port_block()))
    try:
        processes.free_port()
    except RuntimeError as error:
        assert "no free port left" in str(error)
    else:
        raise AssertionError("an exhausted block must raise")
