/* The content digest's message hash (audit/contract/digest.py): Spark's xxhash64(key, value, flags). XXH64 is
 * Debian's libxxhash-dev header, compiled in (XXH_INLINE_ALL): the plugin links to no libxxhash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "digest.h"
#include "kaudit_contract.h"

int64_t kaudit_message_hash(const void *key, size_t key_len, const void *value, size_t value_len) {
    uint64_t h = KAUDIT_DIGEST_SEED;
    uint32_t flags = 0;
    if (key == NULL) flags |= KAUDIT_DIGEST_KEY_NULL;
    else h = XXH64(key, key_len, h);
    if (value == NULL) flags |= KAUDIT_DIGEST_VALUE_NULL;
    else h = XXH64(value, value_len, h);
    /* Little-endian whatever the machine's order, as Spark's hashInt reads an int. */
    const unsigned char bytes[4] = {flags & 0xff, (flags >> 8) & 0xff, (flags >> 16) & 0xff, flags >> 24};
    return (int64_t)XXH64(bytes, sizeof bytes, h);
}
