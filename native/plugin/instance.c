/* One Instance per librdkafka client made with the plugin: its interceptors, its tally, its registration
 * (the exported kaudit_* functions find it by its instance id). A producer's instance counts each message
 * once the broker acknowledged it or it failed for good (on_acknowledgement, on librdkafka's threads) and
 * emits count records (emitter.c); a consumer's counts what the application is handed (consume.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"
#include "digest.h"
#include "kaudit_plugin.h"

pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static Instance *registered = NULL;

Instance *instance_find(const char *instance_id) {
    for (Instance *instance = registered; instance != NULL; instance = instance->next_registered)
        if (strcmp(instance->settings.instance_id, instance_id) == 0) return instance;
    return NULL;
}

static void unregister(Instance *instance) {
    pthread_mutex_lock(&registry_lock);
    for (Instance **at = &registered; *at != NULL; at = &(*at)->next_registered) {
        if (*at == instance) {
            *at = instance->next_registered;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

/* One structured line on stderr (librdkafka's own log callback belongs to the application). */
void plugin_log(const char *level, const Instance *instance, const char *message) {
    char text[600];
    size_t at = 0;
    for (const unsigned char *c = (const unsigned char *)message; *c && at + 7 < sizeof text; c++) {
        if (*c == '"' || *c == '\\') at += (size_t)snprintf(text + at, sizeof text - at, "\\%c", *c);
        else if (*c < 0x20) at += (size_t)snprintf(text + at, sizeof text - at, "\\u%04x", *c);
        else text[at++] = (char)*c;
    }
    text[at] = '\0';
    fprintf(stderr, "{\"level\":\"%s\",\"logger\":\"kaudit.plugin\",\"instance_id\":\"%s\",\"message\":\"%s\"}\n",
            level, instance ? instance->settings.instance_id : "", text);
}

int digest_is_on(Instance *instance, const char *topic) {
    return !instance->has_digest_exclude || regexec(&instance->digest_exclude, topic, 0, NULL, 0) == REG_NOMATCH;
}

/* The entry a message's acknowledgement counts in: the open transaction's while the application told of one; else
 * the tally's, which cannot vouch for a transactional client's messages outside a transaction it was told of. */
static Entry *entry_for(Instance *instance, const char *topic, int64_t window_start, int failed) {
    if (!failed && instance->in_transaction) return tally_entry(&instance->transaction, topic, window_start);
    Entry *entry = held_entry(instance, topic, window_start);
    if (entry != NULL && instance->transactional && (!failed || !instance->told)) entry->unknown = 1;
    return entry;
}

static rd_kafka_resp_err_t on_acknowledgement(rd_kafka_t *rk, rd_kafka_message_t *message, void *ic_opaque) {
    Instance *instance = ic_opaque;
    const char *topic = rdk.topic_name(message->rkt);
    if (topic == NULL || strcmp(topic, instance->settings.audit_topic) == 0) return 0;
    int64_t now = now_ms();
    AuditTime when = message_audit_time(message, now);
    pthread_mutex_lock(&instance->lock);
    Entry *entry = entry_for(instance, topic, window_start_ms(when.time_ms, instance->settings.window_ms), message->err != 0);
    if (entry != NULL && message->err) {
        entry->send_failed++;
        instance->failed_total++;
    } else if (entry != NULL) {
        if (!entry->digest_checked) {
            entry->digest_off = !digest_is_on(instance, topic);
            entry->digest_checked = 1;
        }
        /* The key and value the application produced: librdkafka keeps them until the delivery report. */
        int64_t hash = entry->digest_off ? 0 : kaudit_message_hash(message->key, message->key_len, message->payload, message->len);
        entry_delivered(entry, message->partition, (long long)(message->len + message->key_len), now - when.time_ms,
                        when.usable, hash);
        instance->delivered_total++;
    }
    pthread_mutex_unlock(&instance->lock);
    if (entry == NULL) plugin_log("error", instance, "out of memory: a message was not counted");
    return 0;
}

/* The application destroys its client: the last counts are emitted now (the emitter waits up to
 * kaudit.close.timeout.ms for them), while the client's own messages still in flight are failed by librdkafka
 * after this and the instance lives on, counting them, until the client's configuration is destroyed. */
static rd_kafka_resp_err_t on_destroy(rd_kafka_t *rk, void *ic_opaque) {
    Instance *instance = ic_opaque;
    unregister(instance);
    if (instance->is_producer) emitter_stop(instance);
    return 0;
}

static void make_instance_id(Settings *settings) {
    if (settings->instance_id[0]) return;
    unsigned char random[6] = {0};
    if (getrandom(random, sizeof random, 0) != sizeof random) {
        int64_t now = now_ms();
        memcpy(random, &now, sizeof random);
    }
    snprintf(settings->instance_id, sizeof settings->instance_id, "%.120s-%02x%02x%02x%02x%02x%02x", settings->service,
             random[0], random[1], random[2], random[3], random[4], random[5]);
}

