"""The table of cases every implementation of the audit contract's per-message rules must pass.

The rules are stated once, in `audit.contract.audit_time` (which time a message is counted at),
`audit.contract.windows` (which window holds a time) and `audit.contract.digest` (the content digest of a
window's keys and values). Others state them again where a Python call per message would cost too much or
cannot run: the librdkafka plugin (`native/plugin/`, which the audited producer and the counter count
with), the counter's Python loop, and the lake's Spark columns (`audit/hops/lake/columns.py`).
`tests/test_contract_parity.py` and `tests/test_digest_parity.py` run every one of them over these cases;
the Spark ones in the Spark tier.
The Java producer interceptor (`jvm/interceptor/`) states the producer's forms again: `io.kaudit.AuditTime` a
message as acknowledged (`PRODUCER_CASES`), as sent (`JAVA_SEND_CASES`: where a failed send counts) and the window
of a time (`WINDOW_CASES`), `io.kaudit.ContentDigest` a message's hash (`DIGEST_CASES`) and, summed as its tally
sums them, a window's digest (`DIGEST_SET_CASES`).

The expected values are written out, not computed: the table is the specification the contract is held to
as well. Times stay within what Spark's Kafka source can hold (milliseconds times 1000 in 64 bits).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from audit.contract.record import AUDIT_TIME_HEADER as H
from audit.contract.record import MAX_AUDIT_TIME_MS as MAX


class Kind(Enum):
    """A consumed message's timestamp type."""

    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"
    NONE = "no timestamp type"  # a message format before 0.10


NOW_MS = 1_796_400_123_456  # the counting time handed to every implementation; its 10-minute window: NOW_W10
NOW_W10 = 1_796_400_000_000
B = 1_700_000_000_123  # a producer's time, in another window than NOW_MS and not on a window boundary
B_W10 = 1_699_999_800_000
B_TEXT = b"1700000000123"
L = 1_796_398_765_432  # a broker's LogAppendTime, in another window than NOW_MS
L_W10 = 1_796_398_200_000
MAX_W10 = 253_402_300_200_000


@dataclass(frozen=True)
class AuditTimeCase:
    """A consumed message, and the time and window every tier must count it at."""

    why: str
    kind: Kind
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...]
    audit_ms: int
    usable: bool
    window_start_ms: int
    window_minutes: int = 10

    def __str__(self) -> str:
        return self.why


def _create(why: str, ms: int, audit_ms: int, usable: bool, start: int, minutes: int = 10) -> AuditTimeCase:
    return AuditTimeCase(why, Kind.CREATE_TIME, ms, (), audit_ms, usable, start, minutes)


def _appended(why: str, headers: tuple, audit_ms: int = L, usable: bool = False, start: int = L_W10) -> AuditTimeCase:
    """A LogAppendTime message at broker time L with `headers`: the header's time, else L flagged."""
    return AuditTimeCase(why, Kind.LOG_APPEND_TIME, L, headers, audit_ms, usable, start)


def _header_refused(why: str, value: bytes | None) -> AuditTimeCase:
    return _appended(f"a kaudit-time header of {why} is no time: the broker's, flagged", ((H, value),))


