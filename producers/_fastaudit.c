/* The audited producer's native produce path: a message costs about what it costs a plain producer.
 *
 * `Tally.produce(...)` takes confluent-kafka's produce arguments and calls librdkafka's
 * rd_kafka_produceva itself, on the rd_kafka_t of the bound confluent-kafka Producer, with the
 * `kaudit-time` header and timestamp added. Each message carries a small state as its opaque; its
 * first two fields are laid out as confluent-kafka's own per-message state (an unused pointer, then
 * the delivery callback or NULL), so confluent-kafka's delivery-report trampoline serves it exactly
 * as it serves a message produced through its own produce(): it calls the user's callback if there
 * is one and frees the state. No Python object is made per message.
 *
 * The counting happens in a librdkafka interceptor, on_acknowledgement, which this same shared
 * library registers as a librdkafka plugin (`plugin.library.paths`, entry point conf_init): it runs
 * in librdkafka's threads for every message once the broker acknowledged it or it failed for good,
 * and bumps plain C counters of the message's (topic, window) entry under a mutex: count, bytes, by
 * partition and a latency histogram when acknowledged, send_failed when not. Messages whose opaque is
 * not ours (the audit records, produced through confluent-kafka) are left alone.
 *
 * The `kaudit-time` header matters only on topics that use LogAppendTime (the broker replaces the
 * timestamp there), and it costs librdkafka about as much CPU again as the rest of a message. So a
 * window's messages carry it until an acknowledgement shows the topic keeps CreateTime (the broker
 * returns no append time), and again as soon as one shows LogAppendTime; drain() remembers what the
 * topic showed for the windows to come.
 *
 * `Tally.drain()` hands the deltas over and resets them; an entry stays while messages of it are in
 * flight, so an acknowledgement after a drain lands in the next one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

#include "latency_floors.h"
#include "rdkafka_abi.h"

#define INTERCEPTOR_NAME "kaudit.audited_producer"
#define STATE_MAGIC ((uintptr_t)0x6b61756469743133ULL) /* "kaudit13" */
#define TIMESTAMP_UNKNOWN (-1)

/* ---- librdkafka, found at run time --------------------------------------------------------- */

static rdkafka_api rdk;
static int rdk_found = 0; /* 1 when every function was found */
static char rdk_problem[512] = "not looked up yet";
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

static int rdkafka_ready(void) {
    pthread_once(&rdk_once, find_rdkafka);
    return rdk_found;
}

/* ---- the counts, shared between Python threads and librdkafka's ------------------------------ */

static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER; /* every Entry's counters and the rk registry */

/* The fields the producing thread writes and those librdkafka's thread writes sit on separate cache
 * lines: sharing one made each message move it between the cores twice (about 0.3 µs a message). */
typedef struct {
    PyObject_HEAD int64_t start;
    long long sent;     /* messages enqueued (under the GIL) */
    int timestamp_type; /* the topic's, as the last acknowledgement showed it (TIMESTAMP_UNKNOWN before);
                           read for every message, written by the interceptor only when it changes */
    char apart[64]; /* a cache line between the two, whatever the object's alignment */
    /* under counts_lock: */
    long long count, bytes, send_failed, zero_latency;
    long long done;        /* messages acknowledged or failed for good: sent - done are in flight */
    uint32_t *histogram;   /* n_floors counters, allocated on the first acknowledged message */
    long long *partitions; /* counts by partition, n_partitions long */
    int32_t n_partitions;
} Entry;

