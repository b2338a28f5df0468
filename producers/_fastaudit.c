/* The audited producer's delivery counting in C: no Python code runs per delivery report.
 *
 * `Tally.delivery(topic, audit_time_ms, user_callback)` returns a small callable that the producer
 * passes as the message's on_delivery. It points at its (topic, window) entry, so a delivery report
 * (err, msg) only bumps C counters there: count, bytes, by partition and a latency histogram for an
 * acknowledged message, send_failed for a failed one (a failed report carries no timestamp, so the
 * window comes from the callable, as the Python closure of the fallback does). Then it calls the
 * user's callback, if any. `Tally.drain()` hands the deltas over and resets them; an entry stays as
 * long as messages of it are in flight, so a report after a drain lands in the next one.
 *
 * It reads only the partition, key and value of the Message through the Python-visible C API of
 * confluent-kafka's Message (methods), so it does not depend on the struct layout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "latency_floors.h"

/* ---- Entry: one (topic, window)'s deltas ------------------------------------------------------ */

typedef struct {
    PyObject_HEAD long long count, bytes, send_failed, zero_latency;
    int64_t start;
    uint32_t *histogram; /* n_floors counters, allocated on the first acknowledged message */
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

static int entry_acked(Entry *entry, long partition, long long size, int64_t latency) {
    if (partition >= 0) {
        if (partition >= entry->n_partitions) {
            int32_t grown = entry->n_partitions ? entry->n_partitions : 8;
            while (grown <= partition) grown *= 2;
            long long *partitions = realloc(entry->partitions, sizeof(long long) * (size_t)grown);
            if (partitions == NULL) return -1;
            memset(partitions + entry->n_partitions, 0, sizeof(long long) * (size_t)(grown - entry->n_partitions));
            entry->partitions = partitions;
            entry->n_partitions = grown;
        }
        entry->partitions[partition]++;
    }
    if (latency > 0) {
        if (entry->histogram == NULL) {
            entry->histogram = calloc((size_t)n_floors, sizeof(uint32_t));
            if (entry->histogram == NULL) return -1;
        }
        entry->histogram[floor_index(latency)]++;
    } else {
        entry->zero_latency++;
    }
    entry->count++;
    entry->bytes += size;
    return 0;
}

/* ---- Delivered: the per-message on_delivery callable ----------------------------------------- */

typedef struct {
    PyObject_HEAD Entry *entry;
    int64_t audit_time_ms;
    PyObject *user_callback; /* or NULL */
} Delivered;

static void Delivered_dealloc(Delivered *self) {
    Py_XDECREF(self->entry);
    Py_XDECREF(self->user_callback);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t sized(PyObject *object) {
    if (object == Py_None) return 0;
    if (PyBytes_CheckExact(object)) return PyBytes_GET_SIZE(object);
    return PyObject_Length(object);
}

static int64_t now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static PyObject *call_method(PyObject *object, const char *name) {
    return PyObject_CallMethod(object, name, NULL);
}

static PyObject *Delivered_call(Delivered *self, PyObject *args, PyObject *kwargs) {
    PyObject *err, *msg;
    if (!PyArg_ParseTuple(args, "OO", &err, &msg)) return NULL;
    Entry *entry = self->entry;
    if (err != Py_None) {
        entry->send_failed++;
    } else {
        /* len(msg) is the value's length; the key adds its own, as the Python loop does */
        PyObject *partition = call_method(msg, "partition");
        if (partition == NULL) return NULL;
        long p = partition == Py_None ? -1 : PyLong_AsLong(partition);
        Py_DECREF(partition);
        if (p == -1 && PyErr_Occurred()) return NULL;
        PyObject *key = call_method(msg, "key");
        if (key == NULL) return NULL;
        Py_ssize_t key_size = sized(key);
        Py_DECREF(key);
        Py_ssize_t value_size = PyObject_Length(msg);
        if (key_size < 0 || value_size < 0) return NULL;
        int64_t latency = now_ms() - self->audit_time_ms;
        if (entry_acked(entry, p, (long long)(key_size + value_size), latency) < 0) return PyErr_NoMemory();
    }
    if (self->user_callback != NULL) return PyObject_CallFunctionObjArgs(self->user_callback, err, msg, NULL);
    Py_RETURN_NONE;
}

static PyTypeObject DeliveredType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "producers._fastaudit.Delivered",
    .tp_basicsize = sizeof(Delivered),
    .tp_dealloc = (destructor)Delivered_dealloc,
    .tp_call = (ternaryfunc)Delivered_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* ---- Tally ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD PyObject *entries; /* dict (topic, window start) -> Entry */
    int64_t window_ms;
    PyObject *last_topic; /* the last lookup, reused while topic and window stay the same */
    int64_t last_start;
    Entry *last_entry;
} Tally;

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
    return self->entries == NULL ? -1 : 0;
}

