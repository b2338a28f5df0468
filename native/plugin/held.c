/* What a producer instance holds between emissions, and for how long it may: the tally within
 * kaudit.tally.max.entries (past it the oldest windows are dropped, remembered per topic as ranges of windows and
 * written later as `unknown`, so no count is dropped in silence), and the acknowledged messages of the open
 * transaction the application told of (kaudit_transaction), apart until its commit or abort. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kaudit_plugin.h"

/* ---- the windows the tally dropped -------------------------------------------------------------- */

static void merge_ranges(LostTopic *lost, int at) { /* ranges `at` and `at + 1` become one */
    if (lost->to[at + 1] > lost->to[at]) lost->to[at] = lost->to[at + 1];
    for (int i = at + 1; i + 1 < lost->n_ranges; i++) {
        lost->from[i] = lost->from[i + 1];
        lost->to[i] = lost->to[i + 1];
    }
    lost->n_ranges--;
}

static void add_window(LostTopic *lost, int64_t window_start, int64_t window_ms) {
    int at = 0;
    while (at < lost->n_ranges && lost->from[at] <= window_start) at++;
    for (int i = lost->n_ranges; i > at; i--) {
        lost->from[i] = lost->from[i - 1];
        lost->to[i] = lost->to[i - 1];
    }
    lost->from[at] = lost->to[at] = window_start;
    lost->n_ranges++;
    for (int i = 0; i + 1 < lost->n_ranges;) { /* neighbours that touch or overlap */
        if (lost->from[i + 1] <= lost->to[i] + window_ms) merge_ranges(lost, i);
        else i++;
    }
    if (lost->n_ranges < LOST_RANGES) return;
    /* Bounded memory: the two closest ranges become one (the windows between them written as unknown too). */
    int closest = 0;
    for (int i = 1; i + 1 < lost->n_ranges; i++)
        if (lost->from[i + 1] - lost->to[i] < lost->from[closest + 1] - lost->to[closest]) closest = i;
    merge_ranges(lost, closest);
}

static int lost_add(Lost *lost, const char *topic, int64_t window_start, int64_t window_ms) {
    LostTopic *found = lost->topics;
    while (found != NULL && strcmp(found->topic, topic) != 0) found = found->next;
    if (found == NULL) {
        found = calloc(1, sizeof *found);
        if (found == NULL || (found->topic = strdup(topic)) == NULL) {
            free(found);
            return -1;
        }
        found->next = lost->topics;
        lost->topics = found;
    }
    add_window(found, window_start, window_ms);
    return 0;
}

void lost_free(Lost *lost) {
    for (LostTopic *topic = lost->topics, *next; topic != NULL; topic = next) {
        next = topic->next;
        free(topic->topic);
        free(topic);
    }
    lost->topics = NULL;
}

void lost_into(Lost *lost, Tally *tally, int64_t window_ms) {
    for (LostTopic *topic = lost->topics; topic != NULL; topic = topic->next) {
        for (int i = 0; i < topic->n_ranges; i++) {
            for (int64_t window = topic->from[i]; window <= topic->to[i]; window += window_ms) {
                Entry *entry = tally_entry(tally, topic->topic, window);
                if (entry != NULL) entry->unknown = 1;
                else plugin_log("error", NULL, "out of memory: a window the tally dropped is not written as unknown");
            }
        }
    }
    lost_free(lost);
}

/* ---- the bounded tally ---------------------------------------------------------------------------- */

static void remember_dropped(const Entry *entry, void *context) {
    Instance *instance = context;
    time_t seconds = (time_t)(entry->window_start / 1000);
    struct tm moment;
    char window[40], line[512];
    gmtime_r(&seconds, &moment);
    strftime(window, sizeof window, "%Y-%m-%dT%H:%M:%SZ", &moment);
    int remembered = lost_add(&instance->lost, entry->topic, entry->window_start, instance->settings.window_ms) == 0;
    instance->lost_windows++;
    snprintf(line, sizeof line,
             "the tally holds kaudit.tally.max.entries=%lld entries while the audit topic takes no records: the counts "
             "of topic %.200s, window %s, are dropped%s",
             (long long)instance->settings.max_entries, entry->topic, window,
             remembered ? "; that window is written as unknown once the audit topic takes records"
                        : " and, out of memory, not remembered");
    plugin_log(remembered ? "warning" : "error", instance, line);
}

Entry *held_entry(Instance *instance, const char *topic, int64_t window_start) {
    Tally *tally = &instance->tally;
    Entry *entry = tally_find(tally, topic, window_start);
    if (entry != NULL) return entry;
    size_t bound = (size_t)instance->settings.max_entries;
    while (tally->n_entries > 0 && tally->n_entries >= bound)
        tally_drop_window(tally, tally_oldest(tally), remember_dropped, instance);
    if (tally->n_entries * 2 >= bound && !__atomic_load_n(&instance->early, __ATOMIC_RELAXED)) {
        /* Half full: records made sooner keep a healthy audit topic's tally from the bound. */
        __atomic_store_n(&instance->early, 1, __ATOMIC_RELAXED);
        pthread_cond_signal(&instance->wake);
    }
    return tally_entry(tally, topic, window_start);
}

/* ---- the application's transactions --------------------------------------------------------------- */

enum { SETTLE_COMMIT, SETTLE_ABORT, SETTLE_UNKNOWN };

typedef struct {
    Instance *instance;
    int how;
} Settle;

static void settle_entry(Entry *entry, void *context) {
    Settle *settle = context;
    Entry *into = held_entry(settle->instance, entry->topic, entry->window_start);
    if (into == NULL) {
        plugin_log("error", settle->instance, "out of memory: the counts of a transaction were not counted");
    } else if (settle->how == SETTLE_ABORT) {
        into->aborted += entry->count;
    } else {
        entry_merge(into, entry);
        if (settle->how == SETTLE_UNKNOWN) into->unknown = 1;
    }
}

static void settle(Instance *instance, int how) {
    Tally taken = tally_take(&instance->transaction);
    Settle context = {instance, how};
    tally_each(&taken, settle_entry, &context);
    tally_free(&taken);
}

void settle_open_transaction(Instance *instance) {
    settle(instance, SETTLE_UNKNOWN);
    instance->in_transaction = 0;
}

int transaction_event(Instance *instance, int event) {
    if (event != TRANSACTION_BEGIN && event != TRANSACTION_COMMIT && event != TRANSACTION_ABORT) return -1;
    pthread_mutex_lock(&instance->lock);
    instance->told = 1;
    if (event == TRANSACTION_BEGIN) {
        if (instance->in_transaction) settle(instance, SETTLE_UNKNOWN); /* begun again: its outcome was not told */
        instance->in_transaction = 1;
    } else {
        settle(instance, event == TRANSACTION_COMMIT ? SETTLE_COMMIT : SETTLE_ABORT);
        instance->in_transaction = 0;
    }
    pthread_mutex_unlock(&instance->lock);
    return 0;
}