static void Entry_dealloc(Entry *self) {
    free(self->histogram);
    free(self->partitions);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "producers._fastaudit.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

static int64_t now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Under counts_lock. */
static void entry_acked(Entry *entry, int32_t partition, long long size, int64_t latency) {
    if (partition >= 0) {
        if (partition >= entry->n_partitions) {
            int32_t grown = entry->n_partitions ? entry->n_partitions : 8;
            while (grown <= partition) grown *= 2;
            long long *partitions = realloc(entry->partitions, sizeof(long long) * (size_t)grown);
            if (partitions != NULL) {
                memset(partitions + entry->n_partitions, 0,
                       sizeof(long long) * (size_t)(grown - entry->n_partitions));
                entry->partitions = partitions;
                entry->n_partitions = grown;
            }
        }
        if (partition < entry->n_partitions) entry->partitions[partition]++;
    }
    if (latency > 0) {
        if (entry->histogram == NULL) entry->histogram = calloc((size_t)n_floors, sizeof(uint32_t));
        if (entry->histogram != NULL) entry->histogram[floor_index(latency)]++;
    } else {
        entry->zero_latency++;
    }
    entry->count++;
    entry->bytes += size;
}

/* A message's opaque. The first two fields are where confluent-kafka's per-message state keeps its
 * Handle pointer (unused by its delivery path) and the delivery callback, which it calls and releases;
 * it frees the state with free(), hence calloc. */
typedef struct {
    uintptr_t magic;
    PyObject *callback;
    Entry *entry;
    int64_t audit_time_ms;
} MessageState;

/* The message this thread is handing to rd_kafka_produceva right now. librdkafka calls the interceptor
 * from inside that call only when it refuses the message (a partitioner failure): then produce()
 * raises, as confluent-kafka's does, and the message is not counted. Thread-local rather than a flag
 * in the state: the interceptor writing to the state made librdkafka's thread and the producing one
 * trade its cache line for every message. */
static __thread MessageState *being_sent = NULL;

/* rd_kafka_t instances created with the interceptor: a Tally binds only to those. */
static rd_kafka_t **registered = NULL;
static size_t n_registered = 0, registered_capacity = 0;

static int is_registered(rd_kafka_t *rk) {
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

/* ---- Tally ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD PyObject *entries; /* dict (topic, window start) -> Entry */
    int64_t window_ms;
    PyObject *last_topic; /* the last lookup, reused while topic and window stay the same */
    int64_t last_start;
    Entry *last_entry;
    PyObject *create_time_topics; /* set: topics whose acknowledgements showed CreateTime */
    PyObject *producer;           /* the confluent-kafka Producer, once bound */
    PyObject *default_callback; /* its config's on_delivery, or NULL */
    PyObject *emit;             /* called from produce() once next_emit has passed */
    PyObject *produce_error;    /* produce_error(code) -> the exception confluent-kafka would raise */
    double next_emit;           /* time.monotonic() seconds */
    int full_queue_retries;
    double full_queue_wait_s;
} Tally;

static char audit_time_header[64] = "";

/* confluent-kafka's Handle starts with the rd_kafka_t pointer (NULL once closed). */
typedef struct {
    PyObject_HEAD rd_kafka_t *rk;
} HandleHead;

static int Tally_init(Tally *self, PyObject *args, PyObject *kwargs) {
    long long window_ms;
    if (!PyArg_ParseTuple(args, "L", &window_ms)) return -1;
    if (window_ms <= 0) {
        PyErr_SetString(PyExc_ValueError, "window_ms must be positive");
        return -1;
    }
    if (floors == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastaudit.configure() was not called");
        return -1;
    }
    self->window_ms = window_ms;
    Py_XSETREF(self->entries, PyDict_New());
    Py_XSETREF(self->create_time_topics, PySet_New(NULL));
    return self->entries == NULL || self->create_time_topics == NULL ? -1 : 0;
}

/* The bound producer's emit() refers back to this Tally through its owner: a cycle the GC must see. */
static int Tally_traverse(Tally *self, visitproc visit, void *arg) {
    Py_VISIT(self->producer);
    Py_VISIT(self->default_callback);
    Py_VISIT(self->emit);
    Py_VISIT(self->produce_error);
    return 0;
}

static int Tally_clear(Tally *self) {
    Py_CLEAR(self->producer);
    Py_CLEAR(self->default_callback);
    Py_CLEAR(self->emit);
    Py_CLEAR(self->produce_error);
    return 0;
}

static void Tally_dealloc(Tally *self) {
    PyObject_GC_UnTrack(self);
    Tally_clear(self);
    if (self->entries != NULL) {
        /* An entry with messages in flight stays alive for good: the interceptor will still count into it. */
        PyObject *key, *value;
        Py_ssize_t position = 0;
        pthread_mutex_lock(&counts_lock);
        while (PyDict_Next(self->entries, &position, &key, &value)) {
            if (((Entry *)value)->sent != ((Entry *)value)->done) Py_INCREF(value);
        }
        pthread_mutex_unlock(&counts_lock);
    }
    Py_XDECREF(self->entries);
    Py_XDECREF(self->create_time_topics);
    Py_XDECREF(self->last_topic);
    Py_XDECREF(self->last_entry);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The entry of (topic, window start), made on first use; a borrowed reference. */
static Entry *lookup_entry(Tally *self, PyObject *topic, int64_t start) {
    if (self->last_entry != NULL && self->last_start == start &&
        (self->last_topic == topic || PyUnicode_Compare(self->last_topic, topic) == 0))
        return self->last_entry;
    if (PyErr_Occurred()) return NULL;
    PyObject *key = Py_BuildValue("(OL)", topic, (long long)start);
    if (key == NULL) return NULL;
    Entry *entry = (Entry *)PyDict_GetItemWithError(self->entries, key);
    if (entry == NULL && !PyErr_Occurred()) {
        entry = PyObject_New(Entry, &EntryType);
        if (entry != NULL) {
            entry->count = entry->bytes = entry->send_failed = entry->zero_latency = entry->sent = entry->done = 0;
            entry->timestamp_type = PySet_Contains(self->create_time_topics, topic) == 1 ? RD_KAFKA_TIMESTAMP_CREATE_TIME
                                                                                      : TIMESTAMP_UNKNOWN;
            entry->start = start;
            entry->histogram = NULL;
            entry->partitions = NULL;
            entry->n_partitions = 0;
            int failed = PyDict_SetItem(self->entries, key, (PyObject *)entry);
            Py_DECREF(entry); /* the dict holds it */
            if (failed < 0) entry = NULL;
        }
    }
    Py_DECREF(key);
    if (entry == NULL) return NULL;
    Py_INCREF(topic);
    Py_XSETREF(self->last_topic, topic);
    Py_INCREF(entry);
    Py_XSETREF(self->last_entry, entry);
    self->last_start = start;
    return entry;
}

/* bind(producer, default_callback, emit, produce_error, full_queue_retries, full_queue_wait_s) */
static PyObject *Tally_bind(Tally *self, PyObject *args) {
    PyObject *producer, *default_callback, *emit, *produce_error;
    int retries;
    double wait_s;
    if (!PyArg_ParseTuple(args, "OOOOid", &producer, &default_callback, &emit, &produce_error, &retries, &wait_s))
        return NULL;
    if (!rdkafka_ready()) {
        PyErr_Format(PyExc_RuntimeError, "librdkafka not found: %s", rdk_problem);
        return NULL;
    }
    PyObject *cimpl = PyImport_ImportModule("confluent_kafka.cimpl");
    PyObject *producer_type = cimpl ? PyObject_GetAttrString(cimpl, "Producer") : NULL;
    Py_XDECREF(cimpl);
    if (producer_type == NULL) return NULL;
    int is_producer = PyType_Check(producer_type) && PyObject_TypeCheck(producer, (PyTypeObject *)producer_type);
    Py_DECREF(producer_type);
    rd_kafka_t *rk = is_producer ? ((HandleHead *)producer)->rk : NULL;
    /* confluent-kafka sets the rd_kafka_t's opaque to its Handle: proof that the pointer is the right one */
    if (rk == NULL || rdk.opaque(rk) != (void *)producer || rdk.type(rk) != RD_KAFKA_PRODUCER) {
        PyErr_SetString(PyExc_RuntimeError, "not an open confluent-kafka Producer");
        return NULL;
    }
    if (!is_registered(rk)) {
        PyErr_SetString(PyExc_RuntimeError, "the producer was created without this library in plugin.library.paths");
        return NULL;
    }
    Py_INCREF(producer);
    Py_XSETREF(self->producer, producer);
    Py_XSETREF(self->default_callback, default_callback == Py_None ? NULL : (Py_INCREF(default_callback), default_callback));
    Py_INCREF(emit);
    Py_XSETREF(self->emit, emit);
    Py_INCREF(produce_error);
    Py_XSETREF(self->produce_error, produce_error);
    self->full_queue_retries = retries;
    self->full_queue_wait_s = wait_s;
    Py_RETURN_NONE;
}

/* A value, key or header value as bytes: None, bytes, str (UTF-8) or any buffer. */
typedef struct {
    const char *data;
    Py_ssize_t size;
    Py_buffer view; /* held when view.obj != NULL */
} Bytes;

static int bytes_of(PyObject *object, Bytes *out, const char *what) {
    out->view.obj = NULL;
    if (object == NULL || object == Py_None) {
        out->data = NULL;
        out->size = 0;
    } else if (PyBytes_Check(object)) {
        out->data = PyBytes_AS_STRING(object);
        out->size = PyBytes_GET_SIZE(object);
    } else if (PyUnicode_Check(object)) {
        out->data = PyUnicode_AsUTF8AndSize(object, &out->size);
        if (out->data == NULL) return -1;
    } else if (PyObject_GetBuffer(object, &out->view, PyBUF_SIMPLE) == 0) {
        out->data = out->view.buf;
        out->size = out->view.len;
    } else {
        PyErr_Format(PyExc_TypeError, "%s must be bytes, str or None, not %.100s", what, Py_TYPE(object)->tp_name);
        return -1;
    }
    return 0;
}

static void release(Bytes *bytes) {
    if (bytes->view.obj != NULL) PyBuffer_Release(&bytes->view);
}

/* The user's headers as (name, value) pairs: None, a list or tuple of pairs, or a dict. */
static PyObject *header_pairs(PyObject *headers) {
    if (headers == NULL || headers == Py_None) return PyList_New(0);
    if (PyDict_Check(headers)) return PyDict_Items(headers);
    if (PyList_Check(headers) || PyTuple_Check(headers)) {
        Py_INCREF(headers);
        return headers;
    }
    if (PyMapping_Check(headers)) return PyMapping_Items(headers);
    PyErr_Format(PyExc_TypeError, "headers must be a list of (name, value) or a dict, not %.100s",
                 Py_TYPE(headers)->tp_name);
    return NULL;
}

static int format_decimal(char *out, int64_t value) {
    char digits[24];
    int n = 0, length = 0;
    uint64_t rest = value < 0 ? (uint64_t)(-value) : (uint64_t)value;
    do digits[n++] = (char)('0' + rest % 10);
    while ((rest /= 10) != 0);
    if (value < 0) out[length++] = '-';
    while (n) out[length++] = digits[--n];
    return length;
}

static double monotonic_s(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + now.tv_nsec / 1e9;
}

enum { A_TOPIC, A_VALUE, A_KEY, A_PARTITION, A_ON_DELIVERY, A_TIMESTAMP, A_HEADERS, A_CALLBACK, N_ARGS };
static const char *argument_names[N_ARGS] = {"topic",       "value",     "key",     "partition",
                                             "on_delivery", "timestamp", "headers", "callback"};
#define STACK_HEADERS 8

static int parse_arguments(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **slots) {
    if (nargs > N_ARGS) {
        PyErr_Format(PyExc_TypeError, "produce() takes at most %d arguments (%zd given)", N_ARGS, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) slots[i] = args[i];
    Py_ssize_t n_keywords = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < n_keywords; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < N_ARGS && found < 0; i++) {
            if (PyUnicode_CompareWithASCIIString(name, argument_names[i]) == 0) found = i;
        }
        if (found < 0 || slots[found] != NULL) {
            PyErr_Format(PyExc_TypeError, found < 0 ? "produce() got an unexpected keyword argument '%U'"
                                                    : "produce() got multiple values for argument '%U'",
                         name);
            return -1;
        }
        slots[found] = args[nargs + k];
    }
    if (slots[A_TOPIC] == NULL || !PyUnicode_Check(slots[A_TOPIC])) {
        PyErr_SetString(PyExc_TypeError, "produce() needs a topic (str)");
        return -1;
    }
    return 0;
}

static int int_argument(PyObject *object, long long fallback, long long *out, const char *what) {
    if (object == NULL || object == Py_None) {
        *out = fallback;
        return 0;
    }
    *out = PyLong_AsLongLong(object);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    return 0;
}

static rd_kafka_resp_err_t send_once(rd_kafka_t *rk, rd_kafka_vu_t *vus, size_t n_vus, MessageState *state) {
    state->entry->sent++;
    being_sent = state;
    rd_kafka_error_t *error = rdk.produceva(rk, vus, n_vus);
    being_sent = NULL;
    if (error == NULL) return 0;
    rd_kafka_resp_err_t err = rdk.error_code(error);
    rdk.error_destroy(error);
    state->entry->sent--; /* not enqueued */
    return err;
}

/* produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0, headers=None,
 *         callback=None): confluent-kafka's produce, stamping the audit time, counted when acknowledged. */
static PyObject *Tally_produce(Tally *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *slots[N_ARGS] = {NULL};
    if (parse_arguments(args, nargs, kwnames, slots) < 0) return NULL;
    if (self->producer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Tally.bind() was not called, or the producer is gone");
        return NULL;
    }
    long long partition, timestamp;
    if (int_argument(slots[A_PARTITION], -1, &partition, "partition") < 0 ||
        int_argument(slots[A_TIMESTAMP], 0, &timestamp, "timestamp") < 0)
        return NULL;
    Py_ssize_t topic_size;
    const char *topic = PyUnicode_AsUTF8AndSize(slots[A_TOPIC], &topic_size);
    if (topic == NULL) return NULL;
    int64_t audit_time_ms = timestamp ? timestamp : now_ms();
    int64_t start = audit_time_ms > 0 ? audit_time_ms - audit_time_ms % self->window_ms : 0;
    Entry *entry = lookup_entry(self, slots[A_TOPIC], start);
    if (entry == NULL) return NULL;

    PyObject *result = NULL, *pairs = NULL;
    Bytes value = {.view.obj = NULL}, key = {.view.obj = NULL};
    Bytes header_values[STACK_HEADERS];
    Bytes *values = header_values;
    rd_kafka_vu_t stack_vus[8 + STACK_HEADERS];
    rd_kafka_vu_t *vus = stack_vus;
    Py_ssize_t n_headers = 0, n_released = 0;
    MessageState *state = NULL;

    if (bytes_of(slots[A_VALUE], &value, "value") < 0 || bytes_of(slots[A_KEY], &key, "key") < 0) goto done;
    pairs = header_pairs(slots[A_HEADERS]);
    if (pairs == NULL) goto done;
    n_headers = PySequence_Fast_GET_SIZE(pairs); /* header_pairs gives a list or a tuple */
    if (n_headers > STACK_HEADERS) {
        values = PyMem_Malloc(sizeof(Bytes) * (size_t)n_headers);
        vus = PyMem_Malloc(sizeof(rd_kafka_vu_t) * (size_t)(8 + n_headers));
        if (values == NULL || vus == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    size_t n = 0;
    vus[n].vtype = RD_KAFKA_VTYPE_TOPIC, vus[n++].u.cstr = topic;
    vus[n].vtype = RD_KAFKA_VTYPE_PARTITION, vus[n++].u.i32 = (int32_t)partition;
    vus[n].vtype = RD_KAFKA_VTYPE_VALUE, vus[n].u.mem.ptr = value.data, vus[n++].u.mem.size = (size_t)value.size;
    vus[n].vtype = RD_KAFKA_VTYPE_KEY, vus[n].u.mem.ptr = key.data, vus[n++].u.mem.size = (size_t)key.size;
    vus[n].vtype = RD_KAFKA_VTYPE_MSGFLAGS, vus[n++].u.i = RD_KAFKA_MSG_F_COPY;
    vus[n].vtype = RD_KAFKA_VTYPE_TIMESTAMP, vus[n++].u.i64 = audit_time_ms;
    for (Py_ssize_t h = 0; h < n_headers; h++, n_released++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(pairs, h);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            PyErr_SetString(PyExc_TypeError, "each header must be a (str, bytes|str|None) tuple");
            goto done;
        }
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0));
        if (name == NULL || bytes_of(PyTuple_GET_ITEM(pair, 1), &values[h], "a header value") < 0) goto done;
        vus[n].vtype = RD_KAFKA_VTYPE_HEADER, vus[n].u.header.name = name;
        vus[n].u.header.val = values[h].data, vus[n++].u.header.size = values[h].data ? values[h].size : 0;
    }
    char stamp[24];
    if (__atomic_load_n(&entry->timestamp_type, __ATOMIC_RELAXED) != RD_KAFKA_TIMESTAMP_CREATE_TIME) {
        vus[n].vtype = RD_KAFKA_VTYPE_HEADER, vus[n].u.header.name = audit_time_header, vus[n].u.header.val = stamp;
        vus[n++].u.header.size = format_decimal(stamp, audit_time_ms);
    }
    size_t opaque_slot = n++;

    PyObject *callback = slots[A_ON_DELIVERY] != NULL && slots[A_ON_DELIVERY] != Py_None ? slots[A_ON_DELIVERY]
                         : slots[A_CALLBACK] != NULL && slots[A_CALLBACK] != Py_None ? slots[A_CALLBACK]
                                                                                     : self->default_callback;
    state = calloc(1, sizeof(MessageState));
    if (state == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    state->magic = STATE_MAGIC;
    state->entry = entry;
    state->audit_time_ms = audit_time_ms;
    vus[opaque_slot].vtype = RD_KAFKA_VTYPE_OPAQUE, vus[opaque_slot].u.ptr = state;

    rd_kafka_resp_err_t err = 0;
    for (int attempt = 0;; attempt++) {
        rd_kafka_t *rk = ((HandleHead *)self->producer)->rk;
        if (rk == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "Producer has been closed");
            goto done;
        }
        err = send_once(rk, vus, n, state);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || attempt >= self->full_queue_retries) break;
        /* The local queue is full: serve delivery reports to make room, then try again. */
        PyObject *served = PyObject_CallMethod(self->producer, "poll", "d", self->full_queue_wait_s);
        if (served == NULL) goto done;
        Py_DECREF(served);
    }
    if (err) {
        PyObject *exception = PyObject_CallFunction(self->produce_error, "i", err);
        if (exception != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exception), exception);
            Py_DECREF(exception);
        }
        goto done;
    }
    if (callback != NULL) {
        Py_INCREF(callback);
        state->callback = callback;
    }
    state = NULL; /* librdkafka and confluent-kafka's delivery path own it now */
    if (self->emit != NULL && monotonic_s() >= self->next_emit) {
        result = PyObject_CallNoArgs(self->emit);
        if (result == NULL) goto done;
        Py_DECREF(result);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    free(state);
    release(&value);
    release(&key);
    for (Py_ssize_t h = 0; h < n_released; h++) release(&values[h]);
    if (values != header_values) PyMem_Free(values);
    if (vus != stack_vus) PyMem_Free(vus);
    Py_XDECREF(pairs);
    return result;
}

