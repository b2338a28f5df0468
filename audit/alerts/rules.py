"""Which alerts a state of the books calls for: pure functions of the completeness, status and log frames.

Loss, over and mismatch only for windows FINAL for the tier, recovery for a window alerted on that is now
complete, lag for a tier whose watermark is too old, restated for a window that flips between complete
and incomplete (or over, or mismatch) again after its alert was sent; each with the likely cause."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from audit.alerts.loss_partitions import NAMED_PARTITIONS, describe, partition_losses
from audit.contract.flows import is_placeholder, silent_cause
from audit.contract.names import LAKE_TIER
from audit.contract.retention import union_skipped
from audit.contract.watermarks import is_real_watermark

ALERTING_STATUS = {"incomplete": "loss", "over": "over", "mismatch": "mismatch"}
# The kinds about a final window's verdict: a recovery follows each once the window is complete.
WINDOW_KINDS = tuple(ALERTING_STATUS.values())
KIND_TITLES = {
    "loss": "LOSS",
    "over": "DUPLICATES",
    "mismatch": "MISMATCH",
    "recovery": "RECOVERED",
    "lag": "LAG",
    "drop": "DROP",
    "restated": "RESTATED",
}
RESTATED = "restated"
WINDOW_FORMAT = "%Y-%m-%d %H:%M UTC"
MISMATCH_CAUSE = "counts balance, content differs: a changed message, or a loss hidden by a duplicate"


@dataclass(frozen=True)
class Alert:
    """One row of the alerts log before delivery: what is wrong, where, and the likely cause."""

    kind: str
    origin_cluster: str
    topic: str
    window_start: datetime
    tier: str
    status: str
    expected: int | None = None
    observed: int | None = None
    missing: int | None = None
    duplicated: int | None = None
    completeness_pct: float | None = None
    cause: str = ""

    @property
    def logical_topic(self) -> str:
        return f"{self.origin_cluster}.{self.topic}"

    @property
    def alert_id(self) -> str:
        # A window can be restated again and again: each restatement, named in the cause, is its own alert.
        occurrence = self.cause if self.kind == RESTATED else ""
        return alert_id(
            self.kind, self.origin_cluster, self.topic, self.window_start, self.tier, self.status, occurrence
        )

    @classmethod
    def of_row(cls, row, *, kind: str, status: str, cause: str) -> Alert:
        """The alert about a completeness (or alerts-log) row: its window, tier and figures."""
        return cls(
            kind=kind,
            origin_cluster=row.origin_cluster,
            topic=row.topic,
            window_start=row.window_start,
            tier=row.tier,
            status=status,
            expected=as_int(row.expected),
            observed=as_int(row.observed),
            missing=as_int(row.missing),
            duplicated=as_int(row.duplicated),
            completeness_pct=as_float(row.completeness_pct),
            cause=cause,
        )


def alert_id(
    kind: str, origin_cluster: str, topic: str, window_start: datetime, tier: str, status: str, occurrence: str = ""
) -> str:
    """Deterministic id of an alert: the same window, tier, kind and status (and occurrence, for alerts a
    window can have more than once) always give the same id."""
    moment = (
        pd.Timestamp(window_start).tz_convert("UTC")
        if pd.Timestamp(window_start).tzinfo
        else pd.Timestamp(window_start).tz_localize("UTC")
    )
    parts = (kind, origin_cluster, topic, moment.strftime("%Y-%m-%dT%H:%M:%SZ"), tier, status)
    text = "|".join((*parts, occurrence) if occurrence else parts)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# -- deciding (pure) ------------------------------------------------------------------------------


def window_key(frame: pd.DataFrame) -> pd.Series:
    return (
        frame["origin_cluster"] + "|" + frame["topic"] + "|" + frame["window_start"].astype(str) + "|" + frame["tier"]
    )


def as_int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def as_float(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def window_alerts(
    completeness: pd.DataFrame,
    tier_status: pd.DataFrame,
    tier_counts: pd.DataFrame,
    *,
    now: datetime,
    lag_minutes: float,
    retention_gaps: pd.DataFrame | None = None,
) -> list[Alert]:
    """Loss, over and mismatch alerts: rows FINAL for their tier whose status is incomplete, over or mismatch."""
    if completeness.empty:
        return []
    rows = completeness[
        completeness["final"].fillna(False).astype(bool) & completeness["status"].isin(list(ALERTING_STATUS))
    ]
    return [
        Alert.of_row(
            row,
            kind=ALERTING_STATUS[row.status],
            status=row.status,
            cause=likely_cause(
                row,
                completeness,
                tier_status,
                tier_counts,
                now=now,
                lag_minutes=lag_minutes,
                retention_gaps=retention_gaps,
            ),
        )
        for row in rows.itertuples(index=False)
    ]


def recovery_alerts(completeness: pd.DataFrame, log_frame: pd.DataFrame) -> list[Alert]:
    """A recovery for every window and tier with a SENT loss, over or mismatch alert that is now complete."""
    if completeness.empty or log_frame.empty:
        return []
    alerted = log_frame[log_frame["kind"].isin(WINDOW_KINDS) & (log_frame["state"] == "sent")]
    complete = completeness[completeness["status"] == "complete"]
    if alerted.empty or complete.empty:
        return []
    recovered = complete[window_key(complete).isin(set(window_key(alerted)))]
    return [
        Alert.of_row(row, kind="recovery", status="complete", cause="the window is complete now")
        for row in recovered.itertuples(index=False)
    ]


def restatement_alerts(restatements: pd.DataFrame, log_frame: pd.DataFrame) -> list[Alert]:
    """A restated alert for each restatement that flips a window between complete and incomplete (or over)
    once the alert of its new verdict is in the log already: that loss, over or recovery alert was decided
    before, so its id cannot fire again, and without this one the flip would go unsaid."""
    if restatements is None or restatements.empty or log_frame.empty:
        return []
    before, after = restatements["before_status"], restatements["after_status"]
    alerting = list(ALERTING_STATUS)
    flips = restatements[
        ((before == "complete") & after.isin(alerting)) | (before.isin(alerting) & (after == "complete"))
    ]
    created = dict(zip(log_frame["alert_id"], log_frame["created_at"], strict=True))
    alerts = []
    for row in flips.itertuples(index=False):
        earlier_kind = ALERTING_STATUS.get(row.after_status, "recovery")
        earlier = created.get(
            alert_id(earlier_kind, row.origin_cluster, row.topic, row.window_start, row.tier, row.after_status)
        )
        if earlier is None or not earlier < row.restated_at:
            continue  # the loss, over or recovery alert of the new verdict says it (or said it after this)
        expected, observed = as_int(row.after_expected) or 0, as_int(row.after_observed) or 0
        alerts.append(
            Alert(
                kind=RESTATED,
                origin_cluster=row.origin_cluster,
                topic=row.topic,
                window_start=row.window_start,
                tier=row.tier,
                status=row.after_status,
                expected=expected,
                observed=observed,
                missing=max(expected - observed, 0),
                duplicated=max(observed - expected, 0),
                completeness_pct=100.0 * observed / expected if expected else None,
                cause=(
                    f"restated {row.before_status} -> {row.after_status} at "
                    f"{pd.Timestamp(row.restated_at).strftime(WINDOW_FORMAT)}: expected "
                    f"{as_int(row.before_expected) or 0:,} -> {expected:,}, observed "
                    f"{as_int(row.before_observed) or 0:,} -> {observed:,} (restatement {row.restatement_id})"
                ),
            )
        )
    return alerts


def lag_alerts(
    tier_status: pd.DataFrame, *, now: datetime, lag_minutes: float, window_minutes: int, reference_tier: str
) -> list[Alert]:
    """A lag alert per tier and topic whose watermark is more than `lag_minutes` behind `now`.

    Its window is the one holding the watermark, so a tier stuck at one point alerts once, and once
    more for each further window it crawls into while still behind.
    A tier with no watermark yet (the epoch: nothing delivered) has its alert in the window of `now`.
    """
    if tier_status.empty:
        return []
    limit = pd.Timestamp(now) - pd.Timedelta(minutes=lag_minutes)
    behind = tier_status[
        (tier_status["tier"] != reference_tier) & tier_status["watermark"].notna() & (tier_status["watermark"] < limit)
    ]
    size = pd.Timedelta(minutes=window_minutes)
    alerts = []
    for row in behind.itertuples(index=False):
        minutes = (pd.Timestamp(now) - row.watermark) / pd.Timedelta(minutes=1)
        real = is_real_watermark(row.watermark)
        if is_placeholder(row.reporters):  # a declared flow's target that nothing has reached
            parts = [silent_cause(row.tier, row.logical_topic)]
        elif not real:  # the epoch: a reporter with lag that has not delivered anything yet, no time to show
            parts = [f"{row.tier} has received nothing yet of what is waiting for it"]
        else:
            parts = [f"{row.tier} is {minutes:.0f} min behind (watermark {row.watermark.strftime(WINDOW_FORMAT)})"]
        if as_int(row.lag):
            parts.append(f"lag {int(row.lag):,} messages")
        if bool(row.stalled):
            parts.append(f"stalled replicator ({row.reporters})")
        elif row.reporters:
            parts.append(f"reported by {row.reporters}")
        alerts.append(
            Alert(
                kind="lag",
                origin_cluster=row.origin_cluster,
                topic=row.topic,
                # With no watermark, the window of `now`: once per window while nothing arrives, never 1970.
                window_start=(row.watermark if real else pd.Timestamp(now)).floor(size),
                tier=row.tier,
                status="lagging",
                missing=as_int(row.lag),
                cause="; ".join(parts),
            )
        )
    return alerts


def retention_causes(row, tiers: tuple[str, ...], retention_gaps: pd.DataFrame | None) -> list[str]:
    """'deleted by retention before <tier> read it (N offsets skipped)' for each of `tiers` whose reported
    retention gaps of the row's topic may hold messages of the row's window: a gap lies between the audit
    times of the messages read either side of it (an unknown side is open)."""
    if retention_gaps is None or retention_gaps.empty:
        return []
    start = pd.Timestamp(row.window_start)
    end = pd.Timestamp(getattr(row, "window_end", None) or start + pd.Timedelta(minutes=int(row.window_minutes)))
    gaps = retention_gaps[
        (retention_gaps["origin_cluster"] == row.origin_cluster)
        & (retention_gaps["topic"] == row.topic)
        & (retention_gaps["after_time"].isna() | (retention_gaps["after_time"] < end))
        & (retention_gaps["before_time"].isna() | (retention_gaps["before_time"] >= start))
    ]
    causes = []
    for tier in dict.fromkeys(tiers):
        mine = gaps[gaps["tier"] == tier]
        if mine.empty:
            continue
        skipped = sum(
            union_skipped(zip(group["from_offset"], group["to_offset"], strict=True))
            for _, group in mine.groupby(["cluster", "seen_topic", "partition"])
        )
        causes.append(f"deleted by retention before {tier} read it ({skipped:,} offsets skipped)")
    return causes


def likely_cause(
    row,
    completeness: pd.DataFrame,
    tier_status: pd.DataFrame,
    tier_counts: pd.DataFrame,
    *,
    now: datetime,
    lag_minutes: float,
    retention_gaps: pd.DataFrame | None = None,
) -> str:
    """The evidence for one incomplete, over or mismatch window, as a sentence: where it went wrong and why it may
    have."""
    previous, first_bad = first_bad_hop(row, completeness)
    hop = f"{previous} -> {first_bad}"
    if row.status == "mismatch":
        return _mismatch_cause(row, previous, first_bad)
    if row.status == "incomplete":
        causes = retention_causes(row, (first_bad, row.tier), retention_gaps)
        causes.append(_loss_cause(row, previous, first_bad, tier_counts))
    else:
        causes = [
            f"duplicated between {hop}: an at-least-once hop delivered some messages twice "
            "(a replicator or lake job restart)"
        ]
    if where := describe_partitions(mismatched_partitions(row)):  # a worse status keeps naming them
        causes.append(f"and content differs though the counts balance in {where}")
    causes.extend(_status_causes(row, (first_bad, row.tier), tier_status, now=now, lag_minutes=lag_minutes))
    causes.extend(_send_failed_causes(row, tier_counts))
    return "; ".join(causes)


def first_bad_hop(row, completeness: pd.DataFrame) -> tuple[str, str]:
    """(the tier before, the first tier short of it, or over it) on the path to `row.tier` in `row`'s window."""
    same = completeness[
        (completeness["origin_cluster"] == row.origin_cluster)
        & (completeness["topic"] == row.topic)
        & (completeness["window_start"] == row.window_start)
    ].sort_values("tier_order")
    previous = row.reference_tier
    for other in same[same["tier_order"] < row.tier_order].itertuples(index=False):
        if (
            (row.status == "incomplete" and as_int(other.missing))
            or (row.status == "over" and as_int(other.duplicated))
            or (row.status == "mismatch" and other.status == "mismatch")
        ):
            return previous, other.tier
        previous = other.tier
    return previous, row.tier


