/* The audited producer's native counts (see _fastaudit.h): the Tally type, its (topic, window) entries,
 * drain(), and the module. */
#include "_fastaudit.h"

#include <stdlib.h>
#include <string.h>
#include <structmember.h>

#include "audit_window.h"
#include "latency_floors.h"

char audit_time_header[64] = "";
int64_t max_audit_time_ms = 0;

/* ---- the counts, shared between Python threads and librdkafka's ------------------------------ */

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

/* Under counts_lock. */
void entry_acked(Entry *entry, int32_t partition, long long size, int64_t latency) {
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

/* ---- Tally ----------------------------------------------------------------------------------- */

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
Entry *lookup_entry(Tally *self, PyObject *topic, int64_t start) {
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

/* Under counts_lock, only swaps: each entry's counts into `taken`, the entry reset. No Python code runs
 * while librdkafka's threads wait. */
static void take_counts(Tally *self, PyObject *keys, Taken *taken, Py_ssize_t n_entries) {
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
}

/* What an entry's acknowledgements showed of its topic's timestamp type, kept for the topic's next windows.
 * Only from entries that counted a message now: the Python side has just seen the topic then, and forget()s
 * it with the topics it forgets, so this set never holds a topic the Python side no longer keeps. */
static int remember_timestamp_type(Tally *self, PyObject *key, const Taken *t) {
    if (!t->count || t->timestamp_type == TIMESTAMP_UNKNOWN) return 0;
    PyObject *topic = PyTuple_GET_ITEM(key, 0);
    return t->timestamp_type == RD_KAFKA_TIMESTAMP_CREATE_TIME ? PySet_Add(self->create_time_topics, topic)
                                                               : PySet_Discard(self->create_time_topics, topic);
}

/* drain() -> {(topic, window start): (count, bytes, send_failed, {partition: n} or None, {latency floor: n})}
 * for every entry with something to report; resets them and forgets entries with nothing in flight. */
static PyObject *Tally_drain(Tally *self, PyObject *unused) {
    Py_ssize_t n_entries = PyDict_Size(self->entries);
    Taken *taken = PyMem_Calloc((size_t)(n_entries ? n_entries : 1), sizeof(Taken));
    PyObject *keys = PyDict_Keys(self->entries), *result = PyDict_New();
    if (taken == NULL || keys == NULL || result == NULL) {
        PyMem_Free(taken);
        Py_XDECREF(keys);
        Py_XDECREF(result);
        return NULL;
    }
    take_counts(self, keys, taken, n_entries);
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
        if (!failed) failed = remember_timestamp_type(self, key, t) < 0;
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
    if (failed) Py_CLEAR(result);
    return result;
}

/* forget(topic): what its acknowledgements showed of its timestamp type; its next window's messages carry
 * the header again until one shows CreateTime. */
static PyObject *Tally_forget(Tally *self, PyObject *topic) {
    if (PySet_Discard(self->create_time_topics, topic) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Tally_len(Tally *self, PyObject *unused) { return PyLong_FromSsize_t(PyDict_Size(self->entries)); }

static PyObject *Tally_topics(Tally *self, PyObject *unused) {
    return PyLong_FromSsize_t(PySet_Size(self->create_time_topics));
}

static PyMethodDef Tally_methods[] = {
    {"bind", (PyCFunction)Tally_bind, METH_VARARGS,
     "bind(producer, default_callback, emit, produce_error, full_queue_retries, full_queue_wait_s)"},
    {"produce", (PyCFunction)(void (*)(void))Tally_produce, METH_FASTCALL | METH_KEYWORDS,
     "produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0, headers=None, "
     "callback=None)"},
    {"drain", (PyCFunction)Tally_drain, METH_NOARGS, "drain() -> deltas by (topic, window start)"},
    {"forget", (PyCFunction)Tally_forget, METH_O, "forget(topic): drop what is known of its timestamp type"},
    {"entries", (PyCFunction)Tally_len, METH_NOARGS, "entries() -> how many (topic, window) entries are kept"},
    {"topics", (PyCFunction)Tally_topics, METH_NOARGS, "topics() -> how many topics' timestamp types are kept"},
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

/* configure(floors, audit_time_header, max_audit_time_ms): the latency bucket floors
 * (audit.contract.tally.LATENCY_FLOORS), the name of the header that carries the audit time and the
 * latest usable audit time (audit.contract.record.MAX_AUDIT_TIME_MS) */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *sequence;
    const char *header;
    long long max_time_ms;
    if (!PyArg_ParseTuple(args, "OsL", &sequence, &header, &max_time_ms)) return NULL;
    snprintf(audit_time_header, sizeof audit_time_header, "%s", header);
    max_audit_time_ms = max_time_ms;
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
    {"configure", configure, METH_VARARGS, "configure(floors, audit_time_header, max_audit_time_ms)"},
    {"librdkafka_problem", librdkafka_problem, METH_NOARGS, "None when librdkafka was found, else why not"},
    {"window_start", window_start, METH_VARARGS, "window_start(time_ms, window_ms) -> the window's start"},
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
