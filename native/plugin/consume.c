/* A consumer instance's counts: what librdkafka hands the application (on_consume), per topic, partition and
 * window, until the application takes them (kaudit_take_consumed). The counter takes them after each batch it
 * consumed, so they are exactly that batch's (audit/hops/counter/fastcount.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "digest.h"
#include "kaudit_plugin.h"

typedef struct Group {
    struct Group *next;
    char *topic;
    const char *topic_name; /* librdkafka's name of the topic handle, alive while the batch is handed over */
    int32_t partition;
    int64_t window_start, last_offset, last_time;
    long long count, bytes, no_timestamp, zero_latency;
    int64_t digest; /* of the messages counted, unless the topic's digest is off */
    int digest_off;
    uint32_t *histogram;
} Group;

typedef struct ConsumeState {
    Group *groups, *last; /* `last`: the group of the previous message, most often the next one's too */
    long long messages;
} ConsumeState;

static Group *group_of(Instance *instance, ConsumeState *state, const char *topic, int32_t partition,
                       int64_t window_start) {
    Group *last = state->last;
    if (last != NULL && last->topic_name == topic && last->partition == partition && last->window_start == window_start)
        return last;
    for (Group *group = state->groups; group != NULL; group = group->next) {
        if (group->partition == partition && group->window_start == window_start && strcmp(group->topic, topic) == 0) {
            group->topic_name = topic;
            return state->last = group;
        }
    }
    Group *group = calloc(1, sizeof *group);
    if (group == NULL || (group->topic = strdup(topic)) == NULL) {
        free(group);
        return NULL;
    }
    group->topic_name = topic;
    group->partition = partition;
    group->window_start = window_start;
    group->digest_off = !digest_is_on(instance, topic);
    group->next = state->groups;
    state->groups = group;
    return state->last = group;
}

int floor_index_of(int64_t latency); /* tally.c */

rd_kafka_resp_err_t on_consume(rd_kafka_t *rk, rd_kafka_message_t *message, void *ic_opaque) {
    Instance *instance = ic_opaque;
    if (message->err) return 0; /* handed to the application as an error: the counter deals with it */
    const char *topic = rdk.topic_name(message->rkt);
    if (topic == NULL) return 0;
    int64_t now = coarse_now_ms(); /* latencies of consumed messages are seconds: a clock tick of a few ms is fine */
    AuditTime when = message_audit_time(message, now);
    pthread_mutex_lock(&instance->lock);
    if (instance->consume == NULL) instance->consume = calloc(1, sizeof(ConsumeState));
    ConsumeState *state = instance->consume;
    Group *group = state ? group_of(instance, state, topic, message->partition,
                                    window_start_ms(when.time_ms, instance->settings.window_ms))
                         : NULL;
    if (group != NULL) {
        state->messages++;
        group->count++;
        group->bytes += (long long)(message->len + message->key_len);
        group->no_timestamp += !when.usable;
        group->last_offset = message->offset;
        group->last_time = when.time_ms;
        if (!group->digest_off)
            group->digest = kaudit_digest_merge(group->digest, kaudit_message_hash(message->key, message->key_len,
                                                                                   message->payload, message->len));
        int64_t latency = now - when.time_ms;
        if (latency <= 0) group->zero_latency++;
        else if (group->histogram != NULL || (group->histogram = calloc(KAUDIT_N_FLOORS, sizeof(uint32_t))) != NULL)
            group->histogram[floor_index_of(latency)]++;
    }
    pthread_mutex_unlock(&instance->lock);
    return 0;
}

static void groups_free(Group *group) {
    for (Group *next; group != NULL; group = next) {
        next = group->next;
        free(group->topic);
        free(group->histogram);
        free(group);
    }
}

void consume_free(Instance *instance) {
    if (instance->consume != NULL) groups_free(instance->consume->groups);
    free(instance->consume);
    instance->consume = NULL;
}

/* The groups taken, as one JSON document: {"messages": n, "groups": [[topic, partition, window start, count, bytes,
 * no_timestamp, last offset, its audit time, {latency floor: messages}, content digest or null], ...]}; malloc'd. */
char *consumed_json(ConsumeState *state, size_t *length);

EXPORTED char *kaudit_take_consumed(const char *instance_id) {
    pthread_mutex_lock(&registry_lock);
    Instance *instance = instance_find(instance_id);
    ConsumeState taken = {0};
    if (instance != NULL) {
        pthread_mutex_lock(&instance->lock);
        if (instance->consume != NULL) {
            taken = *instance->consume;
            *instance->consume = (ConsumeState){0};
        }
        pthread_mutex_unlock(&instance->lock);
    }
    pthread_mutex_unlock(&registry_lock);
    if (instance == NULL) return NULL;
    size_t length = 0;
    char *text = consumed_json(&taken, &length);
    groups_free(taken.groups);
    return text;
}

char *consumed_json(ConsumeState *state, size_t *length) {
    size_t capacity = 256;
    for (Group *group = state->groups; group != NULL; group = group->next) {
        capacity += 280 + strlen(group->topic);
        for (int i = 0; group->histogram != NULL && i < KAUDIT_N_FLOORS; i++) capacity += group->histogram[i] ? 40 : 0;
    }
    char *text = malloc(capacity);
    if (text == NULL) return NULL;
    size_t at = (size_t)snprintf(text, capacity, "{\"messages\":%lld,\"groups\":[", state->messages);
    for (Group *group = state->groups; group != NULL && at < capacity; group = group->next) {
        at += (size_t)snprintf(text + at, capacity - at, "%s[\"%s\",%d,%lld,%lld,%lld,%lld,%lld,%lld,{",
                               group == state->groups ? "" : ",", group->topic, group->partition,
                               (long long)group->window_start, group->count, group->bytes, group->no_timestamp,
                               (long long)group->last_offset, (long long)group->last_time);
        const char *comma = "";
        if (group->zero_latency) {
            at += (size_t)snprintf(text + at, capacity - at, "\"0\":%lld", group->zero_latency);
            comma = ",";
        }
        for (int i = 0; group->histogram != NULL && i < KAUDIT_N_FLOORS && at < capacity; i++) {
            if (!group->histogram[i]) continue;
            at += (size_t)snprintf(text + at, capacity - at, "%s\"%lld\":%u", comma, (long long)kaudit_floors[i],
                                   group->histogram[i]);
            comma = ",";
        }
        if (at < capacity && group->digest_off) at += (size_t)snprintf(text + at, capacity - at, "},null]");
        else if (at < capacity) at += (size_t)snprintf(text + at, capacity - at, "},%lld]", (long long)group->digest);
    }
    if (at < capacity) at += (size_t)snprintf(text + at, capacity - at, "]}");
    if (at >= capacity) {
        free(text);
        return NULL;
    }
    *length = at;
    return text;
}