def _hop_name(row, previous: str, first_bad: str) -> str:
    """What moves messages from `previous` into `first_bad`: the origin cluster's brokers (an acknowledged message
    Kafka lost, as an acks=1 leader dies) or its counter, the replicator or the lake job."""
    if first_bad == LAKE_TIER:
        return "the lake job"
    if previous == row.reference_tier and first_bad == row.origin_cluster:
        return f"the {first_bad} brokers or its counter"
    return "the replicator"


def _loss_cause(row, previous: str, first_bad: str, tier_counts: pd.DataFrame) -> str:
    """Which hop lost messages (the counter, the replicator or the lake job), and in which partitions."""
    what = _hop_name(row, previous, first_bad)
    where = describe(partition_losses(tier_counts, row))
    return (
        f"lost between {previous} -> {first_bad} ({what}): {previous} counted {as_int(row.expected) or 0:,}, "
        f"{first_bad} is short" + (f"; {row.tier} misses {where}" if where else "")
    )


def _mismatch_cause(row, previous: str, first_bad: str) -> str:
    """The content digest of some partitions differs though the counts balance: where, and from which hop on."""
    cause = f"{MISMATCH_CAUSE}; first between {previous} -> {first_bad} ({_hop_name(row, previous, first_bad)})"
    where = describe_partitions(mismatched_partitions(row))
    return f"{cause}; {row.tier} differs from {row.reference_tier} in {where}" if where else cause