# A message with CreateTime and no header is also what the audited producer can be asked to send: the
# producer on the plugin runs these (`PRODUCER_CASES`); what it counts at "now" is its own clock's.
CREATE_TIME_CASES = [
    _create("a CreateTime is the audit time", B, B, True, B_W10),
    _create("1-minute windows", B, B, True, 1_699_999_980_000, 1),
    _create("5-minute windows", B, B, True, 1_699_999_800_000, 5),
    _create("15-minute windows", B, B, True, 1_699_999_200_000, 15),
    _create("hour windows", B, B, True, 1_699_999_200_000, 60),
    _create("12-hour windows", B, B, True, 1_699_963_200_000, 720),
    _create("day windows start at UTC midnight", B, B, True, 1_699_920_000_000, 1440),
    _create("a time on a window boundary starts that window", 1_700_000_400_000, 1_700_000_400_000, True, 1_700_000_400_000),
    _create("a millisecond before a boundary is in the window before", 1_700_000_399_999, 1_700_000_399_999, True, B_W10),
    _create("1 ms after the epoch is far in the past but a real time", 1, 1, True, 0),
    _create("the last millisecond of 9999 is a time", MAX, MAX, True, MAX_W10),
    _create("0 is no time: counted now, flagged", 0, NOW_MS, False, NOW_W10),
    _create("-1 (no timestamp) is no time: counted now, flagged", -1, NOW_MS, False, NOW_W10),
    _create("a time before the epoch is no time: counted now, flagged", -86_400_000, NOW_MS, False, NOW_W10),
    _create("past 9999-12-31 no record can name the window: counted now, flagged", MAX + 1, NOW_MS, False, NOW_W10),
    _create("the far future (2**53 ms) is no time: counted now, flagged", 2**53, NOW_MS, False, NOW_W10),
]  # fmt: skip

AUDIT_TIME_CASES = [
    *CREATE_TIME_CASES,
    AuditTimeCase("a usable CreateTime wins over any header", Kind.CREATE_TIME, B, ((H, b"1600000000000"),), B, True, B_W10),
    AuditTimeCase("a far-future CreateTime: the producer's header", Kind.CREATE_TIME, 2**53, ((H, B_TEXT),), B, True, B_W10),
    AuditTimeCase("a CreateTime of 0 and a bad header: now, flagged", Kind.CREATE_TIME, 0, ((H, b"x"),), NOW_MS, False, NOW_W10),
    _appended("LogAppendTime without a header (a producer that does not audit): the broker's time, flagged", ()),
    _appended("LogAppendTime: the header's time", ((H, B_TEXT),), B, True, B_W10),
    _appended("several headers: the last one", ((H, b"1600000000000"), (H, B_TEXT)), B, True, B_W10),
    _appended("the last header decides, even when an earlier one was good", ((H, B_TEXT), (H, b"junk"))),
    _appended("a malformed header before a good one is passed over", ((H, b"junk"), (H, B_TEXT)), B, True, B_W10),
    _appended("other headers around it", (("app", b"1"), (H, B_TEXT), ("trace", b"abc")), B, True, B_W10),
    _appended("the header's name is case-sensitive", (("Kaudit-Time", B_TEXT),)),
    _appended("1 ms after the epoch in the header is a time", ((H, b"1"),), 1, True, 0),
    _appended("the last millisecond of 9999 in the header", ((H, str(MAX).encode()),), MAX, True, MAX_W10),
    _appended("20 digits with leading zeros", ((H, b"0000000" + B_TEXT),), B, True, B_W10),
    _header_refused("21 digits", b"00000000" + B_TEXT),
    _header_refused("0", b"0"),
    _header_refused("a time past 9999-12-31", str(MAX + 1).encode()),
    _header_refused("twenty nines", b"9" * 20),
    _header_refused("digits and a line break", B_TEXT + b"\n"),
    _header_refused("a leading space", b" " + B_TEXT),
    _header_refused("a plus sign", b"+" + B_TEXT),
    _header_refused("a minus sign", b"-" + B_TEXT),
    _header_refused("an exponent", b"1.7e12"),
    _header_refused("Arabic-Indic digits", "\u0661\u0667\u0660\u0660".encode()),
    _header_refused("bytes that are not UTF-8", b"\xff\xfe"),
    _header_refused("NUL bytes", b"\x00" * 8),
    _header_refused("nothing", b""),
    _header_refused("a null value", None),
    AuditTimeCase("LogAppendTime on day windows", Kind.LOG_APPEND_TIME, L, (), L, False, 1_796_342_400_000, 1440),
    AuditTimeCase("no timestamp type, with the header", Kind.NONE, -1, ((H, B_TEXT),), B, True, B_W10),
    AuditTimeCase("no timestamp type, no header: now, flagged", Kind.NONE, -1, (), NOW_MS, False, NOW_W10),
]  # fmt: skip

PRODUCER_CASES = CREATE_TIME_CASES


