/* The audited producer's librdkafka plugin (see _fastaudit.h): librdkafka's functions, found at run time in
 * the copy confluent-kafka loaded, and the interceptors that count each message once the broker acknowledged
 * it or it failed for good. */
#include "_fastaudit.h" /* Python.h first: it sets the feature macros link.h needs */

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INTERCEPTOR_NAME "kaudit.audited_producer"

/* ---- librdkafka, found at run time --------------------------------------------------------- */

rdkafka_api rdk;
static int rdk_found = 0; /* 1 when every function was found */
char rdk_problem[512] = "not looked up yet";
static pthread_once_t rdk_once = PTHREAD_ONCE_INIT;

typedef struct {
    char path[PATH_MAX];
    int matches;
} LibrarySearch;

static int match_rdkafka(struct dl_phdr_info *info, size_t size, void *data) {
    LibrarySearch *search = data;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    if (base != NULL && strncmp(base + 1, "librdkafka", 10) == 0) {
        if (search->matches++ == 0) snprintf(search->path, sizeof search->path, "%s", name);
    }
    return 0;
}

static void find_rdkafka(void) {
    LibrarySearch search = {.matches = 0};
    dl_iterate_phdr(match_rdkafka, &search);
    if (search.matches != 1) {
        /* Two copies could be two ABIs: only the one confluent-kafka uses is safe, and we cannot tell. */
        snprintf(rdk_problem, sizeof rdk_problem, "%d librdkafka libraries loaded, need exactly 1 (import confluent_kafka first)",
                 search.matches);
        return;
    }
    void *library = dlopen(search.path, RTLD_NOW | RTLD_NOLOAD);
    if (library == NULL) {
        snprintf(rdk_problem, sizeof rdk_problem, "dlopen %.300s: %.150s", search.path, dlerror());
        return;
    }
    static const char *names[] = RDKAFKA_API_NAMES;
    void **slots = (void **)&rdk;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        slots[i] = dlsym(library, names[i]);
        if (slots[i] == NULL) {
            snprintf(rdk_problem, sizeof rdk_problem, "%.400s has no %.80s", search.path, names[i]);
            return;
        }
    }
    rdk_found = 1;
}

int rdkafka_ready(void) {
    pthread_once(&rdk_once, find_rdkafka);
    return rdk_found;
}

pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;

__thread MessageState *being_sent = NULL;

int64_t now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* rd_kafka_t instances created with the interceptor: a Tally binds only to those. */
static rd_kafka_t **registered = NULL;
static size_t n_registered = 0, registered_capacity = 0;

int is_registered(rd_kafka_t *rk) {
    int found = 0;
    pthread_mutex_lock(&counts_lock);
    for (size_t i = 0; i < n_registered && !found; i++) found = registered[i] == rk;
    pthread_mutex_unlock(&counts_lock);
    return found;
}

/* ---- the librdkafka plugin: interceptors ------------------------------------------------------ */

static rd_kafka_resp_err_t on_acknowledgement(rd_kafka_t *rk, rd_kafka_message_t *message, void *ic_opaque) {
    MessageState *state = message->_private;
    if (state == NULL || state->magic != STATE_MAGIC) return 0; /* not produced by a Tally */
    if (state == being_sent) return 0;                          /* refused inside produce() */
    int64_t latency = now_ms() - state->audit_time_ms;
    int timestamp_type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    if (!message->err) rdk.message_timestamp(message, &timestamp_type);
    pthread_mutex_lock(&counts_lock);
    Entry *entry = state->entry;
    if (message->err) {
        entry->send_failed++;
    } else {
        entry_acked(entry, message->partition, (long long)(message->len + message->key_len), latency);
        /* A LogAppendTime topic's broker returns its own time: there the header carries the audit time. */
        if (__atomic_load_n(&entry->timestamp_type, __ATOMIC_RELAXED) != timestamp_type)
            __atomic_store_n(&entry->timestamp_type, timestamp_type, __ATOMIC_RELAXED);
    }
    entry->done++;
    pthread_mutex_unlock(&counts_lock);
    return 0;
}

static rd_kafka_resp_err_t on_destroy(rd_kafka_t *rk, void *ic_opaque) {
    pthread_mutex_lock(&counts_lock);
    for (size_t i = 0; i < n_registered; i++) {
        if (registered[i] == rk) {
            registered[i] = registered[--n_registered];
            break;
        }
    }
    pthread_mutex_unlock(&counts_lock);
    return 0;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
                                  size_t errstr_size) {
    rd_kafka_resp_err_t err = rdk.interceptor_add_on_acknowledgement(rk, INTERCEPTOR_NAME, on_acknowledgement, NULL);
    if (!err) err = rdk.interceptor_add_on_destroy(rk, INTERCEPTOR_NAME, on_destroy, NULL);
    if (err) {
        snprintf(errstr, errstr_size, "%s: adding interceptors failed (%d)", INTERCEPTOR_NAME, err);
        return err;
    }
    pthread_mutex_lock(&counts_lock);
    if (n_registered == registered_capacity) {
        size_t capacity = registered_capacity ? registered_capacity * 2 : 8;
        rd_kafka_t **grown = realloc(registered, sizeof(rd_kafka_t *) * capacity);
        if (grown != NULL) {
            registered = grown;
            registered_capacity = capacity;
        }
    }
    if (n_registered < registered_capacity) registered[n_registered++] = rk;
    pthread_mutex_unlock(&counts_lock);
    return 0;
}

#define RD_KAFKA_RESP_ERR__CONFLICT (-173) /* already added: librdkafka keeps one of each */

static rd_kafka_resp_err_t add_conf_interceptors(rd_kafka_conf_t *conf);

static rd_kafka_resp_err_t on_conf_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old_conf, size_t filter_cnt,
                                       const char **filter, void *ic_opaque) {
    return add_conf_interceptors(new_conf);
}

static rd_kafka_resp_err_t add_conf_interceptors(rd_kafka_conf_t *conf) {
    rd_kafka_resp_err_t err = rdk.conf_interceptor_add_on_new(conf, INTERCEPTOR_NAME, on_new, NULL);
    if (err && err != RD_KAFKA_RESP_ERR__CONFLICT) return err;
    err = rdk.conf_interceptor_add_on_conf_dup(conf, INTERCEPTOR_NAME, on_conf_dup, NULL);
    return err == RD_KAFKA_RESP_ERR__CONFLICT ? 0 : err;
}

/* The plugin's entry point: librdkafka calls it when `plugin.library.paths` names this file. */
__attribute__((visibility("default"))) rd_kafka_resp_err_t conf_init(rd_kafka_conf_t *conf, void **plug_opaquep,
                                                                     char *errstr, size_t errstr_size) {
    if (!rdkafka_ready()) {
        snprintf(errstr, errstr_size, "%s: %s", INTERCEPTOR_NAME, rdk_problem);
        return -186; /* RD_KAFKA_RESP_ERR__INVALID_ARG */
    }
    return add_conf_interceptors(conf);
}

