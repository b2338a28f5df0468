"""A tier's watermark through time (audit/contract/watermark_points.py) and the rule that bounds the tier after it
by the watermark it had when that tier reported (audit/contract/tier_paths.py): examples, then a model of tiers
copying one another whose statuses reach the books late and out of order, where no tier may ever be called
complete for a message it does not hold."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from audit.contract.tier_paths import paths_from
from audit.contract.watermark_points import WatermarkPoint, kept, replayed
from audit.contract.windows import EPOCH, to_ms

TIERS = ("producer", "dc1", "aggregate", "lake")


def at(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)


def status(
    tier: str,
    second: int,
    *,
    lag: int = 0,
    last_audit: int | None = None,
    partition: int = 0,
    reads: str | None = None,
    position: int = 0,
) -> dict:
    """A reporter partition's status row (`_partition_status`'s columns that the points read): the tier's counter,
    or a reporter that `reads` the cluster before it (a replicator, the lake job)."""
    seen_up_to = at(second) if lag == 0 else at(last_audit) if last_audit is not None else EPOCH
    return {
        "tier": tier,
        "cluster": reads or tier,
        "seen_topic": "clicks",
        "service": "reader" if reads else "counter",
        "partition": partition,
        "position": position,
        "emitted_at": at(second),
        "record_id": f"{tier}-{reads}-{second}-{partition}",
        "partition_watermark": seen_up_to,
    }


def lowest(rows: list[dict]) -> datetime | None:
    return min(row["partition_watermark"] for row in rows)


def points_of(statuses: list[dict]) -> list[WatermarkPoint]:
    points, _ = replayed({}, statuses, lowest)
    return points


def effective(points: dict[str, list[WatermarkPoint]], states: dict[str, dict] | None = None) -> dict[str, int | None]:
    """Each tier's effective watermark; `states`: each tier's newest status per reporter partition, whose positions
    say how far each tier has read."""
    read = {
        ("dc1", "clicks", tier): {
            (row["cluster"], row["seen_topic"], row["partition"]): (row["position"], to_ms(row["emitted_at"]))
            for row in state.values()
        }
        for tier, state in (states or {}).items()
    }
    reported = [("dc1", "clicks", tier, kept) for tier, kept in points.items()]
    rows = paths_from([("dc1", "clicks", "producer")], reported, TIERS, "producer", read)
    return {row[2]: row[5] for row in rows}


# -- examples -----------------------------------------------------------------------------------------------


def test_a_status_is_applied_in_emission_order_and_an_older_one_changes_nothing():
    state: dict = {}
    points, changed = replayed(state, [status("lake", 20), status("lake", 10), status("lake", 30, partition=1)], lowest)
    assert points == [
        (10_000, 10_000, 10_000),
        (20_000, 20_000, 20_000),
        (30_000, 20_000, 20_000),
    ]
    assert len(changed) == 2
    later, changed = replayed(state, [status("lake", 15)], lowest)
    assert (later, changed) == ([], set()), "older than the partition's newest: nothing changes"


def test_kept_points_are_the_newest_in_order_a_run_replacing_the_same_moment():
    stored = [WatermarkPoint(s, s, s) for s in (1, 2, 3)]
    new = [WatermarkPoint(3, 3, 2), WatermarkPoint(4, 4, 4)]
    assert kept(stored, new, limit=3) == [stored[1], new[0], new[1]]


def test_a_replicator_stall_that_ends_leaves_the_lake_lagging_until_it_reports_again():
    """The lake catches up (t=30) on an aggregate still stalled (its last status, t=20, behind since t=5); the
    aggregate then receives the backlog and catches up (t=40): the lake lags, it is not a false loss."""
    marks = {
        "dc1": points_of([status("dc1", 20), status("dc1", 40)]),
        "aggregate": points_of([status("aggregate", 20, lag=9, last_audit=5), status("aggregate", 40)]),
        "lake": points_of([status("lake", 30)]),
    }
    assert effective(marks)["lake"] == to_ms(at(5)), "bounded by the aggregate as it stood at t=30"
    marks["lake"] = points_of([status("lake", 30), status("lake", 45)])
    assert effective(marks)["lake"] == to_ms(at(40)), "the lake's next status covers the backlog"


def test_a_lower_watermark_reported_after_the_tiers_status_bounds_it_too():
    """A tier that caught up then fell behind (a backlog of old messages arrived) bounds the tier after it by
    the lower watermark: the earlier lag 0 did not hold that backlog."""
    marks = {
        "dc1": points_of([status("dc1", 10), status("dc1", 50)]),
        "aggregate": points_of([status("aggregate", 20), status("aggregate", 40, lag=3, last_audit=8)]),
        "lake": points_of([status("lake", 30)]),
    }
    assert effective(marks) == {"dc1": to_ms(at(50)), "aggregate": to_ms(at(8)), "lake": to_ms(at(8))}


def test_a_backlog_delivered_after_the_counters_status_keeps_the_tier_lagging_until_the_counter_reports_again():
    """A stall that must not show as a false loss at the aggregate: the replicator into the aggregate stalls
    (t=98: behind since t=30); the aggregate's counter reports lag 0 at t=100 on what it holds; the replicator
    delivers the backlog and reports lag 0 at t=103. The counter has not counted that backlog at t=100."""
    state: dict = {}
    copier = {"reads": "dc1"}
    stalled, caught_up = status("aggregate", 98, lag=50, last_audit=30, **copier), status("aggregate", 103, **copier)
    before, _ = replayed(state, [stalled, status("aggregate", 100)], lowest)
    after, _ = replayed(state, [caught_up], lowest, stored=before)
    assert [point.watermark_ms for point in before + after] == [30_000, 30_000, 30_000]
    counted, _ = replayed(state, [status("aggregate", 105)], lowest, stored=before + after)
    assert counted[0].watermark_ms == 103_000, "the counter's status after the replicator's covers the backlog"
    alone, _ = replayed({}, [status("aggregate", 100), caught_up], lowest)
    assert alone[-1].watermark_ms == 100_000, "never behind: the tier as it stood at the counter's status"


def test_a_counter_bound_holds_only_as_far_as_the_tier_before_held_when_the_tier_last_counted():
    """The lake's reader says lag 0 at t=2 on an aggregate that holds nothing yet, its counter counts nothing at
    t=4, the aggregate then receives dc1's message of t=1 and the lake copies it; the reader reports again at
    t=10, having read as far as the aggregate's counter had. The counter's claim of t=4
    rests on the aggregate as it stood at t=2 (unknown), and the reader's offsets say what the lake holds, not what
    its counter counted: the lake is unknown until its counter reports again."""
    states: dict[str, dict] = {"dc1": {}, "aggregate": {}, "lake": {}}
    dc1, _ = replayed(states["dc1"], [status("dc1", 2, position=1)], lowest)
    aggregate, _ = replayed(
        states["aggregate"],
        [status("aggregate", 6, reads="dc1", position=1), status("aggregate", 10, position=1)],
        lowest,
    )
    read = [status("lake", 2, reads="aggregate"), status("lake", 4), status("lake", 10, reads="aggregate", position=1)]
    lake, _ = replayed(states["lake"], read, lowest)
    marks = {"dc1": dc1, "aggregate": aggregate, "lake": lake}
    assert effective(marks, states)["lake"] is None, "the lake's counter counted nothing of the aggregate's backlog"
    counted, _ = replayed(states["lake"], [status("lake", 12, position=1)], lowest, stored=lake)
    marks["lake"] = kept(lake, counted)
    assert effective(marks, states)["lake"] == 2_000, "counted since: as far as dc1's counter at t=2"


def test_a_counter_bound_carries_the_tier_befores_bound_of_the_points_it_rests_on():
    """The lake's counter counted at t=40 what the lake held, which was the aggregate as it stood at t=20 (the reader's
    lag 0 then), when the aggregate was behind since t=5. The reader's newer status (t=50) does not lift that."""
    dc1 = points_of([status("dc1", 10), status("dc1", 30), status("dc1", 60)])
    aggregate = points_of(
        [status("aggregate", 20, reads="dc1", lag=4, last_audit=5), status("aggregate", 20)]
        + [status("aggregate", 30, reads="dc1"), status("aggregate", 30)]
    )
    lake = points_of([status("lake", 20, reads="aggregate"), status("lake", 40), status("lake", 50, reads="aggregate")])
    assert lake[-1].reported_from_ms == 20_000, "the oldest status behind the points the counter's claim rests on"
    assert effective({"dc1": dc1, "aggregate": aggregate, "lake": lake})["lake"] == 5_000


