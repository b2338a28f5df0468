"""The retention-gap arithmetic and the status record's `retention_gaps` field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.contract.record import Kind, encode, parse, status_record
from audit.contract.retention import RetentionGap, add_gap, deleted_range, first_resumed, union_skipped


@pytest.mark.parametrize(
    "expected, resumed_at, log_start, deleted, why",
    [
        (100, 130, 130, (100, 130), "resumed at the log start: everything before it deleted"),
        (100, 135, 130, (100, 130), "resumed past it (markers after the log start): only below it deleted"),
        (100, 101, 130, None, "a marker skipped, the log start moved later: not passed yet, no loss"),
        (100, 130, 100, None, "the log start is where it was: a normal skip"),
        (100, 130, 90, None, "the log start behind the reader: a normal skip"),
        (0, 5, 5, (0, 5), "from the very start"),
    ],
)
def test_deleted_range(expected, resumed_at, log_start, deleted, why):
    assert deleted_range(expected, resumed_at, log_start) == deleted, why


def test_messages_read_below_the_log_start_before_it_moved_are_not_lost():
    # read 100..104 before the deletion, then the consumer jumped to the log start 110
    assert first_resumed(100, [100, 101, 102, 103, 104, 110, 112], 110) == (105, 110)
    assert first_resumed(100, [100, 101, 102], 110) is None  # not past the log start yet: found later


@given(
    expected=st.integers(0, 50),
    read=st.lists(st.integers(0, 100), unique=True, max_size=30).map(sorted),
    log_start=st.integers(0, 100),
)
def test_first_resumed_counts_exactly_the_offsets_below_the_log_start_never_read(expected, read, log_start):
    read = [o for o in read if o >= expected]
    before = [o for o in read if o < log_start]
    after = [o for o in read if o >= log_start]
    found = first_resumed(expected, read, log_start)
    if not after:
        assert found is None
        return
    # the reader's next offset when it jumped: one past the last message read below the log start
    position = max([expected, *(o + 1 for o in before)])
    lost = set(range(position, log_start))
    assert (found[1] - found[0] if found else 0) == len(lost)


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)).map(lambda t: (t[0], t[0] + t[1])), max_size=12))
def test_union_skipped_counts_each_offset_once(ranges):
    assert union_skipped(ranges) == len({o for start, end in ranges for o in range(start, end)})


def test_the_same_gap_found_again_after_a_rewind_counts_once_and_widens():
    gaps = add_gap([], RetentionGap(0, 100, 130, 5, 9))
    gaps = add_gap(gaps, RetentionGap(1, 100, 130, 5, 9))  # another partition: kept apart
    gaps = add_gap(gaps, RetentionGap(0, 90, 140, 4, 10))
    assert gaps == [RetentionGap(1, 100, 130, 5, 9), RetentionGap(0, 90, 140, 4, 10)]
    assert add_gap(gaps, RetentionGap(0, 95, 100, None, None))[-1] == RetentionGap(0, 90, 140, None, None)


def status_with(gaps) -> bytes:
    return encode(
        status_record(
            record_id="i:1",
            tier="aggregate",
            cluster="dc1",
            topic="orders",
            partitions=[],
            retention_gaps=gaps,
            emitted_at_ms=1_700_000_000_000,
        )
    )


def test_a_status_record_carries_its_gaps_and_reads_them_back():
    gap = RetentionGap(3, 100, 130, 1_700_000_000_000, None)
    record, reason = parse(status_with([gap]))
    assert reason is None and record.kind == Kind.STATUS
    assert record.retention_gaps == (gap,)
    assert json.loads(status_with([gap]))["retention_gaps"][0]["before_time"] is None


def test_without_gaps_the_wire_form_is_unchanged_and_older_records_read():
    assert "retention_gaps" not in json.loads(status_with([]))
    record, reason = parse(status_with([]))
    assert reason is None and record.retention_gaps == ()


@pytest.mark.parametrize(
    "gap, reason",
    [
        ({"partition": 0, "from_offset": 5, "to_offset": 5}, "retention_gaps[0]: needs"),
        ({"partition": -1, "from_offset": 1, "to_offset": 5}, "retention_gaps[0]: needs"),
        ({"partition": 0, "from_offset": "1", "to_offset": 5}, "retention_gaps[0].from_offset: '1' is not an integer"),
        ({"partition": 0, "from_offset": 1}, "retention_gaps[0].to_offset: missing"),
        ({"partition": 0, "from_offset": 1, "to_offset": 5, "after_time": "x"}, "retention_gaps[0].after_time:"),
        ([1], "retention_gaps[0]: [1] is not an object"),
    ],
)
def test_a_malformed_gap_is_refused_naming_the_field(gap, reason):
    data = json.loads(status_with([]))
    data["retention_gaps"] = [gap]
    record, why = parse(json.dumps(data))
    assert record is None and why.startswith(reason), why
