/* The content digest of a window (audit/contract/digest.py, which states the rule) in C, for the plugin's
 * loops. tests/contract_cases.py holds it, through the plugin's exported functions, to the contract. */
#ifndef KAUDIT_DIGEST_H
#define KAUDIT_DIGEST_H

#include <stddef.h>
#include <stdint.h>

/* The hash of one message: a NULL key or value is null; a non-NULL one of length 0 is empty. */
int64_t kaudit_message_hash(const void *key, size_t key_len, const void *value, size_t value_len);

/* The digest of the union of the messages of two digests (or message hashes): their sum modulo 2^64. */
static inline int64_t kaudit_digest_merge(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

#endif
