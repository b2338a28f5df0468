/* Counts per (topic, window start) since the last emission; the audit time rule.
 * Guarded by the instance's lock (instance.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digest.h"
#include "kaudit_plugin.h"

/* ---- audit/contract/audit_time.py in C ------------------------------------------------------- */

static int64_t parse_header_time(const char *value, size_t size) {
    if (value == NULL || size == 0 || size > KAUDIT_AUDIT_TIME_HEADER_MAX_DIGITS) return -1;
    int64_t time_ms = 0;
    for (size_t i = 0; i < size; i++) {
        if (value[i] < '0' || value[i] > '9') return -1;
        if (time_ms > KAUDIT_MAX_AUDIT_TIME_MS) return -1; /* far beyond usable: stop before it overflows */
        time_ms = time_ms * 10 + (value[i] - '0');
    }
    return is_usable_time(time_ms, KAUDIT_MAX_AUDIT_TIME_MS) ? time_ms : -1;
}

AuditTime audit_time_of(int create_time, int64_t timestamp, const char *header_value, size_t header_size, int64_t now) {
    if (create_time && is_usable_time(timestamp, KAUDIT_MAX_AUDIT_TIME_MS)) return (AuditTime){timestamp, 1};
    int64_t from_header = parse_header_time(header_value, header_size);
    if (from_header > 0) return (AuditTime){from_header, 1};
    return (AuditTime){is_usable_time(timestamp, KAUDIT_MAX_AUDIT_TIME_MS) ? timestamp : now, 0};
}

AuditTime message_audit_time(const rd_kafka_message_t *message, int64_t now) {
    rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    int64_t timestamp = rdk.message_timestamp(message, &type);
    int create_time = type == RD_KAFKA_TIMESTAMP_CREATE_TIME;
    if (create_time && is_usable_time(timestamp, KAUDIT_MAX_AUDIT_TIME_MS)) return (AuditTime){timestamp, 1};
    rd_kafka_headers_t *headers = NULL;
    const void *value = NULL;
    size_t size = 0;
    if (rdk.message_headers(message, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rdk.header_get_last(headers, KAUDIT_AUDIT_TIME_HEADER, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR)
        value = NULL;
    return audit_time_of(create_time, timestamp, value, size, now);
}

/* ---- the tally ---------------------------------------------------------------------------------- */

static uint64_t hash_of(const char *topic, int64_t window_start) {
    uint64_t hash = 14695981039346656037ULL; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)topic; *c; c++) hash = (hash ^ *c) * 1099511628211ULL;
    return hash ^ ((uint64_t)window_start * 0x9E3779B97F4A7C15ULL);
}

static int grow(Tally *tally) {
    size_t n_slots = tally->n_slots ? tally->n_slots * 2 : 64;
    Entry **slots = calloc(n_slots, sizeof *slots);
    if (slots == NULL) return -1;
    for (size_t i = 0; i < tally->n_slots; i++) {
        for (Entry *entry = tally->slots[i], *next; entry != NULL; entry = next) {
            next = entry->next_in_slot;
            entry->next_in_slot = slots[entry->hash & (n_slots - 1)];
            slots[entry->hash & (n_slots - 1)] = entry;
        }
    }
    free(tally->slots);
    tally->slots = slots;
    tally->n_slots = n_slots;
    return 0;
}

Entry *tally_find(Tally *tally, const char *topic, int64_t window_start) {
    Entry *last = tally->last;
    if (last != NULL && last->window_start == window_start && strcmp(last->topic, topic) == 0) return last;
    uint64_t hash = hash_of(topic, window_start);
    if (tally->n_slots) {
        for (Entry *entry = tally->slots[hash & (tally->n_slots - 1)]; entry != NULL; entry = entry->next_in_slot)
            if (entry->hash == hash && entry->window_start == window_start && strcmp(entry->topic, topic) == 0)
                return tally->last = entry;
    }
    return NULL;
}

Entry *tally_entry(Tally *tally, const char *topic, int64_t window_start) {
    Entry *found = tally_find(tally, topic, window_start);
    if (found != NULL) return found;
    uint64_t hash = hash_of(topic, window_start);
    if (tally->n_entries >= tally->n_slots / 2 && grow(tally) != 0) return NULL;
    Entry *entry = calloc(1, sizeof *entry);
    if (entry == NULL || (entry->topic = strdup(topic)) == NULL) {
        free(entry);
        return NULL;
    }
    entry->hash = hash;
    entry->window_start = window_start;
    entry->next_in_slot = tally->slots[hash & (tally->n_slots - 1)];
    tally->slots[hash & (tally->n_slots - 1)] = entry;
    tally->n_entries++;
    return tally->last = entry;
}

/* The index of the latency bucket holding `latency` (>= 1): the largest i with floors[i] <= latency. The floors
 * of each power of two are found first (octave_start, made once), so the search spans ~35 buckets, not all. */
static int octave_start[65];
static pthread_once_t octaves_once = PTHREAD_ONCE_INIT;

static void make_octaves(void) {
    int i = 0;
    for (int octave = 0; octave < 65; octave++) {
        int64_t from = octave < 63 ? (int64_t)1 << octave : INT64_MAX;
        while (i < KAUDIT_N_FLOORS && kaudit_floors[i] < from) i++;
        octave_start[octave] = i; /* the first floor >= 2**octave */
    }
}

