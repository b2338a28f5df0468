/* A tally entry's count record: compact UTF-8 JSON with sorted keys, as audit/contract/record.py `encode`
 * writes it; its latency percentiles as the contract's DDSketch gives them (audit/contract/tally.py). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kaudit_plugin.h"

typedef struct {
    char *text;
    size_t length, capacity;
    int failed;
} Buffer;

static void append(Buffer *buffer, const char *format, ...) {
    if (buffer->failed) return;
    for (;;) {
        va_list args;
        va_start(args, format);
        int n = vsnprintf(buffer->text + buffer->length, buffer->capacity - buffer->length, format, args);
        va_end(args);
        if (n < 0) {
            buffer->failed = 1;
            return;
        }
        if ((size_t)n < buffer->capacity - buffer->length) {
            buffer->length += (size_t)n;
            return;
        }
        size_t capacity = (buffer->capacity + (size_t)n + 1) * 2;
        char *grown = realloc(buffer->text, capacity);
        if (grown == NULL) {
            buffer->failed = 1;
            return;
        }
        buffer->text = grown;
        buffer->capacity = capacity;
    }
}

/* A JSON string: quotes, backslashes and control characters escaped; other bytes as they are (UTF-8). */
static void append_string(Buffer *buffer, const char *value) {
    append(buffer, "\"");
    for (const unsigned char *c = (const unsigned char *)value; *c; c++) {
        if (*c == '"' || *c == '\\') append(buffer, "\\%c", *c);
        else if (*c < 0x20) append(buffer, "\\u%04x", *c);
        else append(buffer, "%c", *c);
    }
    append(buffer, "\"");
}

static void append_time(Buffer *buffer, int64_t time_ms, int millis) {
    time_t seconds = (time_t)(time_ms / 1000);
    struct tm moment;
    gmtime_r(&seconds, &moment);
    char text[40];
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &moment);
    if (millis) append(buffer, "\"%s.%03dZ\"", text, (int)(time_ms % 1000));
    else append(buffer, "\"%sZ\"", text);
}

/* The shortest form that reads back as `value`, as Python's repr writes it (a whole number keeps ".0"). */
static void append_float(Buffer *buffer, double value) {
    char text[40];
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(text, sizeof text, "%.*g", precision, value);
        if (strtod(text, NULL) == value) break;
    }
    append(buffer, "%s%s", text, strpbrk(text, ".eEn") ? "" : ".0");
}

/* The value the sketch gives at quantile q (DDSketch.get_quantile_value over the entry's histogram). */
static double quantile(const Entry *entry, long long total, double q) {
    double rank = q * (double)(total - 1);
    if (rank < (double)entry->zero_latency) return 0.0;
    rank -= (double)entry->zero_latency;
    double running = 0.0;
    int last = 0;
    for (int i = 0; i < KAUDIT_N_FLOORS; i++) {
        if (!entry->histogram[i]) continue;
        running += entry->histogram[i];
        last = i;
        if (running > rank) return kaudit_floor_values[i];
    }
    return kaudit_floor_values[last];
}

static void append_latency(Buffer *buffer, const Entry *entry) {
    long long total = entry->zero_latency;
    for (int i = 0; entry->histogram != NULL && i < KAUDIT_N_FLOORS; i++) total += entry->histogram[i];
    if (total == 0) return;
    if (entry->histogram == NULL) {
        append(buffer, "\"latency_ms\":{\"max\":0.0,\"p50\":0.0,\"p95\":0.0,\"p99\":0.0},");
        return;
    }
    static const char *names[] = {"max", "p50", "p95", "p99"};
    static const double quantiles[] = {1.0, 0.50, 0.95, 0.99};
    append(buffer, "\"latency_ms\":{");
    for (int i = 0; i < 4; i++) {
        append(buffer, "%s\"%s\":", i ? "," : "", names[i]);
        append_float(buffer, quantile(entry, total, quantiles[i]));
    }
    append(buffer, "},");
}

static void append_partitions(Buffer *buffer, const Entry *entry) {
    int first = 1;
    for (int32_t p = 0; p < entry->n_partitions; p++) {
        if (!entry->partitions[p]) continue;
        append(buffer, "%s\"%d\":%lld", first ? "\"by_partition\":{" : ",", p, entry->partitions[p]);
        first = 0;
    }
    if (!first) append(buffer, "},");
}

/* Beside by_partition, when every message counted was hashed (audit/contract/record.py digest_by_partition). */
static void append_digests(Buffer *buffer, const Entry *entry) {
    if (entry->digest_off || entry->unhashed) return;
    int first = 1;
    for (int32_t p = 0; p < entry->n_partitions; p++) {
        if (!entry->partitions[p]) continue;
        append(buffer, "%s\"%d\":%lld", first ? "\"digest_by_partition\":{" : ",", p, (long long)entry->digests[p]);
        first = 0;
    }
    if (!first) append(buffer, "},");
}

char *entry_record(const Entry *entry, const Settings *settings, long long sequence, int64_t emitted_at_ms,
                   size_t *length) {
    Buffer buffer = {.text = NULL, .length = 0, .capacity = 0};
    append(&buffer, "{");
    if (entry->aborted) append(&buffer, "\"aborted\":%lld,", entry->aborted);
    append_partitions(&buffer, entry);
    append(&buffer, "\"bytes\":%lld,\"cluster\":", entry->bytes);
    append_string(&buffer, settings->cluster);
    append(&buffer, ",\"count\":%lld,", entry->count);
    append_digests(&buffer, entry);
    append(&buffer, "\"emitted_at\":");
    append_time(&buffer, emitted_at_ms, 1);
    append(&buffer, ",\"host\":");
    append_string(&buffer, settings->host);
    append(&buffer, ",\"instance_id\":");
    append_string(&buffer, settings->instance_id);
    append(&buffer, ",\"kind\":\"count\",");
    append_latency(&buffer, entry);
    append(&buffer, "\"no_timestamp\":%lld,\"record_id\":", entry->no_timestamp);
    char record_id[200];
    snprintf(record_id, sizeof record_id, "%s:%lld", settings->instance_id, sequence);
    append_string(&buffer, record_id);
    append(&buffer, ",\"schema_version\":%d,\"send_failed\":%lld,\"service\":", KAUDIT_SCHEMA_VERSION, entry->send_failed);
    append_string(&buffer, settings->service);
    append(&buffer, ",\"tier\":\"%s\",\"topic\":", KAUDIT_PRODUCER_TIER);
    append_string(&buffer, entry->topic);
    if (entry->unknown) append(&buffer, ",\"unknown\":true");
    append(&buffer, ",\"window_minutes\":%d,\"window_start\":", (int)(settings->window_ms / KAUDIT_MS_PER_MINUTE));
    append_time(&buffer, entry->window_start, 0);
    append(&buffer, "}");
    if (buffer.failed) {
        free(buffer.text);
        return NULL;
    }
    *length = buffer.length;
    return buffer.text;
}
