"""The order `make test`'s workers take tests in (`in_schedule_order` in tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from tests.conftest import in_schedule_order


@dataclass
class Item:
    nodeid: str
    markers: tuple[str, ...] = ()
    minutes: float | None = None  # slow(minutes=...)

    def get_closest_marker(self, name: str):
        if name not in self.markers:
            return None
        return SimpleNamespace(kwargs={"minutes": self.minutes} if name == "slow" and self.minutes else {})


def test_slow_tests_first_then_spark_and_kafka_modules_alternate_whole_and_the_rest_last():
    items = [
        Item("a.py::quick"),
        Item("b.py::one", ("spark",)),
        Item("b.py::two", ("spark",)),
        Item("c.py::one", ("kafka",)),
        Item("d.py::one", ("kafka",)),
        Item("e.py::soak", ("kafka", "slow")),
        Item("f.py::one", ("spark", "kafka")),
        Item("c.py::two", ("kafka",)),
    ]
    ordered = [item.nodeid for item in in_schedule_order(items)]
    assert ordered == [
        "e.py::soak",
        "b.py::one",
        "b.py::two",
        "c.py::one",
        "c.py::two",
        "f.py::one",
        "d.py::one",
        "a.py::quick",
    ]


def test_a_shared_run_module_keeps_its_first_test_in_place_and_its_others_go_last():
    """So no second worker waits on the first one's lock while the shared fixture runs."""
    items = [
        Item("n.py::first", ("spark", "shared_run")),
        Item("n.py::second", ("spark", "shared_run")),
        Item("n.py::third", ("spark", "shared_run")),
        Item("c.py::one", ("kafka",)),
        Item("a.py::quick"),
    ]
    ordered = [item.nodeid for item in in_schedule_order(items)]
    assert ordered == ["n.py::first", "c.py::one", "a.py::quick", "n.py::second", "n.py::third"]


def test_the_longest_slow_spark_test_starts_first_and_the_others_are_spread_over_the_first_half():
    """Spark-bound slow tests saturate the cores: one at the start, the others among the waiting tests."""
    items = [
        Item("k.py::kills", ("kafka", "slow")),
        Item("l.py::lake", ("spark", "slow"), minutes=3),
        Item("s.py::soak", ("spark", "kafka", "slow"), minutes=5),
        Item("c.py::cluster", ("spark", "slow")),
        *[Item(f"m{n}.py::one", ("kafka",)) for n in range(12)],
    ]
    ordered = [item.nodeid for item in in_schedule_order(items)]
    assert ordered[:2] == ["s.py::soak", "k.py::kills"]
    assert ordered.index("l.py::lake") == 2 + 2 and ordered.index("c.py::cluster") == 2 + 4 + 1
    assert ordered[-1] == "m11.py::one"
