"""free_port: the kernel's pick for port 0, never the same one twice in a process."""

from __future__ import annotations

from audit.local import processes


class _PickedSocket:
    """A socket whose bind to port 0 lands on the next of `picks`, as the kernel's choice would."""

    picks: list[int] = []

    def __init__(self, *_args) -> None:
        self.port = 0

    def __enter__(self):
        return self

    def __exit__(self, *_exc) -> None:
        return None

    def bind(self, _address) -> None:
        self.port = self.picks.pop(0)

    def getsockname(self):
        return ("127.0.0.1", self.port)


def test_a_port_the_kernel_picks_again_is_not_handed_out_twice(monkeypatch):
    monkeypatch.setattr(processes, "_HANDED_OUT", set())
    monkeypatch.setattr(_PickedSocket, "picks", [58637, 58637, 58637, 40001])
    monkeypatch.setattr(processes.socket, "socket", _PickedSocket)
    assert [processes.free_port(), processes.free_port()] == [58637, 40001]


def test_real_ports_are_distinct_and_free():
    ports = [processes.free_port() for _ in range(50)]
    assert len(set(ports)) == 50 and not any(processes.port_open("127.0.0.1", port) for port in ports[:5])
