/* The audited producer's native produce path, one extension built from three files (native/build.py):
 *   _fastaudit.c          the Tally type: its (topic, window) entries and their counts, drain(), the module;
 *   _fastaudit_produce.c  bind() and produce(): confluent-kafka's produce arguments, sent through librdkafka;
 *   _fastaudit_plugin.c   the librdkafka plugin: librdkafka found at run time, the interceptors that count.
 * Built with -fvisibility=hidden: what they share here stays inside the library, which librdkafka also
 * loads into the application's process as a plugin; only PyInit__fastaudit and conf_init are exported.
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
 * topic showed for the windows to come, for at most the topics the Python side keeps (forget()).
 * A message whose timestamp is no usable audit time carries the header always (audit/contract/audit_time.py).
 *
 * `Tally.drain()` hands the deltas over and resets them; an entry stays while messages of it are in
 * flight, so an acknowledgement after a drain lands in the next one.
 */
#ifndef KAUDIT_FASTAUDIT_H
#define KAUDIT_FASTAUDIT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

#include "rdkafka_abi.h"

#define STATE_MAGIC ((uintptr_t)0x6b61756469743133ULL) /* "kaudit13" */
#define TIMESTAMP_UNKNOWN (-1)

/* ---- _fastaudit_plugin.c: librdkafka and its interceptors ---------------------------------------- */

extern rdkafka_api rdk;
extern char rdk_problem[512];
int rdkafka_ready(void); /* 1 once every librdkafka function was found, else rdk_problem says why */
int is_registered(rd_kafka_t *rk); /* made with this library in plugin.library.paths */
int64_t now_ms(void);

/* Guards every Entry's counters and the registry of rd_kafka_t instances. */
extern pthread_mutex_t counts_lock;

/* The fields the producing thread writes and those librdkafka's thread writes sit on separate cache
 * lines: sharing one made each message move it between the cores twice. */
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

/* Under counts_lock: one message of `entry` acknowledged (in _fastaudit.c, which holds the latency floors). */
void entry_acked(Entry *entry, int32_t partition, long long size, int64_t latency);

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
 * in the state, which librdkafka's thread and the producing one would otherwise both write. */
extern __thread MessageState *being_sent;

/* ---- _fastaudit.c: the Tally ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD PyObject *entries; /* dict (topic, window start) -> Entry */
    int64_t window_ms;
    PyObject *last_topic; /* the last lookup, reused while topic and window stay the same */
    int64_t last_start;
    Entry *last_entry;
    PyObject *create_time_topics; /* set: topics whose acknowledgements showed CreateTime */
    PyObject *producer;           /* the confluent-kafka Producer, once bound */
    PyObject *default_callback;   /* its config's on_delivery, or NULL */
    PyObject *emit;               /* called from produce() once next_emit has passed */
    PyObject *produce_error;      /* produce_error(code) -> the exception confluent-kafka would raise */
    double next_emit;             /* time.monotonic() seconds */
    int full_queue_retries;
    double full_queue_wait_s;
} Tally;

extern char audit_time_header[64];
extern int64_t max_audit_time_ms; /* the contract's MAX_AUDIT_TIME_MS, from configure() */

/* The entry of (topic, window start), made on first use; a borrowed reference. */
Entry *lookup_entry(Tally *self, PyObject *topic, int64_t start);

/* ---- _fastaudit_produce.c ---------------------------------------------------------------------- */

/* confluent-kafka's Handle starts with the rd_kafka_t pointer (NULL once closed). */
typedef struct {
    PyObject_HEAD rd_kafka_t *rk;
} HandleHead;

PyObject *Tally_bind(Tally *self, PyObject *args);
PyObject *Tally_produce(Tally *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

#endif
