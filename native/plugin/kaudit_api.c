/* What an application (or a test) asks the plugin, by the instance id of its client (kaudit.instance.id):
 * exported C functions, called from Python through ctypes (audit/io/plugin.py). */
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "kaudit_plugin.h"

/* Emits the counts so far and waits up to timeout_ms for the audit topic to take them: the records still
 * undelivered, or -1 when no client has that id. */
EXPORTED long long kaudit_flush(const char *instance_id, int timeout_ms) {
    pthread_mutex_lock(&registry_lock);
    Instance *instance = instance_find(instance_id);
    pthread_mutex_unlock(&registry_lock);
    /* A client is destroyed by its application, which is the one calling here: it cannot vanish meanwhile. */
    if (instance == NULL || !instance->is_producer) return -1;
    return emit_now(instance, timeout_ms);
}

/* Messages delivered and failed for good since the client started; 0, or -1 when no client has that id. */
EXPORTED int kaudit_totals(const char *instance_id, long long *delivered, long long *failed) {
    pthread_mutex_lock(&registry_lock);
    Instance *instance = instance_find(instance_id);
    if (instance != NULL) {
        pthread_mutex_lock(&instance->lock);
        *delivered = instance->delivered_total;
        *failed = instance->failed_total;
        pthread_mutex_unlock(&instance->lock);
    }
    pthread_mutex_unlock(&registry_lock);
    return instance != NULL ? 0 : -1;
}

/* Registered producers only: NULL when no producer has that id; the caller holds registry_lock. */
static Instance *producer_of(const char *instance_id) {
    Instance *instance = instance_find(instance_id);
    return instance != NULL && instance->is_producer ? instance : NULL;
}

/* What the producer holds and lost, into values[0..n): [0] tally entries (topic, window), [1] entries of the
 * open transaction, [2] count records made and not yet taken by the audit topic, [3] (topic, window) entries
 * dropped at kaudit.tally.max.entries since it started, [4] whether it is transactional without telling of its
 * transactions (its counts are all unknown). 0, or -1 when no producer has that id. */
EXPORTED int kaudit_backlog(const char *instance_id, long long *values, int n) {
    long long found[5] = {0};
    pthread_mutex_lock(&registry_lock);
    Instance *instance = producer_of(instance_id);
    if (instance != NULL) {
        pthread_mutex_lock(&instance->lock);
        found[0] = (long long)instance->tally.n_entries;
        found[1] = (long long)instance->transaction.n_entries;
        found[3] = instance->lost_windows;
        found[4] = instance->transactional && !instance->told;
        pthread_mutex_unlock(&instance->lock);
        pthread_mutex_lock(&instance->emit_lock);
        found[2] = instance->n_pending + (instance->emitter != NULL ? rdk.outq_len(instance->emitter) : 0);
        pthread_mutex_unlock(&instance->emit_lock);
    }
    pthread_mutex_unlock(&registry_lock);
    for (int i = 0; i < n && i < 5; i++) values[i] = found[i];
    return instance != NULL ? 0 : -1;
}

/* What the client's instance holds: tally entries (topic, window) since the last emission, and count records
 * waiting for the audit topic; 0, or -1 when no client has that id. */
EXPORTED int kaudit_held(const char *instance_id, long long *entries, long long *pending) {
    long long values[5];
    int found = kaudit_backlog(instance_id, values, 5);
    *entries = values[0];
    *pending = values[2];
    return found;
}

/* The application's transaction: TRANSACTION_BEGIN once begin_transaction returned, TRANSACTION_COMMIT once
 * commit_transaction returned (librdkafka flushes first: every acknowledgement of the transaction has passed
 * on_acknowledgement by then), TRANSACTION_ABORT once abort_transaction returned. 0, or -1 when no producer has
 * that id or the event is none of these. */
EXPORTED int kaudit_transaction(const char *instance_id, int event) {
    pthread_mutex_lock(&registry_lock);
    Instance *instance = producer_of(instance_id);
    pthread_mutex_unlock(&registry_lock);
    /* The application that destroys the client is the one calling here: it cannot vanish meanwhile. */
    return instance != NULL ? transaction_event(instance, event) : -1;
}

EXPORTED void kaudit_free(void *text) { free(text); }

/* ---- the contract's rules as this build compiled them, for the table of cases (tests/contract_cases.py) ---- */

EXPORTED long long kaudit_window_start(long long time_ms, long long window_ms) { return window_start_ms(time_ms, window_ms); }

/* The content digest's hash of one message; a NULL key or value is null. */
EXPORTED long long kaudit_hash_of(const void *key, long long key_len, const void *value, long long value_len) {
    return kaudit_message_hash(key, (size_t)key_len, value, (size_t)value_len);
}

/* The digest of n messages, merged one by one. */
EXPORTED long long kaudit_digest_of(const void *const *keys, const long long *key_lens, const void *const *values,
                                    const long long *value_lens, long long n) {
    int64_t digest = 0;
    for (long long i = 0; i < n; i++)
        digest = kaudit_digest_merge(digest, kaudit_message_hash(keys[i], (size_t)key_lens[i], values[i],
                                                                 (size_t)value_lens[i]));
    return digest;
}

/* The audit time; header_size < 0: no header. Returns whether it is usable. */
EXPORTED int kaudit_audit_time(int create_time, long long timestamp, const char *header_value, long long header_size,
                               long long now, long long *time_ms) {
    AuditTime when = audit_time_of(create_time, timestamp, header_size < 0 ? NULL : header_value,
                                   header_size < 0 ? 0 : (size_t)header_size, now);
    *time_ms = when.time_ms;
    return when.usable;
}

/* The count record of one entry with the given latencies (ms) and message hashes delivered on `partitions`
 * (hashes NULL: the topic's digest is off), failed, aborted and unknown as given, for the record's parity with audit/contract/record.py; malloc'd
 * (kaudit_free). */
EXPORTED char *kaudit_sample_record(const char *topic, long long window_start, const long long *latencies,
                                    const int *partitions, const long long *hashes, int n, long long failed,
                                    long long aborted, int unknown) {
    Settings settings = {.window_ms = KAUDIT_DEFAULT_WINDOW_MINUTES * KAUDIT_MS_PER_MINUTE};
    strcpy(settings.cluster, "dc1");
    strcpy(settings.service, "svc \"quoted\"\n");
    strcpy(settings.host, "h\xc3\xa9");
    strcpy(settings.instance_id, "svc-0123456789ab");
    Tally tally = {0};
    Entry *entry = tally_entry(&tally, topic, window_start);
    if (entry != NULL) entry->digest_off = hashes == NULL;
    for (int i = 0; entry != NULL && i < n; i++)
        entry_delivered(entry, partitions[i], 10, latencies[i], 1, hashes != NULL ? hashes[i] : 0);
    if (entry != NULL) {
        entry->send_failed = failed;
        entry->aborted = aborted;
        entry->unknown = unknown;
    }
    size_t length = 0;
    char *text = entry != NULL ? entry_record(entry, &settings, 7, 1764936000123LL, &length) : NULL;
    tally_free(&tally);
    return text;
}