def test_a_tier_with_no_point_as_old_as_its_successors_status_leaves_it_unknown():
    marks = {"dc1": points_of([status("dc1", 40)]), "aggregate": points_of([status("aggregate", 30)])}
    assert effective(marks)["aggregate"] is None, "what dc1 held at t=30 is not known"


def proven(rows: list[dict]) -> datetime | None:
    """The model's tier watermark: `lowest`, but the epoch until the tier's counter has reported (what it counted is
    all a tier proves, as the books' rule for a cluster tier; the lake job counts what it lands) and, for a tier
    after dc1, the reporter that reads the tier before it too. The counter alone says what it counted, not what
    arrived: the books take its word (MirrorMaker 2 copies without reporting), the model does not prove it."""
    needed = {"counter"} if rows[0]["tier"] == "dc1" else {"counter", "reader"}
    if not needed <= {row["service"] for row in rows}:
        return EPOCH
    return lowest(rows)


def test_a_tier_that_read_as_far_as_the_counter_before_it_is_bounded_by_that_counters_status():
    """The end of a stopped pipeline: the replicator's last status (t=64) comes before the
    origin counter's (t=68). By time alone the aggregate is bounded by dc1 at t=32; by offsets it holds all dc1
    had at t=68, unless dc1 received more since the replicator read."""
    states: dict[str, dict] = {"dc1": {}, "aggregate": {}}
    dc1, _ = replayed(states["dc1"], [status("dc1", 32, position=7), status("dc1", 68, position=9)], lowest)
    copied = [status("aggregate", 64, position=9, reads="dc1"), status("aggregate", 64, position=9)]
    aggregate, _ = replayed(states["aggregate"], copied, lowest)
    assert effective({"dc1": dc1, "aggregate": aggregate}, states)["aggregate"] == 64_000
    assert effective({"dc1": dc1, "aggregate": aggregate})["aggregate"] == 32_000, "without offsets: by time"
    replayed(states["dc1"], [status("dc1", 70, position=11)], lowest)
    assert effective({"dc1": dc1, "aggregate": aggregate}, states)["aggregate"] == 32_000, "dc1 grew since"