int floor_index_of(int64_t latency) {
    pthread_once(&octaves_once, make_octaves);
    int octave = 63 - __builtin_clzll((unsigned long long)latency);
    int low = octave_start[octave] > 0 ? octave_start[octave] - 1 : 0;
    int high = octave_start[octave + 1] < KAUDIT_N_FLOORS ? octave_start[octave + 1] : KAUDIT_N_FLOORS - 1;
    while (low < high) {
        int middle = (low + high + 1) / 2;
        if (kaudit_floors[middle] <= latency) low = middle;
        else high = middle - 1;
    }
    return low;
}

/* Room for `partition` in the entry's per-partition counts and digests; 0 when there is none. */
static int hold_partition(Entry *entry, int32_t partition) {
    if (partition < 0) return 0;
    if (partition < entry->n_partitions) return 1;
    int32_t n = partition + 1 > entry->n_partitions * 2 ? partition + 1 : entry->n_partitions * 2;
    long long *counts = realloc(entry->partitions, sizeof(long long) * (size_t)n);
    if (counts != NULL) entry->partitions = counts;
    int64_t *digests = counts != NULL ? realloc(entry->digests, sizeof(int64_t) * (size_t)n) : NULL;
    if (digests == NULL) return 0;
    entry->digests = digests;
    memset(counts + entry->n_partitions, 0, sizeof(long long) * (size_t)(n - entry->n_partitions));
    memset(digests + entry->n_partitions, 0, sizeof(int64_t) * (size_t)(n - entry->n_partitions));
    entry->n_partitions = n;
    return 1;
}

void entry_delivered(Entry *entry, int32_t partition, long long size, int64_t latency_ms, int usable, int64_t hash) {
    entry->count++;
    entry->bytes += size;
    if (!usable) entry->no_timestamp++;
    if (hold_partition(entry, partition)) {
        entry->partitions[partition]++;
        entry->digests[partition] = kaudit_digest_merge(entry->digests[partition], hash);
    } else {
        entry->unhashed = 1;
    }
    if (latency_ms <= 0) {
        entry->zero_latency++;
        return;
    }
    if (entry->histogram == NULL) entry->histogram = calloc(KAUDIT_N_FLOORS, sizeof(uint32_t));
    if (entry->histogram != NULL) entry->histogram[floor_index_of(latency_ms)]++;
}

Tally tally_take(Tally *tally) {
    Tally taken = *tally;
    *tally = (Tally){0};
    return taken;
}

static void entry_free(Entry *entry) {
    free(entry->topic);
    free(entry->partitions);
    free(entry->digests);
    free(entry->histogram);
    free(entry);
}

void tally_free(Tally *tally) {
    for (size_t i = 0; i < tally->n_slots; i++) {
        for (Entry *entry = tally->slots[i], *next; entry != NULL; entry = next) {
            next = entry->next_in_slot;
            entry_free(entry);
        }
    }
    free(tally->slots);
    *tally = (Tally){0};
}

void tally_each(const Tally *tally, void (*visit)(Entry *entry, void *context), void *context) {
    for (size_t i = 0; i < tally->n_slots; i++)
        for (Entry *entry = tally->slots[i], *next; entry != NULL; entry = next) {
            next = entry->next_in_slot;
            visit(entry, context);
        }
}

int64_t tally_oldest(const Tally *tally) {
    int64_t oldest = INT64_MAX;
    for (size_t i = 0; i < tally->n_slots; i++)
        for (const Entry *entry = tally->slots[i]; entry != NULL; entry = entry->next_in_slot)
            if (entry->window_start < oldest) oldest = entry->window_start;
    return oldest;
}

void tally_drop_window(Tally *tally, int64_t window_start, void (*dropped)(const Entry *entry, void *context),
                       void *context) {
    for (size_t i = 0; i < tally->n_slots; i++) {
        for (Entry **at = &tally->slots[i]; *at != NULL;) {
            Entry *entry = *at;
            if (entry->window_start != window_start) {
                at = &entry->next_in_slot;
                continue;
            }
            *at = entry->next_in_slot;
            dropped(entry, context);
            if (tally->last == entry) tally->last = NULL;
            tally->n_entries--;
            entry_free(entry);
        }
    }
}

void entry_merge(Entry *into, const Entry *from) {
    into->count += from->count;
    into->bytes += from->bytes;
    into->send_failed += from->send_failed;
    into->no_timestamp += from->no_timestamp;
    into->zero_latency += from->zero_latency;
    into->aborted += from->aborted;
    into->unknown |= from->unknown;
    into->unhashed |= from->unhashed;
    if (!into->digest_checked) {
        into->digest_checked = from->digest_checked;
        into->digest_off = from->digest_off;
    }
    for (int32_t p = 0; p < from->n_partitions; p++) {
        if (!from->partitions[p]) continue;
        if (!hold_partition(into, p)) {
            into->unhashed = 1;
            continue;
        }
        into->partitions[p] += from->partitions[p];
        into->digests[p] = kaudit_digest_merge(into->digests[p], from->digests[p]);
    }
    if (from->histogram != NULL && into->histogram == NULL) into->histogram = calloc(KAUDIT_N_FLOORS, sizeof(uint32_t));
    for (int i = 0; from->histogram != NULL && into->histogram != NULL && i < KAUDIT_N_FLOORS; i++)
        into->histogram[i] += from->histogram[i];
}