/* What drain() takes out of an entry under the lock, turned into Python objects after. */
typedef struct {
    long long count, bytes, send_failed, zero_latency;
    uint32_t *histogram;
    long long *partitions;
    int32_t n_partitions;
    int forgettable;
    int timestamp_type;
} Taken;

static PyObject *taken_row(Taken *taken) {
    PyObject *partitions = Py_None, *histogram = PyDict_New();
    Py_INCREF(Py_None);
    if (histogram == NULL) goto error;
    for (int32_t p = 0; p < taken->n_partitions; p++) {
        if (!taken->partitions[p]) continue;
        if (partitions == Py_None) {
            Py_DECREF(Py_None);
            partitions = PyDict_New();
            if (partitions == NULL) goto error;
        }
        PyObject *pk = PyLong_FromLong(p), *pv = PyLong_FromLongLong(taken->partitions[p]);
        int failed = pk == NULL || pv == NULL || PyDict_SetItem(partitions, pk, pv) < 0;
        Py_XDECREF(pk);
        Py_XDECREF(pv);
        if (failed) goto error;
    }
    if (taken->zero_latency) {
        PyObject *zero = PyLong_FromLong(0), *n = PyLong_FromLongLong(taken->zero_latency);
        int failed = zero == NULL || n == NULL || PyDict_SetItem(histogram, zero, n) < 0;
        Py_XDECREF(zero);
        Py_XDECREF(n);
        if (failed) goto error;
    }
    for (Py_ssize_t i = 0; taken->histogram && i < n_floors; i++) {
        if (!taken->histogram[i]) continue;
        PyObject *n = PyLong_FromUnsignedLong(taken->histogram[i]);
        int failed = n == NULL || PyDict_SetItem(histogram, floor_objects[i], n) < 0;
        Py_XDECREF(n);
        if (failed) goto error;
    }
    /* "N" hands both over, on failure too */
    return Py_BuildValue("(LLLNN)", taken->count, taken->bytes, taken->send_failed, partitions, histogram);
error:
    Py_XDECREF(partitions);
    Py_XDECREF(histogram);
    return NULL;
}

