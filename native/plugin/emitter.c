/* A producer instance's count records into the audit topic of the same cluster: every
 * kaudit.flush.interval.ms from a thread of the plugin's own, on demand (kaudit_flush), and once more when the
 * application destroys its client. They go out on a producer of the plugin's own (acks=all, idempotent) made
 * from the client's connection settings only, so the application's delivery reports, callbacks and
 * transactions never see them. A record whose delivery failed is sent again, with its record id, at the next
 * emission; the books drop the duplicates of an id. No new records are made while the audit topic has not taken
 * the ones made before: the counts stay merged in the tally meanwhile (held.c bounds it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kaudit_plugin.h"

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

static void pending_free(Pending *record) {
    free(record->payload);
    free(record->topic);
    free(record);
}

static void keep_pending(Instance *instance, Pending *record) {
    record->next = instance->pending;
    instance->pending = record;
    instance->n_pending++;
}

/* Served by rd_kafka_poll/flush of the emitter, under the instance's emit_lock. */
static void on_delivery(rd_kafka_t *emitter, const rd_kafka_message_t *message, void *opaque) {
    Instance *instance = opaque;
    Pending *record = message->_private;
    if (!message->err) {
        pending_free(record);
        return;
    }
    if (!instance->stopping) {
        char line[300];
        snprintf(line, sizeof line, "an audit record was not delivered, sent again at the next emission: %s",
                 rdk.err2str(message->err));
        plugin_log("warning", instance, line);
    }
    keep_pending(instance, record);
}

/* Records made and not yet taken by the audit topic: pending, or in the emitter. Under emit_lock. */
static long long undelivered(Instance *instance) {
    return instance->n_pending + (instance->emitter != NULL ? rdk.outq_len(instance->emitter) : 0);
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

typedef struct {
    Instance *instance;
    int64_t now;
} Making;

static void make_record(Entry *entry, void *context) {
    Making *making = context;
    Instance *instance = making->instance;
    Pending *record = calloc(1, sizeof *record);
    if (record != NULL) {
        record->payload = entry_record(entry, &instance->settings, ++instance->sequence, making->now, &record->length);
        record->topic = strdup(entry->topic);
        record->window_start = entry->window_start;
    }
    if (record == NULL || record->payload == NULL || record->topic == NULL) {
        if (record != NULL) pending_free(record);
        plugin_log("error", instance, "out of memory: a count record was lost");
        return;
    }
    keep_pending(instance, record);
}

/* The tally, the windows it dropped (as unknown) and, when `final`, the open transaction, as pending records. */
static void make_records(Instance *instance, int final) {
    pthread_mutex_lock(&instance->lock);
    if (final) settle_open_transaction(instance);
    Tally taken = tally_take(&instance->tally);
    Lost lost = instance->lost;
    instance->lost = (Lost){0};
    pthread_mutex_unlock(&instance->lock);
    lost_into(&lost, &taken, instance->settings.window_ms);
    Making making = {instance, now_ms()};
    tally_each(&taken, make_record, &making);
    tally_free(&taken);
}

/* Sends the pending records again, and makes the tally's only once the audit topic took every record made before
 * (or when `final`): meanwhile the tally merges the counts, so an outage holds the windows open, not one record
 * per window and interval. Under emit_lock. */
static void emit_counts(Instance *instance, int final) {
    if (instance->emitter != NULL) rdk.poll(instance->emitter, 0); /* the delivery reports so far */
    send_pending(instance);
    if (!final && undelivered(instance) > 0) return;
    make_records(instance, final);
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
        while (!instance->stopping && !__atomic_load_n(&instance->early, __ATOMIC_RELAXED) &&
               pthread_cond_timedwait(&instance->wake, &instance->emit_lock, &until) != ETIMEDOUT) {
        }
        if (instance->stopping) break;
        __atomic_store_n(&instance->early, 0, __ATOMIC_RELAXED);
        emit_counts(instance, 0);
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

static int remaining_ms(int64_t deadline) {
    int64_t left = deadline - now_ms();
    return left > 0 ? (int)left : 0;
}

long long emit_now(Instance *instance, int timeout_ms) {
    pthread_mutex_lock(&instance->emit_lock);
    int64_t deadline = now_ms() + timeout_ms;
    /* A second round when the first found records of an earlier emission in flight and saw them taken. */
    for (int round = 0; round < 2 && !instance->closed; round++) {
        emit_counts(instance, 0);
        if (instance->emitter != NULL) rdk.flush(instance->emitter, remaining_ms(deadline));
        if (undelivered(instance) > 0) break;
    }
    long long left = undelivered(instance);
    pthread_mutex_unlock(&instance->emit_lock);
    return left;
}

/* The records the audit topic did not take before the client was destroyed: lost, and said so. */
static void log_lost_records(Instance *instance) {
    long long n = 0;
    for (Pending *record = instance->pending; record != NULL; record = record->next, n++) {
        if (n >= 100) continue;
        time_t seconds = (time_t)(record->window_start / 1000);
        struct tm moment;
        char window[40], line[400];
        gmtime_r(&seconds, &moment);
        strftime(window, sizeof window, "%Y-%m-%dT%H:%M:%SZ", &moment);
        snprintf(line, sizeof line, "the audit topic did not take the count record of topic %.200s, window %s, "
                 "before the client ended (kaudit.close.timeout.ms): it is lost", record->topic, window);
        plugin_log("error", instance, line);
    }
    if (n > 100) {
        char line[200];
        snprintf(line, sizeof line, "and %lld more count records lost when the client ended", n - 100);
        plugin_log("error", instance, line);
    }
}

/* The last emission: the tally and the open transaction made into records whatever is undelivered, up to
 * timeout_ms for the audit topic to take them, and what it did not take named in the log. Under emit_lock. */
static void emit_last(Instance *instance, int timeout_ms) {
    emit_counts(instance, 1);
    if (instance->emitter != NULL) {
        rdk.flush(instance->emitter, timeout_ms);
        /* What it still holds comes back through on_delivery, to be named in the log. */
        rdk.purge(instance->emitter, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rdk.poll(instance->emitter, 0);
    }
    log_lost_records(instance);
    instance->closed = 1;
}

void emit_at_exit(Instance *instance, int timeout_ms) {
    pthread_mutex_lock(&instance->emit_lock);
    instance->stopping = 1; /* the emitter's thread ends at its next wake; the exit ends the rest */
    pthread_cond_signal(&instance->wake);
    if (!instance->closed) emit_last(instance, timeout_ms);
    pthread_mutex_unlock(&instance->emit_lock);
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
    if (!instance->closed) emit_last(instance, (int)instance->settings.close_timeout_ms);
    if (instance->emitter != NULL) rdk.destroy(instance->emitter);
    instance->emitter = NULL;
    if (instance->emitter_conf != NULL) rdk.conf_destroy(instance->emitter_conf);
    instance->emitter_conf = NULL;
    for (Pending *record = instance->pending, *next; record != NULL; record = next) {
        next = record->next;
        pending_free(record);
    }
    instance->pending = NULL;
    instance->n_pending = 0;
    pthread_mutex_unlock(&instance->emit_lock);
}
