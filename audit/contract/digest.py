"""The content digest of a window (DESIGN invariant 11): it tells a window whose counts balance while its
content differs (a changed message, or a loss hidden by a duplicate) from a complete one.

Each message's hash is Spark's built-in `xxhash64(key, value, flags)` over BINARY key and value columns
and an INT `flags`, so the lake job computes it with no UDF. Written out, with XXH64 the standard 64-bit
xxHash and every intermediate value an unsigned 64-bit seed:

    h = 42                                          (DIGEST_SEED: Spark's seed for xxhash64)
    if the key is not null:   h = XXH64(key bytes, seed=h)
    if the value is not null: h = XXH64(value bytes, seed=h)
    h = XXH64(flags as 4 little-endian bytes, seed=h)
    flags = KEY_NULL (1) if the key is null, | VALUE_NULL (2) if the value is null

and the message's hash is that h read as a signed 64-bit integer (two's complement), as Spark's BIGINT.
Spark skips a null column (the seed passes on unchanged) and hashes an INT as XXH64 of its 4
little-endian bytes; the flags put the nulls back in. Chaining the seeds frames the fields: key `ab` +
value `c` hashes differently from key `a` + value `bc`, a null from an empty value, and a null key +
value `a` from key `a` + a null value.

The digest of a (topic, window, partition, tier) is the sum modulo 2**64 of its messages' hashes, as a
signed 64-bit integer: independent of the order, and two digests merge by wrapping addition. The digest
of no message is 0. Headers and timestamps stay out: a replicator adds headers, a LogAppendTime broker
restamps.

The librdkafka plugin (native/plugin/digest.c, with these constants from native/build.py) and the lake's
Spark columns (`audit.hops.lake.columns`) state the rule again; tests/contract_cases.py holds them to it.
"""

from __future__ import annotations

from collections.abc import Iterable

import xxhash

DIGEST_SEED = 42  # Spark's XxHash64 seed: F.xxhash64 cannot take another
KEY_NULL = 1
VALUE_NULL = 2
EMPTY_DIGEST = 0
_BITS = 64
_MODULUS = 1 << _BITS
_MASK = _MODULUS - 1


def _signed(unsigned: int) -> int:
    unsigned &= _MASK
    return unsigned - _MODULUS if unsigned >> (_BITS - 1) else unsigned


def message_hash(key: bytes | None, value: bytes | None) -> int:
    """The hash of one message's key and value (None: null), a signed 64-bit integer."""
    h = DIGEST_SEED
    flags = 0
    if key is None:
        flags |= KEY_NULL
    else:
        h = xxhash.xxh64_intdigest(key, seed=h)
    if value is None:
        flags |= VALUE_NULL
    else:
        h = xxhash.xxh64_intdigest(value, seed=h)
    return _signed(xxhash.xxh64_intdigest(flags.to_bytes(4, "little"), seed=h))


def merge(*digests: int) -> int:
    """The digest of the union of the messages of `digests` (or of message hashes): their wrapping sum."""
    return _signed(sum(digests))


def digest_of(messages: Iterable[tuple[bytes | None, bytes | None]]) -> int:
    """The digest of (key, value) messages."""
    return _signed(sum(message_hash(key, value) for key, value in messages))