/* drain() -> {(topic, window start): (count, bytes, send_failed, {partition: n} or None, {latency floor: n})}
 * for every entry with something to report; resets them and forgets entries with nothing in flight. */
static PyObject *Tally_drain(Tally *self, PyObject *unused) {
    Py_ssize_t n_entries = PyDict_Size(self->entries);
    Taken *taken = PyMem_Calloc((size_t)(n_entries ? n_entries : 1), sizeof(Taken));
    PyObject *keys = PyDict_Keys(self->entries), *result = PyDict_New();
    if (taken == NULL || keys == NULL || result == NULL) goto error;
    /* Under the lock, only swaps: no Python code runs while librdkafka's threads wait. */
    pthread_mutex_lock(&counts_lock);
    for (Py_ssize_t i = 0; i < n_entries; i++) {
        Entry *entry = (Entry *)PyDict_GetItem(self->entries, PyList_GET_ITEM(keys, i));
        Taken *t = &taken[i];
        t->count = entry->count, t->bytes = entry->bytes, t->send_failed = entry->send_failed;
        t->zero_latency = entry->zero_latency, t->histogram = entry->histogram;
        t->partitions = entry->partitions, t->n_partitions = entry->n_partitions;
        t->forgettable = entry->sent == entry->done;
        t->timestamp_type = __atomic_load_n(&entry->timestamp_type, __ATOMIC_RELAXED);
        entry->count = entry->bytes = entry->send_failed = entry->zero_latency = 0;
        entry->histogram = NULL, entry->partitions = NULL, entry->n_partitions = 0;
    }
    pthread_mutex_unlock(&counts_lock);
    /* Only produce() adds messages to an entry, and it needs the GIL we hold: a forgettable entry stays so. */
    int failed = 0;
    for (Py_ssize_t i = 0; i < n_entries; i++) {
        Taken *t = &taken[i];
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!failed && (t->count || t->send_failed)) {
            PyObject *row = taken_row(t);
            failed = row == NULL || PyDict_SetItem(result, key, row) < 0;
            Py_XDECREF(row);
        }
        free(t->histogram);
        free(t->partitions);
        if (!failed && t->timestamp_type != TIMESTAMP_UNKNOWN) {
            PyObject *topic = PyTuple_GET_ITEM(key, 0);
            failed = (t->timestamp_type == RD_KAFKA_TIMESTAMP_CREATE_TIME ? PySet_Add(self->create_time_topics, topic)
                                                                          : PySet_Discard(self->create_time_topics, topic)) < 0;
        }
        if (!failed && t->forgettable) {
            if ((PyObject *)self->last_entry == PyDict_GetItem(self->entries, key)) {
                Py_CLEAR(self->last_entry);
                Py_CLEAR(self->last_topic);
            }
            failed = PyDict_DelItem(self->entries, key) < 0;
        }
    }
    PyMem_Free(taken);
    Py_DECREF(keys);
    if (failed) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
