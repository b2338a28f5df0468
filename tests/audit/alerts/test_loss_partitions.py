"""Where the loss is, pure: partitions short at a tier against the reference, and how the emails and the UI
say it (over Delta tables and SMTP: test_alerts.py; in the browser: tests/dashboards/test_browser.py)."""

from __future__ import annotations

from collections import namedtuple
from datetime import UTC, datetime

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.alerts.loss_partitions import describe, partition_losses
from audit.contract.completeness import partition_gaps

START = pd.Timestamp(datetime(2025, 3, 4, 10, 40, tzinfo=UTC))
Row = namedtuple("Row", "origin_cluster topic window_start tier reference_tier")
LAKE = Row("dc1", "orders", START, "lake", "producer")


def counts(**by_tier) -> pd.DataFrame:
    """tier_counts rows of dc1.orders in START: tier=by_partition (a dict, Arrow's list of pairs, or None)."""
    return pd.DataFrame(
        [
            dict(origin_cluster="dc1", topic="orders", window_start=START, tier=tier, by_partition=parts)
            for tier, parts in by_tier.items()
        ]
    )


@pytest.mark.parametrize(
    "frame, expected, why",
    [
        (counts(producer={0: 10, 1: 10, 2: 10}, lake={0: 10, 1: 6, 2: 3}), {1: 4, 2: 7}, "two partitions short"),
        (counts(producer={0: 10, 1: 10}, lake={0: 13, 1: 6}), {1: 4}, "a duplicate elsewhere hides nothing"),
        (counts(producer={0: 10, 1: 10}, lake={0: 10}), {1: 10}, "a partition the tier never counted"),
        (counts(producer=[(0, 10), (1, 10)], lake=[(0, 10), (1, 9)]), {1: 1}, "Arrow maps as pairs"),
        (counts(producer={0: 10}, lake={0: 10}), {}, "nothing short"),
        (counts(producer={0: 10, 1: 10}, lake=None), None, "the tier reported no partitions"),
        (counts(producer={0: 10}), None, "the tier counted nothing in the window"),
        (counts(), None, "no counts at all"),
        (counts(producer={0: 10}, lake={0: 1}).assign(topic="clicks"), None, "another topic's counts"),
    ],
)
def test_partitions_short_at_a_tier(frame, expected, why):
    assert partition_losses(frame, LAKE) == expected, why


@pytest.mark.parametrize(
    "losses, text",
    [
        ({2: 40, 0: 5}, "40 in partition 2, 5 in partition 0"),
        ({0: 5, 2: 5}, "5 in partition 0, 5 in partition 2"),
        ({7: 1_234}, "1,234 in partition 7"),
        (
            {p: 100 - p for p in range(12)},
            ", ".join(f"{100 - p} in partition {p}" for p in range(10)) + ", 179 in 2 other partitions",
        ),
        ({}, ""),
        (None, ""),
    ],
)
def test_the_words_for_it(losses, text):
    assert describe(losses) == text


partition_counts = st.dictionaries(st.integers(0, 50), st.integers(0, 10**6), max_size=20)


@given(expected=partition_counts, observed=partition_counts)
def test_the_partitions_short_add_up_to_the_window_s_missing(expected, observed):
    losses = partition_losses(counts(producer=expected, lake=observed), LAKE)
    assert sum(losses.values()) == partition_gaps(expected, observed)[0]
    assert all(n > 0 and observed.get(p, 0) < expected[p] for p, n in losses.items())
    named = describe(losses)
    assert all(f"in partition {p}" in named for p in losses) or len(losses) > 10
