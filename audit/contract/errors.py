"""Exceptions of kafka-audit: one root, a subclass per area.

Kafka errors keep their librdkafka code (`code`) so callers can branch on it.
"""

from __future__ import annotations


class KafkaAuditError(Exception):
    """Root of every error raised by kafka-audit."""


class ConfigError(KafkaAuditError):
    """A configuration key is unknown, missing or has a bad value; the message names the key."""


class RecordError(KafkaAuditError):
    """An audit record does not follow the contract; the message says what is wrong."""


class ClusterError(KafkaAuditError):
    """A local Kafka cluster could not be started, reached or stopped."""


class SetupError(KafkaAuditError):
    """A part installed by `make setup` (a jar folder, Java) is missing."""


class JobError(KafkaAuditError):
    """A running job (the lake job, the reconciliation) failed; it resumes from its checkpoint when restarted."""


class HarnessError(KafkaAuditError):
    """The local harness (demo, soak, pipeline, supervised services) could not go on."""


class LakeError(KafkaAuditError):
    """The lake cannot be used as asked: no kafka-audit tables at its root, or another writer holds it."""


class KafkaClientError(KafkaAuditError):
    """A Kafka client call failed; `code` keeps the librdkafka error code when there is one."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