error:
    PyMem_Free(taken);
    Py_XDECREF(keys);
    Py_XDECREF(result);
    return NULL;
}

static PyObject *Tally_len(Tally *self, PyObject *unused) { return PyLong_FromSsize_t(PyDict_Size(self->entries)); }

static PyMethodDef Tally_methods[] = {
    {"bind", (PyCFunction)Tally_bind, METH_VARARGS,
     "bind(producer, default_callback, emit, produce_error, full_queue_retries, full_queue_wait_s)"},
    {"produce", (PyCFunction)(void (*)(void))Tally_produce, METH_FASTCALL | METH_KEYWORDS,
     "produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0, headers=None, "
     "callback=None)"},
    {"drain", (PyCFunction)Tally_drain, METH_NOARGS, "drain() -> deltas by (topic, window start)"},
    {"entries", (PyCFunction)Tally_len, METH_NOARGS, "entries() -> how many (topic, window) entries are kept"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Tally_members[] = {
    {"next_emit", T_DOUBLE, offsetof(Tally, next_emit), 0, "produce() calls emit once time.monotonic() passes it"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject TallyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "producers._fastaudit.Tally",
    .tp_basicsize = sizeof(Tally),
    .tp_dealloc = (destructor)Tally_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Tally_traverse,
    .tp_clear = (inquiry)Tally_clear,
    .tp_methods = Tally_methods,
    .tp_members = Tally_members,
    .tp_init = (initproc)Tally_init,
    .tp_new = PyType_GenericNew,
};

/* configure(floors, audit_time_header): the latency bucket floors (audit.contract.tally.LATENCY_FLOORS)
 * and the name of the header that carries the audit time */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *sequence;
    const char *header;
    if (!PyArg_ParseTuple(args, "Os", &sequence, &header)) return NULL;
    snprintf(audit_time_header, sizeof audit_time_header, "%s", header);
    if (floors != NULL) Py_RETURN_NONE; /* once: live entries' histograms are sized by it */
    if (load_floors(sequence) < 0) return NULL;
    Py_RETURN_NONE;
}

/* librdkafka() -> None when librdkafka's functions were found, else why not */
static PyObject *librdkafka_problem(PyObject *self, PyObject *unused) {
    if (rdkafka_ready()) Py_RETURN_NONE;
    return PyUnicode_FromString(rdk_problem);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(floors, audit_time_header)"},
    {"librdkafka_problem", librdkafka_problem, METH_NOARGS, "None when librdkafka was found, else why not"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastaudit", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastaudit(void) {
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&TallyType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&TallyType);
    if (PyModule_AddObject(m, "Tally", (PyObject *)&TallyType) < 0) {
        Py_DECREF(&TallyType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