static void Tally_dealloc(Tally *self) {
    Py_XDECREF(self->entries);
    Py_XDECREF(self->last_topic);
    Py_XDECREF(self->last_entry);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* delivery(topic, audit_time_ms, user_callback or None) -> the on_delivery callable */
static PyObject *Tally_delivery(Tally *self, PyObject *args) {
    PyObject *topic, *user_callback;
    long long audit_time_ms;
    if (!PyArg_ParseTuple(args, "ULO", &topic, &audit_time_ms, &user_callback)) return NULL;
    /* the window of the audit time; times before the epoch go to window 0, as in the Python Tally */
    int64_t start = audit_time_ms > 0 ? audit_time_ms - audit_time_ms % self->window_ms : 0;
    Entry *entry = NULL;
    if (self->last_entry != NULL && self->last_start == start &&
        (self->last_topic == topic || PyUnicode_Compare(self->last_topic, topic) == 0)) {
        entry = self->last_entry;
    } else {
        if (PyErr_Occurred()) return NULL;
        PyObject *key = Py_BuildValue("(OL)", topic, (long long)start);
        if (key == NULL) return NULL;
        entry = (Entry *)PyDict_GetItemWithError(self->entries, key);
        if (entry == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                return NULL;
            }
            entry = PyObject_New(Entry, &EntryType);
            if (entry == NULL) {
                Py_DECREF(key);
                return NULL;
            }
            entry->count = entry->bytes = entry->send_failed = entry->zero_latency = 0;
            entry->start = start;
            entry->histogram = NULL;
            entry->partitions = NULL;
            entry->n_partitions = 0;
            int failed = PyDict_SetItem(self->entries, key, (PyObject *)entry);
            Py_DECREF(entry); /* the dict holds it */
            if (failed < 0) {
                Py_DECREF(key);
                return NULL;
            }
        }
        Py_DECREF(key);
        Py_INCREF(topic);
        Py_XSETREF(self->last_topic, topic);
        Py_INCREF(entry);
        Py_XSETREF(self->last_entry, entry);
        self->last_start = start;
    }
    Delivered *delivered = PyObject_New(Delivered, &DeliveredType);
    if (delivered == NULL) return NULL;
    Py_INCREF(entry);
    delivered->entry = entry;
    delivered->audit_time_ms = audit_time_ms;
    if (user_callback == Py_None) {
        delivered->user_callback = NULL;
    } else {
        Py_INCREF(user_callback);
        delivered->user_callback = user_callback;
    }
    return (PyObject *)delivered;
}

/* drain() -> {(topic, window start): (count, bytes, send_failed, {partition: n} or None, {latency floor: n})}
 * for every entry with something to report; resets them and forgets entries nothing refers to. */