# -- the model ----------------------------------------------------------------------------------------------

CHAIN = ("dc1", "aggregate", "lake")  # each tier after the first copies a prefix of the one before it


@st.composite
def histories(draw):
    """Steps of: messages appended to dc1 (audit time = the step), copies, and reports of each tier's counter and
    of the reporter that reads the tier before it, each read by a later run of the books (in any order)."""
    steps = draw(st.integers(3, 25))
    delays = st.one_of(st.none(), st.integers(0, 4))  # None: no report this step
    events = []
    for step in range(1, steps + 1):
        appended = draw(st.integers(0, 3))
        copies = [draw(st.floats(0, 1)) if draw(st.booleans()) else None for _ in CHAIN[1:]]
        counters = [draw(delays) for _ in CHAIN]
        readers = [draw(delays) for _ in CHAIN[1:]]
        events.append((step, appended, copies, counters, readers))
    return events, draw(st.integers(1, 6))


def counted(state: dict) -> int:
    """How much of dc1's log a tier's counter has counted, as far as the books know: its newest status's position
    (a counter's counts reach the books with its status, in one transaction)."""
    return max((row["position"] for row in state.values() if row["service"] == "counter"), default=0)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_no_tier_is_ever_called_complete_for_a_message_its_counter_has_not_counted(history):
    """Every message of audit time < a tier's effective watermark is counted by the tier's counter (so it is in the
    tier), at every run of the books, whatever the reports' delays and however few points are kept (once every tier
    before it has reported). A tier that received a backlog after its counter's last status holds it, uncounted."""
    events, limit = history
    log: list[int] = []  # dc1's messages' audit times, in offset order
    held = dict.fromkeys(CHAIN, 0)  # the prefix of dc1's log each tier holds (dc1: all of it)
    arriving: dict[int, list[dict]] = {}
    states: dict[str, dict] = {tier: {} for tier in CHAIN}
    points: dict[str, list[WatermarkPoint]] = {tier: [] for tier in CHAIN}
    for step, appended, copies, counters, readers in events:
        log += [step] * appended
        held["dc1"] = len(log)
        for index, fraction in enumerate(copies, start=1):
            if fraction is not None:  # copy more of what the tier before holds
                before, tier = held[CHAIN[index - 1]], CHAIN[index]
                held[tier] += round((before - held[tier]) * fraction)
        for tier, delay in zip(CHAIN, counters, strict=True):
            if delay is not None:  # counts what the tier holds, at once: caught up
                arriving.setdefault(step + delay, []).append(status(tier, step, position=held[tier]))
        for before, tier, delay in zip(CHAIN[:-1], CHAIN[1:], readers, strict=True):
            if delay is not None:
                lag, last = held[before] - held[tier], log[held[tier] - 1] if held[tier] else None
                read = status(tier, step, lag=lag, last_audit=last, reads=before, position=held[tier])
                arriving.setdefault(step + delay, []).append(read)
        arrived = arriving.pop(step, [])
        for tier in CHAIN:  # a run of the books: what arrived, tier by tier
            mine = [row for row in arrived if row["tier"] == tier]
            new, _ = replayed(states[tier], mine, proven, limit, stored=points[tier])
            points[tier] = kept(points[tier], new, limit=limit)
        marks = effective(points, states)
        for index, tier in enumerate(CHAIN):
            if not all(points[up] for up in CHAIN[:index]):
                break  # the tiers after one that never reported start from their own (test_tier_paths.py)
            mark = marks[tier]
            missing = [audit for audit in log[counted(states[tier]) :] if mark is not None and to_ms(at(audit)) < mark]
            assert not missing, f"{tier} called complete up to {mark} ms without counts of {missing}"
