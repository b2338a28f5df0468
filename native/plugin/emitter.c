/* A producer instance's count records into the audit topic of the same cluster: every
 * kaudit.flush.interval.ms from a thread of the plugin's own, on demand (kaudit_flush), and once more when the
 * application destroys its client. They go out on a producer of the plugin's own (acks=all, idempotent) made
 * from the client's connection settings only, so the application's delivery reports, callbacks and
 * transactions never see them. A record whose delivery failed is sent again, with its record id, at the next
 * emission; the books drop the duplicates of an id. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kaudit_plugin.h"

#define MAX_PENDING 100000 /* records kept while the audit topic does not answer; beyond, new ones are dropped */

/* The client's settings the emitter copies: where the cluster is and how to reach it securely. */
static int is_connection_setting(const char *name) {
    static const char *prefixes[] = {"bootstrap.servers", "metadata.broker.list", "security.protocol", "sasl.", "ssl.",
                                     "client.dns.lookup", "broker.address.family", "client.rack"};
    size_t length = strlen(name);
    if (length > 3 && strcmp(name + length - 3, "_cb") == 0) return 0; /* a callback of the application */
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

static void keep_pending(Instance *instance, Pending *record) {
    if (instance->n_pending >= MAX_PENDING) {
        instance->dropped++;
        free(record->payload);
        free(record);
        return;
    }
    record->next = instance->pending;
    instance->pending = record;
    instance->n_pending++;
}

/* Served by rd_kafka_poll/flush of the emitter, under the instance's emit_lock. */
static void on_delivery(rd_kafka_t *emitter, const rd_kafka_message_t *message, void *opaque) {
    Instance *instance = opaque;
    Pending *record = message->_private;
    if (!message->err) {
        free(record->payload);
        free(record);
        return;
    }
    char line[300];
    snprintf(line, sizeof line, "an audit record was not delivered, sent again at the next emission: %s",
             rdk.err2str(message->err));
    plugin_log("warning", instance, line);
    keep_pending(instance, record);
}

/* The value of `name` in `pairs` (a conf dump), or NULL. */
static const char *dumped(const char **pairs, size_t n, const char *name) {
    for (size_t i = 0; i + 1 < n; i += 2)
        if (strcmp(pairs[i], name) == 0) return pairs[i + 1];
    return NULL;
}

/* The emitter's configuration: the client's connection settings that differ from librdkafka's defaults. */
static rd_kafka_conf_t *emitter_conf(Instance *instance, const rd_kafka_conf_t *client_conf) {
    char errstr[512], client_id[200];
    rd_kafka_conf_t *conf = rdk.conf_new();
    size_t n = 0, n_defaults = 0;
    const char **pairs = rdk.conf_dump((rd_kafka_conf_t *)client_conf, &n);
    const char **defaults = rdk.conf_dump(conf, &n_defaults);
    for (size_t i = 0; i + 1 < n; i += 2) {
        const char *default_value = dumped(defaults, n_defaults, pairs[i]);
        if (is_connection_setting(pairs[i]) && (default_value == NULL || strcmp(default_value, pairs[i + 1]) != 0))
            rdk.conf_set(conf, pairs[i], pairs[i + 1], errstr, sizeof errstr);
    }
    rdk.conf_dump_free(defaults, n_defaults);
    rdk.conf_dump_free(pairs, n);
    snprintf(client_id, sizeof client_id, "kaudit-%.180s", instance->settings.instance_id);
    const char *forced[][2] = {
        {"client.id", client_id}, {"acks", "all"}, {"enable.idempotence", "true"}, {"linger.ms", "20"}};
    for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++)
        rdk.conf_set(conf, forced[i][0], forced[i][1], errstr, sizeof errstr);
    rdk.conf_set_dr_msg_cb(conf, on_delivery);
    rdk.conf_set_opaque(conf, instance);
    return conf;
}

/* Hands the pending records to the emitter; those it cannot take yet stay pending. Under emit_lock. */
static void send_pending(Instance *instance) {
    Pending *record = instance->pending, *kept = NULL;
    instance->pending = NULL;
    instance->n_pending = 0;
    for (Pending *next; record != NULL; record = next) {
        next = record->next;
        rd_kafka_resp_err_t err = instance->emitter == NULL
                                      ? RD_KAFKA_RESP_ERR__STATE
                                      : rdk.producev(instance->emitter, RD_KAFKA_V_TOPIC(instance->settings.audit_topic),
                                                     RD_KAFKA_V_VALUE(record->payload, record->length),
                                                     RD_KAFKA_V_OPAQUE(record), RD_KAFKA_V_END);
        if (err) {
            record->next = kept;
            kept = record;
            instance->n_pending++;
        }
    }
    instance->pending = kept;
}