@dataclass(frozen=True)
class SendCase:
    """A record as a Java application sends it (a timestamp of its own, or None: the producer stamps its clock), and
    the time and window its message has: where the Java interceptor counts a failed send of it."""

    why: str
    timestamp_ms: int | None
    headers: tuple[tuple[str, bytes | None], ...]
    audit_ms: int
    usable: bool
    window_start_ms: int
    window_minutes: int = 10

    def __str__(self) -> str:
        return self.why


def _sent(case: AuditTimeCase) -> SendCase:
    fields = (case.timestamp_ms, case.headers, case.audit_ms, case.usable, case.window_start_ms, case.window_minutes)
    return SendCase(case.why, *fields)


def _sent_at_zero(case: AuditTimeCase) -> SendCase:
    """A LogAppendTime case's headers on a record sent with a timestamp of 0: the header's time, or now, flagged."""
    if case.usable:
        return SendCase(f"a timestamp of 0, and {case.why}", 0, case.headers, case.audit_ms, True, case.window_start_ms)
    return SendCase(f"a timestamp of 0, and {case.why}", 0, case.headers, NOW_MS, False, NOW_W10)


# What a record as sent becomes is the CreateTime case of the same time and headers. ProducerRecord refuses a
# negative timestamp, and unlike librdkafka a Java producer sends 0 as it is: with the headers of the LogAppendTime
# cases, a 0 asks the Java form of the kaudit-time header's rules.
JAVA_SEND_CASES = [
    *(_sent(case) for case in AUDIT_TIME_CASES if case.kind == Kind.CREATE_TIME and case.timestamp_ms >= 0),
    *(_sent_at_zero(case) for case in AUDIT_TIME_CASES if case.kind == Kind.LOG_APPEND_TIME and case.headers),
    SendCase("no timestamp of its own: the producer's clock, a CreateTime", None, (), NOW_MS, True, NOW_W10),
    SendCase("no timestamp of its own, and a header: still the producer's clock", None, ((H, B_TEXT),), NOW_MS, True, NOW_W10),
    SendCase("a CreateTime of 0 and the header: the header's time", 0, ((H, B_TEXT),), B, True, B_W10),
    SendCase("a CreateTime of 0, the header with a null value: now, flagged", 0, ((H, None),), NOW_MS, False, NOW_W10),
]  # fmt: skip


@dataclass(frozen=True)
class WindowCase:
    """A time and a window size, and the start of the window that holds the time."""

    why: str
    time_ms: int
    window_minutes: int
    start_ms: int

    def __str__(self) -> str:
        return self.why


WINDOW_CASES = [
    WindowCase("the epoch starts a window", 0, 10, 0),
    WindowCase("1 ms after it", 1, 10, 0),
    WindowCase("the last millisecond of the first window", 599_999, 10, 0),
    WindowCase("the second window", 600_000, 10, 600_000),
    WindowCase("1 ms before the epoch is in the window before it", -1, 10, -600_000),
    WindowCase("a boundary before the epoch", -600_000, 10, -600_000),
    WindowCase("1 ms before that boundary", -600_001, 10, -1_200_000),
    WindowCase("long before the epoch, day windows", -(2**53), 1440, -9_007_199_308_800_000),
    WindowCase("1-minute windows", B, 1, 1_699_999_980_000),
    WindowCase("30-minute windows", B, 30, 1_699_999_200_000),
    WindowCase("2-hour windows", B, 120, 1_699_999_200_000),
    WindowCase("day windows", B, 1440, 1_699_920_000_000),
    WindowCase("the last millisecond of 9999", MAX, 10, MAX_W10),
    WindowCase("the first millisecond of 10000", MAX + 1, 10, 253_402_300_800_000),
    WindowCase("2**53 ms", 2**53, 10, 9_007_199_254_200_000),
    WindowCase("2**62 ms", 2**62, 1, 4_611_686_018_427_360_000),
]


# -- the content digest (audit/contract/digest.py) --------------------------------------------------

MIB = bytes(range(256)) * 4096  # 1 MiB, every byte value 4096 times


