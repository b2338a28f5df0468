"""bench_detection's two clocks: when a window turned final on its path, and which reporters make that path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.bench_detection import Status, final_at, on_path

COUNTER_DC1 = ("dc1", "dc1", "counter", "c1")
MIRROR = ("aggregate", "dc1", "mirror", "m1")
COUNTER_HUB = ("aggregate", "aggregate", "counter", "c2")
DUE = 1_000_000


def test_final_once_every_reporter_has_passed_the_due_time_by_its_newest_status():
    statuses = [
        Status(COUNTER_DC1, 10, DUE + 5),
        Status(MIRROR, 20, DUE),
        Status(COUNTER_HUB, 30, DUE - 1),  # the aggregate counter is still behind
        Status(COUNTER_DC1, 40, None),  # the dc1 counter's newest says nothing is known
        Status(COUNTER_HUB, 50, DUE + 2),
        Status(COUNTER_DC1, 60, DUE + 9),
    ]
    assert final_at(statuses, DUE, reporters=3) == 60
    assert final_at(statuses[:5], DUE, reporters=3) is None
    assert final_at(statuses[:2], DUE, reporters=2) == 20
    assert final_at(statuses[:2], DUE, reporters=3) is None  # one reporter not heard from: not final


@given(
    st.lists(
        st.tuples(
            st.sampled_from([COUNTER_DC1, MIRROR, COUNTER_HUB]), st.integers(0, 1000), st.integers(DUE - 50, DUE + 50)
        ),
        max_size=30,
    )
)
def test_final_is_the_first_status_time_at_which_all_newest_watermarks_are_due(raw):
    statuses = [Status(reporter, at, watermark) for reporter, at, watermark in raw]
    found = final_at(statuses, DUE, reporters=3)
    ordered = sorted(statuses, key=lambda s: s.emitted_at_ms)

    def final_after(index: int) -> bool:
        newest = {s.reporter: s.watermark_ms for s in ordered[: index + 1]}
        return len(newest) == 3 and all(w >= DUE for w in newest.values())

    first = next((ordered[i].emitted_at_ms for i in range(len(ordered)) if final_after(i)), None)
    assert found == first


def test_the_aggregate_path_of_dc1_orders_is_the_dc1_counter_the_replicator_and_the_aggregate_counter():
    assert on_path("dc1", "dc1", "orders")
    assert on_path("aggregate", "dc1", "orders")  # the replicator's status
    assert on_path("aggregate", "aggregate", "dc1.orders")
    assert not on_path("lake", "aggregate", "dc1.orders")
    assert not on_path("dc1", "dc1", "clicks")
    assert not on_path("aggregate", "aggregate", "orders")