static PyObject *Tally_drain(Tally *self, PyObject *unused) {
    PyObject *result = PyDict_New(), *forget = PyList_New(0);
    if (result == NULL || forget == NULL) goto error;
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(self->entries, &position, &key, &value)) {
        Entry *entry = (Entry *)value;
        /* held by the dict alone (and maybe the last-lookup cache): no message of it is in flight */
        Py_ssize_t references = Py_REFCNT(value) - ((PyObject *)self->last_entry == value ? 1 : 0);
        if (entry->count || entry->send_failed) {
            PyObject *partitions = Py_None, *histogram = PyDict_New();
            Py_INCREF(Py_None);
            if (histogram == NULL) goto error;
            int any_partition = 0;
            for (int32_t p = 0; p < entry->n_partitions; p++) any_partition |= entry->partitions[p] != 0;
            if (any_partition) {
                Py_DECREF(Py_None);
                partitions = PyDict_New();
                if (partitions == NULL) {
                    Py_DECREF(histogram);
                    goto error;
                }
                for (int32_t p = 0; p < entry->n_partitions; p++) {
                    if (!entry->partitions[p]) continue;
                    PyObject *pk = PyLong_FromLong(p), *pv = PyLong_FromLongLong(entry->partitions[p]);
                    int failed = pk == NULL || pv == NULL || PyDict_SetItem(partitions, pk, pv) < 0;
                    Py_XDECREF(pk);
                    Py_XDECREF(pv);
                    if (failed) {
                        Py_DECREF(partitions);
                        Py_DECREF(histogram);
                        goto error;
                    }
                }
            }
            int failed = 0;
            if (entry->zero_latency) {
                PyObject *zero = PyLong_FromLong(0), *n = PyLong_FromLongLong(entry->zero_latency);
                failed = zero == NULL || n == NULL || PyDict_SetItem(histogram, zero, n) < 0;
                Py_XDECREF(zero);
                Py_XDECREF(n);
            }
            for (Py_ssize_t i = 0; !failed && entry->histogram && i < n_floors; i++) {
                if (!entry->histogram[i]) continue;
                PyObject *n = PyLong_FromUnsignedLong(entry->histogram[i]);
                failed = n == NULL || PyDict_SetItem(histogram, floor_objects[i], n) < 0;
                Py_XDECREF(n);
            }
            if (failed) {
                Py_DECREF(partitions);
                Py_DECREF(histogram);
                goto error;
            }
            /* "N" hands both over, on failure too */
            PyObject *row = Py_BuildValue("(LLLNN)", entry->count, entry->bytes, entry->send_failed, partitions,
                                          histogram);
            if (row == NULL) goto error;
            failed = PyDict_SetItem(result, key, row) < 0;
            Py_DECREF(row);
            if (failed) goto error;
            entry->count = entry->bytes = entry->send_failed = entry->zero_latency = 0;
            if (entry->histogram) memset(entry->histogram, 0, sizeof(uint32_t) * (size_t)n_floors);
            if (entry->partitions) memset(entry->partitions, 0, sizeof(long long) * (size_t)entry->n_partitions);
        }
        if (references <= 1 && PyList_Append(forget, key) < 0) goto error;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(forget); i++) {
        if (PyDict_DelItem(self->entries, PyList_GET_ITEM(forget, i)) < 0) goto error;
    }
    if (PyList_GET_SIZE(forget)) {
        Py_CLEAR(self->last_entry);
        Py_CLEAR(self->last_topic);
    }
    Py_DECREF(forget);
    return result;
error:
    Py_XDECREF(result);
    Py_XDECREF(forget);
    return NULL;
}

static PyObject *Tally_len(Tally *self, PyObject *unused) { return PyLong_FromSsize_t(PyDict_Size(self->entries)); }

static PyMethodDef Tally_methods[] = {
    {"delivery", (PyCFunction)Tally_delivery, METH_VARARGS, "delivery(topic, audit_time_ms, user_callback)"},
    {"drain", (PyCFunction)Tally_drain, METH_NOARGS, "drain() -> deltas by (topic, window start)"},
    {"entries", (PyCFunction)Tally_len, METH_NOARGS, "entries() -> how many (topic, window) entries are kept"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TallyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "producers._fastaudit.Tally",
    .tp_basicsize = sizeof(Tally),
    .tp_dealloc = (destructor)Tally_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = Tally_methods,
    .tp_init = (initproc)Tally_init,
    .tp_new = PyType_GenericNew,
};

/* configure(floors): the latency bucket floors (audit.contract.tally.LATENCY_FLOORS) */
static PyObject *configure(PyObject *self, PyObject *sequence) {
    if (floors != NULL) Py_RETURN_NONE; /* once: live entries' histograms are sized by it */
    if (load_floors(sequence) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "configure(floors)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastaudit", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastaudit(void) {
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&DeliveredType) < 0 || PyType_Ready(&TallyType) < 0)
        return NULL;
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