@dataclass(frozen=True)
class DigestCase:
    """A message's key and value (None: null), and the hash every tier must give it."""

    why: str
    key: bytes | None
    value: bytes | None
    hash: int

    def __str__(self) -> str:
        return self.why


AB_C = DigestCase("key ab + value c", b"ab", b"c", 9_011_611_272_326_642_010)
A_BC = DigestCase("key a + value bc", b"a", b"bc", -8_470_012_599_991_523_025)
NULL_A = DigestCase("a null key + value a", None, b"a", -4_810_547_614_043_336_770)
A_NULL = DigestCase("key a + a null value", b"a", None, -8_209_314_916_407_280_043)
K_NULL = DigestCase("a null value (a tombstone)", b"k", None, -873_462_038_697_366_752)
K_EMPTY = DigestCase("an empty value", b"k", b"", 360_462_641_179_304_129)
NULL_V = DigestCase("a null key", None, b"v", 7_981_329_072_555_524_639)
EMPTY_V = DigestCase("an empty key", b"", b"v", 5_149_761_701_657_753_396)
# Each pair must hash apart: the fields are framed, and a null is not an empty one.
FRAMING_PAIRS = [(AB_C, A_BC), (NULL_A, A_NULL), (K_NULL, K_EMPTY), (NULL_V, EMPTY_V)]

DIGEST_CASES = [
    DigestCase("an empty key and an empty value", b"", b"", 5_797_484_349_436_202_336),
    DigestCase("a null key, a value", None, b"value", 3_329_110_183_366_156_297),
    DigestCase("a key, a null value", b"key", None, 6_616_002_922_550_507_364),
    DigestCase("a null key and a null value", None, None, 6_258_084_186_791_473_711),
    DigestCase("every byte value, in the key and (reversed) the value", bytes(range(256)), bytes(range(255, -1, -1)), 4_561_848_916_616_392_528),
    DigestCase("a 1 MiB value", b"key", MIB, -392_758_530_597_681_817),
    DigestCase("a 1 MiB key, a null value", MIB, None, 5_412_281_610_126_126_659),
    DigestCase("a key of one 32-byte XXH64 stripe, a value one byte past it", b"k" * 32, b"v" * 33, 4_749_577_741_113_543_980),
    DigestCase("UTF-8 bytes of non-ASCII text", "clé".encode(), "naïve 日本語 🙂".encode(), -8_322_794_555_323_694_844),
    *(case for pair in FRAMING_PAIRS for case in pair),
]  # fmt: skip


@dataclass(frozen=True)
class DigestSetCase:
    """A window's messages, (key, value) each, and the digest every tier must give them."""

    why: str
    messages: tuple[tuple[bytes | None, bytes | None], ...]
    digest: int
    wraps: bool = False  # the unsigned sum of the hashes passes 2**64

    def __str__(self) -> str:
        return self.why


WINDOW_20 = tuple((f"k{i}".encode(), f"v{i}".encode()) for i in range(20))

DIGEST_SET_CASES = [
    DigestSetCase("no message: 0", (), 0),
    DigestSetCase("one message: its hash", ((b"ab", b"c"),), 9_011_611_272_326_642_010),
    DigestSetCase("two hashes whose unsigned sum passes 2**64", ((None, b"a"), (b"a", None)), 5_426_881_543_258_934_803, True),
    DigestSetCase("a message twice: its hash doubled, wrapped", ((None, b"a"), (None, b"a")), 8_825_648_845_622_878_076, True),
    DigestSetCase("every case of the table", tuple((c.key, c.value) for c in DIGEST_CASES), -8_744_823_804_760_359_434, True),
    DigestSetCase("20 messages", WINDOW_20, 784_699_507_944_559_755, True),
    DigestSetCase("the 20 with 5 lost and 5 others duplicated: the same count", WINDOW_20[5:] + WINDOW_20[5:10], 3_231_887_984_812_059_298, True),
    DigestSetCase("1,000 messages", tuple((f"key-{i}".encode(), f"value-{i}".encode()) for i in range(1000)), 637_782_717_912_298_935, True),
]  # fmt: skip
