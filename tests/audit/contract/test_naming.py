"""The audit topic under each naming policy: the topic itself and every replicated copy of it are the audit
topic, never a data topic (issue 60: `dc1._audit` listed as a data topic)."""

from __future__ import annotations

import pandas as pd

from audit.contract.naming import IdentityNaming, PrefixNaming, data_topic_rows, is_audit_topic

PREFIX = PrefixNaming(frozenset({"dc1", "dc2", "aggregate"}))


def test_the_audit_topic_and_its_replicated_copies_are_the_audit_topic():
    assert is_audit_topic(PREFIX, "dc1", "_audit", "_audit")
    assert is_audit_topic(PREFIX, "aggregate", "dc1._audit", "_audit")
    assert is_audit_topic(PREFIX, "lake", "aggregate.dc1._audit", "_audit")
    assert is_audit_topic(IdentityNaming(), "aggregate", "_audit", "_audit")


def test_data_topics_are_not_the_audit_topic():
    assert not is_audit_topic(PREFIX, "aggregate", "dc1.orders", "_audit")
    assert not is_audit_topic(PREFIX, "aggregate", "dc9._audit", "_audit")  # dc9 is no cluster: a local topic
    assert not is_audit_topic(IdentityNaming(), "aggregate", "dc1._audit", "_audit")


def test_data_topic_rows_drop_the_rows_about_the_audit_topic():
    # The books name a row's topic by its origin: the replicator's status about dc1's `_audit` is
    # (origin_cluster dc1, topic `_audit`, logical_topic `dc1._audit`).
    rows = pd.DataFrame(
        {
            "origin_cluster": ["dc1", "dc1", "dc2"],
            "topic": ["orders", "_audit", "_kaudit_audit"],
            "logical_topic": ["dc1.orders", "dc1._audit", "dc2._kaudit_audit"],
        }
    )
    assert data_topic_rows(rows, "_audit")["logical_topic"].tolist() == ["dc1.orders", "dc2._kaudit_audit"]
    assert data_topic_rows(rows, "_kaudit_audit")["logical_topic"].tolist() == ["dc1.orders", "dc1._audit"]
    assert data_topic_rows(rows.iloc[0:0], "_audit").empty