def mismatched_partitions(row) -> list[int]:
    """The row's `mismatched_partitions` (completeness), in order; none when the row does not name them."""
    partitions = getattr(row, "mismatched_partitions", None)
    if partitions is None or (not hasattr(partitions, "__len__") and pd.isna(partitions)):
        return []
    return sorted(int(p) for p in partitions)


def describe_partitions(partitions: list[int]) -> str:
    """`partition 2`, `partitions 0, 2`; past NAMED_PARTITIONS the rest as `and 5 more`."""
    if not partitions:
        return ""
    named = ", ".join(map(str, partitions[:NAMED_PARTITIONS]))
    more = f" and {len(partitions) - NAMED_PARTITIONS} more" if len(partitions) > NAMED_PARTITIONS else ""
    return f"partition{'s' if len(partitions) > 1 else ''} {named}{more}"


def _status_causes(
    row, tiers: tuple[str, ...], tier_status: pd.DataFrame, *, now: datetime, lag_minutes: float
) -> list[str]:
    """What the status of `tiers` for `row`'s topic says: a stalled replicator, a lag, a lake job behind."""
    causes = []
    status = tier_status[(tier_status["origin_cluster"] == row.origin_cluster) & (tier_status["topic"] == row.topic)]
    behind = pd.Timestamp(now) - pd.Timedelta(minutes=lag_minutes)
    for tier in dict.fromkeys(tiers):
        for info in status[status["tier"] == tier].itertuples(index=False):
            if bool(info.stalled):
                causes.append(f"a replicator into {tier} is stalled ({info.reporters})")
            elif as_int(info.lag):
                causes.append(f"{tier} has a lag of {int(info.lag):,} messages")
            if tier == LAKE_TIER and pd.notna(info.watermark) and info.watermark < behind:
                causes.append("the lake job is behind")
    return causes


def _send_failed_causes(row, tier_counts: pd.DataFrame) -> list[str]:
    """The producers' failed sends in `row`'s window, when there were any."""
    if tier_counts.empty:
        return []
    failed = (
        tier_counts[
            (tier_counts["origin_cluster"] == row.origin_cluster)
            & (tier_counts["topic"] == row.topic)
            & (tier_counts["window_start"] == row.window_start)
            & (tier_counts["tier"] == row.reference_tier)
        ]["send_failed"]
        .fillna(0)
        .sum()
    )
    return [f"the producers failed to send {int(failed):,} message(s) in this window"] if failed else []