/* Whether the client's configuration has a transactional.id. */
static int is_transactional(const rd_kafka_conf_t *conf) {
    size_t n = 0;
    const char **pairs = rdk.conf_dump((rd_kafka_conf_t *)conf, &n);
    int found = 0;
    for (size_t i = 0; i + 1 < n; i += 2)
        if (strcmp(pairs[i], "transactional.id") == 0 && pairs[i + 1][0]) found = 1;
    rdk.conf_dump_free(pairs, n);
    return found;
}

static rd_kafka_resp_err_t add_interceptors(rd_kafka_t *rk, Instance *instance) {
    rd_kafka_resp_err_t err = rdk.interceptor_add_on_destroy(rk, PLUGIN_NAME, on_destroy, instance);
    if (!err && instance->is_producer)
        err = rdk.interceptor_add_on_acknowledgement(rk, PLUGIN_NAME, on_acknowledgement, instance);
    if (!err && !instance->is_producer) err = rdk.interceptor_add_on_consume(rk, PLUGIN_NAME, on_consume, instance);
    return err;
}

rd_kafka_resp_err_t instance_start(rd_kafka_t *rk, const rd_kafka_conf_t *conf, Settings *settings, char *errstr,
                                   size_t errstr_size) {
    int is_producer = rdk.type(rk) == RD_KAFKA_PRODUCER;
    if (is_producer && !settings->cluster[0]) {
        snprintf(errstr, errstr_size,
                 "kaudit plugin: kaudit.cluster is not set: name the cluster this producer writes to "
                 "(set plugin.library.paths first, then the kaudit.* keys)");
        return RD_KAFKA_RESP_ERR__INVALID_ARG;
    }
    Instance *instance = calloc(1, sizeof *instance);
    if (instance == NULL) return RD_KAFKA_RESP_ERR__FAIL;
    make_instance_id(settings);
    instance->settings = *settings;
    instance->rk = rk;
    instance->is_producer = is_producer;
    instance->transactional = is_producer && is_transactional(conf);
    /* settings.c compiled it once already: it compiles here too. */
    instance->has_digest_exclude =
        settings->digest_exclude[0] && regcomp(&instance->digest_exclude, settings->digest_exclude, REG_EXTENDED | REG_NOSUB) == 0;
    pthread_mutex_init(&instance->lock, NULL);
    pthread_mutex_init(&instance->emit_lock, NULL);
    pthread_cond_init(&instance->wake, NULL);
    settings->instance = instance;
    settings->instance_id[0] = '\0'; /* a later client made from this configuration gets an id of its own */
    rd_kafka_resp_err_t err = add_interceptors(rk, instance);
    if (!err && is_producer && emitter_start(instance, conf) != 0) err = RD_KAFKA_RESP_ERR__FAIL;
    if (err) {
        snprintf(errstr, errstr_size, "kaudit plugin: starting on %s failed: %s", rdk.name(rk), rdk.err2str(err));
        return err;
    }
    instances_exit_once();
    pthread_mutex_lock(&registry_lock);
    instance->next_registered = registered;
    registered = instance;
    pthread_mutex_unlock(&registry_lock);
    return 0;
}

/* The process exits with clients its application never destroyed: each emits its last counts, all within the
 * longest kaudit.close.timeout.ms. The clients are left to the exit, not destroyed: librdkafka clients destroyed
 * while a process ends are what crashes monitoring interceptors (librdkafka#2611). */
static void emit_all_at_exit(void) {
    pthread_mutex_lock(&registry_lock);
    int64_t deadline = now_ms();
    for (Instance *instance = registered; instance != NULL; instance = instance->next_registered)
        if (instance->is_producer && now_ms() + instance->settings.close_timeout_ms > deadline)
            deadline = now_ms() + instance->settings.close_timeout_ms;
    for (Instance *instance = registered; instance != NULL; instance = instance->next_registered) {
        int64_t left = deadline - now_ms();
        if (instance->is_producer) emit_at_exit(instance, left > 0 ? (int)left : 0);
    }
    pthread_mutex_unlock(&registry_lock);
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void register_exit(void) { atexit(emit_all_at_exit); }

void instances_exit_once(void) { pthread_once(&exit_once, register_exit); }

void instance_free(Instance *instance) {
    unregister(instance);
    if (instance->is_producer) emitter_stop(instance);
    tally_free(&instance->tally);
    tally_free(&instance->transaction);
    lost_free(&instance->lost);
    consume_free(instance);
    if (instance->has_digest_exclude) regfree(&instance->digest_exclude);
    pthread_mutex_destroy(&instance->lock);
    pthread_mutex_destroy(&instance->emit_lock);
    pthread_cond_destroy(&instance->wake);
    free(instance);
}
