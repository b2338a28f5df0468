"""A hop's retention bookkeeping without a broker: skips judged against given log start offsets, each
deleted offset counted once however often it is found, and the alert cause read from reported gaps."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from audit.alerts.rules import retention_causes
from audit.hops.retention import RetentionGaps, Skip, skips_in_batch


@dataclass
class FakeMessage:
    _topic: str
    _partition: int
    _offset: int
    _time: int = 0

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def timestamp(self):
        return (1, self._time)

    def error(self):
        return None


def gaps_book():
    counted = []
    return RetentionGaps(lambda topic, partition, n: counted.append((topic, partition, n)), cluster="dc1"), counted


def test_a_skip_below_the_log_start_is_a_gap_and_one_above_it_is_not():
    book, counted = gaps_book()
    skips = [
        Skip("t", 0, 100, (130, 131), 5, (7, 8)),  # jumped to the log start 130: 30 deleted
        Skip("t", 1, 100, (102,), 5),  # a marker at 100..101, log start still 10: normal
    ]
    assert book.check(skips, lambda keys: {("t", 0): 130, ("t", 1): 10}) == 30
    assert counted == [("t", 0, 30)]
    [gap] = book.of_topic("t")
    assert (gap.partition, gap.from_offset, gap.to_offset, gap.after_time_ms, gap.before_time_ms) == (0, 100, 130, 5, 7)


def test_the_same_gap_found_again_after_a_rewind_is_counted_once():
    book, counted = gaps_book()
    book.check([Skip("t", 0, 100, (130,), None)], lambda keys: {("t", 0): 130})
    book.check([Skip("t", 0, 90, (135,), None)], lambda keys: {("t", 0): 135})  # rewound to 90, retention moved on
    assert book.skipped == 45 and [n for *_, n in counted] == [30, 15]
    assert [(g.from_offset, g.to_offset) for g in book.of_topic("t")] == [(90, 135)]


def test_an_unknown_log_start_judges_nothing():
    book, counted = gaps_book()
    assert book.check([Skip("t", 0, 100, (130,), None)], lambda keys: {}) == 0
    assert counted == [] and book.of_topic("t") == ()


def test_a_gap_found_by_position_gets_the_time_of_the_first_message_read_after_it():
    book, _ = gaps_book()
    book.check([Skip("t", 0, 100, (130,), 5)], lambda keys: {("t", 0): 130})
    assert book.of_topic("t")[0].before_time_ms is None
    book.close_open([FakeMessage("t", 1, 7, 99), FakeMessage("t", 0, 130, 42), FakeMessage("t", 0, 131, 43)])
    assert book.of_topic("t")[0].before_time_ms == 42


def test_skips_in_batch_keeps_each_partitions_offsets_in_order():
    messages = [FakeMessage("t", 0, 5, 1), FakeMessage("t", 1, 9, 2), FakeMessage("t", 0, 40, 3)]
    [skip] = skips_in_batch({("t", 0): (3, 11)}, messages)
    assert skip == Skip("t", 0, 3, (5, 40), 11, (1, 3))


WINDOW = pd.Timestamp("2026-11-23 10:00", tz="UTC")


def gap_row(tier, partition, start, end, after=None, before=None, cluster="dc1"):
    return {
        "tier": tier,
        "cluster": cluster,
        "seen_topic": "orders",
        "partition": partition,
        "origin_cluster": "dc1",
        "topic": "orders",
        "from_offset": start,
        "to_offset": end,
        "after_time": after,
        "before_time": before,
    }


def causes(gaps, tiers=("aggregate", "lake")):
    row = pd.DataFrame([{"origin_cluster": "dc1", "topic": "orders", "window_start": WINDOW, "window_minutes": 10}])
    return retention_causes(next(row.itertuples(index=False)), tiers, pd.DataFrame(gaps))


def test_the_cause_names_the_tier_and_counts_overlapping_reports_once():
    minute = pd.Timedelta(minutes=1)
    gaps = [
        gap_row("aggregate", 0, 100, 130, WINDOW - minute, WINDOW + minute),
        gap_row("aggregate", 0, 90, 130, WINDOW - minute, None),  # the same gap, reported wider after a restart
        gap_row("aggregate", 1, 0, 5, None, None),
    ]
    assert causes(gaps) == ["deleted by retention before aggregate read it (45 offsets skipped)"]


def test_a_gap_outside_the_window_or_of_another_topic_is_not_its_cause():
    hour = pd.Timedelta(hours=1)
    assert causes([gap_row("aggregate", 0, 100, 130, WINDOW + hour, None)]) == []  # after the window
    assert causes([gap_row("aggregate", 0, 100, 130, None, WINDOW - hour)]) == []  # before it
    other = {**gap_row("aggregate", 0, 100, 130), "topic": "payments"}
    assert causes([other]) == []
    assert causes([gap_row("dc1", 0, 100, 130)], tiers=("aggregate",)) == []  # another tier
