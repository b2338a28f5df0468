"""The content digest's properties (audit/contract/digest.py); its values are in the table of cases
(tests/contract_cases.py, tests/test_digest_parity.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from audit.contract.digest import EMPTY_DIGEST, digest_of, merge, message_hash

fields = st.none() | st.binary(max_size=64)
messages = st.lists(st.tuples(fields, fields), max_size=40)


@given(messages, st.randoms(use_true_random=False))
def test_the_order_does_not_matter(window, random):
    shuffled = list(window)
    random.shuffle(shuffled)
    assert digest_of(shuffled) == digest_of(window)


@given(messages, st.data())
def test_merging_the_parts_of_a_split_gives_the_whole(window, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(window)), max_size=4)))
    parts = [window[a:b] for a, b in zip([0, *cuts], [*cuts, len(window)], strict=True)]
    assert merge(*(digest_of(part) for part in parts)) == digest_of(window)
    assert merge(digest_of(window), EMPTY_DIGEST) == digest_of(window)


@given(st.binary(min_size=1, max_size=64), fields, st.data())
def test_a_changed_byte_changes_the_hash(key, value, data):
    at = data.draw(st.integers(0, len(key) - 1))
    changed = bytes([*key[:at], (key[at] + data.draw(st.integers(1, 255))) % 256, *key[at + 1 :]])
    assert message_hash(changed, value) != message_hash(key, value)
    assert message_hash(value, changed) != message_hash(value, key)


@given(st.lists(st.tuples(fields, fields), min_size=10, max_size=40, unique=True), st.data())
def test_five_lost_and_five_duplicated_change_the_digest_though_the_count_balances(window, data):
    lost = data.draw(st.lists(st.sampled_from(range(len(window))), min_size=5, max_size=5, unique=True))
    kept = [message for i, message in enumerate(window) if i not in lost]
    duplicated = data.draw(st.lists(st.sampled_from(kept), min_size=5, max_size=5))
    received = kept + duplicated
    assert len(received) == len(window)
    assert digest_of(received) != digest_of(window)


@given(st.binary(max_size=64))
def test_a_null_is_not_empty(field):
    assert message_hash(field, None) != message_hash(field, b"")
    assert message_hash(None, field) != message_hash(b"", field)


def test_a_hash_and_a_digest_are_signed_64_bit_integers():
    hashes = [message_hash(bytes([i]), None) for i in range(256)]
    assert all(-(2**63) <= h < 2**63 for h in [*hashes, digest_of([(bytes([i]), None) for i in range(256)])])
    assert any(h < 0 for h in hashes)
    assert merge(2**63 - 1, 1) == -(2**63)
    assert merge() == EMPTY_DIGEST == digest_of([])