/* The counts since the last emission, as pending records, then sent. Under emit_lock. */
static void emit_counts(Instance *instance) {
    pthread_mutex_lock(&instance->lock);
    Tally taken = tally_take(&instance->tally);
    pthread_mutex_unlock(&instance->lock);
    int64_t now = now_ms();
    for (size_t i = 0; i < taken.n_slots; i++) {
        for (Entry *entry = taken.slots[i]; entry != NULL; entry = entry->next_in_slot) {
            Pending *record = calloc(1, sizeof *record);
            if (record != NULL)
                record->payload = entry_record(entry, &instance->settings, ++instance->sequence, now, &record->length);
            if (record == NULL || record->payload == NULL) {
                free(record);
                plugin_log("error", instance, "out of memory: a count record was lost");
                continue;
            }
            keep_pending(instance, record);
        }
    }
    tally_free(&taken);
    send_pending(instance);
}

static void *emitter_loop(void *argument) {
    Instance *instance = argument;
    char errstr[512];
    pthread_mutex_lock(&instance->emit_lock);
    instance->emitter = rdk.new(RD_KAFKA_PRODUCER, instance->emitter_conf, errstr, sizeof errstr);
    if (instance->emitter == NULL) plugin_log("error", instance, errstr); /* its conf stays ours to destroy */
    else instance->emitter_conf = NULL;
    while (!instance->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t wake_ns = until.tv_nsec + (instance->settings.flush_interval_ms % 1000) * 1000000;
        until.tv_sec += instance->settings.flush_interval_ms / 1000 + wake_ns / 1000000000;
        until.tv_nsec = wake_ns % 1000000000;
        while (!instance->stopping && pthread_cond_timedwait(&instance->wake, &instance->emit_lock, &until) != ETIMEDOUT) {
        }
        if (instance->stopping) break;
        emit_counts(instance);
        if (instance->emitter != NULL) rdk.poll(instance->emitter, 0);
    }
    pthread_mutex_unlock(&instance->emit_lock);
    return NULL;
}

int emitter_start(Instance *instance, const rd_kafka_conf_t *client_conf) {
    instance->emitter_conf = emitter_conf(instance, client_conf);
    if (pthread_create(&instance->thread, NULL, emitter_loop, instance) != 0) return -1;
    instance->thread_started = 1;
    return 0;
}

long long emit_now(Instance *instance, int timeout_ms) {
    pthread_mutex_lock(&instance->emit_lock);
    if (!instance->closed) emit_counts(instance);
    if (instance->emitter != NULL) rdk.flush(instance->emitter, timeout_ms);
    long long left = instance->n_pending + (instance->emitter != NULL ? rdk.outq_len(instance->emitter) : 0);
    pthread_mutex_unlock(&instance->emit_lock);
    return left;
}

void emitter_stop(Instance *instance) {
    pthread_mutex_lock(&instance->emit_lock);
    int started = instance->thread_started;
    instance->stopping = 1;
    instance->thread_started = 0;
    pthread_cond_signal(&instance->wake);
    pthread_mutex_unlock(&instance->emit_lock);
    if (started) pthread_join(instance->thread, NULL);
    pthread_mutex_lock(&instance->emit_lock);
    if (!instance->closed) {
        emit_counts(instance);
        if (instance->emitter != NULL) {
            rdk.flush(instance->emitter, (int)instance->settings.close_timeout_ms);
            long long left = instance->n_pending + rdk.outq_len(instance->emitter);
            if (left) plugin_log("error", instance, "audit records not delivered when the client was destroyed");
            rdk.destroy(instance->emitter);
            instance->emitter = NULL;
        }
        instance->closed = 1;
    }
    if (instance->emitter_conf != NULL) rdk.conf_destroy(instance->emitter_conf);
    instance->emitter_conf = NULL;
    for (Pending *record = instance->pending, *next; record != NULL; record = next) {
        next = record->next;
        free(record->payload);
        free(record);
    }
    instance->pending = NULL;
    pthread_mutex_unlock(&instance->emit_lock);
}
