/* The counter's hot loop in C: buckets a consumed batch of confluent_kafka.Message objects by
 * (topic, partition, window start) without a Python call per message.
 *
 * It reads the fields of confluent-kafka's C Message struct directly (the layout below is a copy of
 * the one in confluent_kafka/src/confluent_kafka.h). audit/hops/fastcount.py checks at import that
 * the installed confluent-kafka agrees (the type's size, then messages with known values read both
 * ways) and falls back to the pure-Python loop when it does not.
 *
 * Each message that is not a plain counted one (an error, a timestamp that is not a usable
 * CreateTime, no topic, a key or value that is not bytes, an object of another type) is handed back
 * untouched in the `slow` list, in order, for the Python loop to handle exactly as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit_window.h"
#include "latency_floors.h"

typedef struct {
    PyObject_HEAD PyObject *topic;
    PyObject *value;
    PyObject *key;
    PyObject *headers;
    void *c_headers;
    PyObject *error;
    int32_t partition;
    int64_t offset;
    int32_t leader_epoch;
    int64_t timestamp;
    int tstype; /* rd_kafka_timestamp_type_t */
    int64_t latency;
    int16_t delivery_count;
} CkMessage;

/* Set once by configure(): the Message type and the first whole millisecond of each latency bucket. */
static PyTypeObject *message_type = NULL;
static PyObject *zero_object = NULL;

typedef struct {
    PyObject *topic; /* borrowed from the batch's first message of the group */
    int32_t partition;
    int64_t start;
    long long count, bytes, no_timestamp;
    int64_t offset, when;
    uint32_t zero_latency;
    uint32_t *histogram; /* n_floors counters */
    Py_ssize_t low, high; /* touched range of histogram */
} Group;

static int same_topic(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    Py_ssize_t length = PyUnicode_GET_LENGTH(a);
    if (length != PyUnicode_GET_LENGTH(b) || PyUnicode_KIND(a) != PyUnicode_KIND(b)) return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)length * PyUnicode_KIND(a)) == 0;
}

/* An open-addressing index over the batch's groups by (partition, window start); the topic is compared
 * on a hit. Sized to a power of two at least twice the groups. */
typedef struct {
    Py_ssize_t *slots; /* group index + 1, 0 = empty */
    size_t mask;
} Index;

static size_t slot_of(const Index *index, int32_t partition, int64_t start) {
    uint64_t h = (uint64_t)start * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uint32_t)partition * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h ^ (h >> 29)) & index->mask;
}

/* Rebuild the index with room for `n_groups` * 2 (all groups so far re-inserted). 0 on success. */
static int index_rebuild(Index *index, const Group *groups, Py_ssize_t n_groups, size_t size) {
    Py_ssize_t *slots = calloc(size, sizeof(Py_ssize_t));
    if (slots == NULL) return -1;
    free(index->slots);
    index->slots = slots;
    index->mask = size - 1;
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        size_t slot = slot_of(index, groups[g].partition, groups[g].start);
        while (index->slots[slot]) slot = (slot + 1) & index->mask;
        index->slots[slot] = g + 1;
    }
    return 0;
}

static void free_groups(Group *groups, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) free(groups[i].histogram);
    free(groups);
}

static PyObject *build_result(Group *groups, Py_ssize_t n_groups, PyObject *slow) {
    PyObject *result = PyDict_New();
    if (result == NULL) return NULL;
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        Group *group = &groups[g];
        PyObject *histogram = PyDict_New();
        PyObject *key = NULL, *value = NULL;
        if (histogram == NULL) goto error;
        if (group->zero_latency) {
            PyObject *count = PyLong_FromUnsignedLong(group->zero_latency);
            if (count == NULL || PyDict_SetItem(histogram, zero_object, count) < 0) {
                Py_XDECREF(count);
                Py_DECREF(histogram);
                goto error;
            }
            Py_DECREF(count);
        }
        for (Py_ssize_t i = group->low; i <= group->high; i++) {
            if (!group->histogram[i]) continue;
            PyObject *count = PyLong_FromUnsignedLong(group->histogram[i]);
            if (count == NULL || PyDict_SetItem(histogram, floor_objects[i], count) < 0) {
                Py_XDECREF(count);
                Py_DECREF(histogram);
                goto error;
            }
            Py_DECREF(count);
        }
        key = Py_BuildValue("(OiL)", group->topic, group->partition, (long long)group->start);
        value = Py_BuildValue("[LLLNLL]", group->count, group->bytes, group->no_timestamp, histogram,
                              (long long)group->offset, (long long)group->when);
        if (key == NULL || value == NULL || PyDict_SetItem(result, key, value) < 0) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            goto error;
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    return Py_BuildValue("(NO)", result, slow);
error:
    Py_DECREF(result);
    return NULL;
}

/* A batch's groups and their index. */
typedef struct {
    Group *groups;
    Py_ssize_t n_groups, capacity;
    Index index;
    Group *last; /* the group of the previous message: most batches hold runs of one partition and window */
} Groups;

static int groups_init(Groups *batch) {
    batch->n_groups = 0, batch->capacity = 16, batch->last = NULL;
    batch->index = (Index){NULL, 0};
    batch->groups = calloc((size_t)batch->capacity, sizeof(Group));
    if (batch->groups == NULL || index_rebuild(&batch->index, batch->groups, 0, 64) < 0) {
        free(batch->groups);
        return -1;
    }
    return 0;
}

static void groups_free(Groups *batch) {
    free(batch->index.slots);
    free_groups(batch->groups, batch->n_groups);
}

/* Whether the loop counts `item` itself: a Message without error, with a usable CreateTime, a str topic,
 * and bytes or nothing (NULL or None) as key and value. */
static int counted_here(PyObject *item, int create_time, int64_t max_time_ms) {
    if (Py_TYPE(item) != message_type) return 0;
    CkMessage *message = (CkMessage *)item;
    if (message->error != NULL && message->error != Py_None) return 0;
    if (message->tstype != create_time || !is_usable_time(message->timestamp, max_time_ms)) return 0;
    if (message->topic == NULL || !PyUnicode_CheckExact(message->topic)) return 0;
    return (message->key == NULL || message->key == Py_None || PyBytes_CheckExact(message->key)) &&
           (message->value == NULL || message->value == Py_None || PyBytes_CheckExact(message->value));
}

/* The group of (topic, partition, start), added when new; NULL when out of memory. */
static Group *group_of(Groups *batch, PyObject *topic, int32_t partition, int64_t start) {
    Group *group = batch->last;
    if (group != NULL && group->start == start && group->partition == partition && same_topic(group->topic, topic))
        return group;
    size_t slot = slot_of(&batch->index, partition, start);
    for (; batch->index.slots[slot]; slot = (slot + 1) & batch->index.mask) {
        group = &batch->groups[batch->index.slots[slot] - 1];
        if (group->start == start && group->partition == partition && same_topic(group->topic, topic))
            return batch->last = group;
    }
    if (batch->n_groups == batch->capacity) {
        Group *grown = realloc(batch->groups, sizeof(Group) * (size_t)batch->capacity * 2);
        if (grown == NULL) return NULL;
        memset(grown + batch->capacity, 0, sizeof(Group) * (size_t)batch->capacity);
        batch->groups = grown;
        batch->capacity *= 2;
    }
    group = &batch->groups[batch->n_groups];
    group->histogram = calloc((size_t)n_floors, sizeof(uint32_t));
    if (group->histogram == NULL) return NULL;
    batch->n_groups++;
    group->topic = topic, group->partition = partition, group->start = start;
    group->low = n_floors, group->high = -1;
    batch->index.slots[slot] = batch->n_groups;
    if ((size_t)batch->n_groups * 2 > batch->index.mask + 1 &&
        index_rebuild(&batch->index, batch->groups, batch->n_groups, (batch->index.mask + 1) * 2) < 0)
        return NULL;
    return batch->last = &batch->groups[batch->n_groups - 1];
}

static void count_message(Group *group, const CkMessage *message, int64_t now_ms) {
    int64_t when = message->timestamp;
    PyObject *key = message->key == Py_None ? NULL : message->key;
    PyObject *value = message->value == Py_None ? NULL : message->value;
    group->count++;
    group->bytes += (value ? PyBytes_GET_SIZE(value) : 0) + (key ? PyBytes_GET_SIZE(key) : 0);
    if (now_ms > when) {
        Py_ssize_t bucket = floor_index(now_ms - when);
        group->histogram[bucket]++;
        if (bucket < group->low) group->low = bucket;
        if (bucket > group->high) group->high = bucket;
    } else {
        group->zero_latency++;
    }
    group->offset = message->offset;
    group->when = when;
}

/* count(messages, now_ms, window_ms, create_time, max_time_ms) -> (groups, slow) */
static PyObject *count(PyObject *self, PyObject *args) {
    PyObject *messages;
    long long now_ms, window_ms, max_time_ms;
    int create_time;
    if (!PyArg_ParseTuple(args, "O!LLiL", &PyList_Type, &messages, &now_ms, &window_ms, &create_time, &max_time_ms))
        return NULL;
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastcount.configure() was not called");
        return NULL;
    }
    if (window_ms <= 0) {
        PyErr_SetString(PyExc_ValueError, "window_ms must be positive");
        return NULL;
    }
    Groups batch;
    PyObject *slow = PyList_New(0), *result = NULL;
    if (slow == NULL) return NULL;
    if (groups_init(&batch) < 0) {
        Py_DECREF(slow);
        return PyErr_NoMemory();
    }
    Py_ssize_t n = PyList_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(messages, i);
        if (!counted_here(item, create_time, max_time_ms)) {
            if (PyList_Append(slow, item) < 0) goto done;
            continue;
        }
        CkMessage *message = (CkMessage *)item;
        Group *group = group_of(&batch, message->topic, message->partition,
                                window_start_ms(message->timestamp, window_ms));
        if (group == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        count_message(group, message, now_ms);
    }
    result = build_result(batch.groups, batch.n_groups, slow);
done:
    groups_free(&batch);
    Py_DECREF(slow);
    return result;
}

/* read(message) -> (topic, partition, offset, (tstype, timestamp), key, value, error): the struct as
 * this module sees it, for the layout check at import. */
static PyObject *read_message(PyObject *self, PyObject *item) {
    if (message_type == NULL || Py_TYPE(item) != message_type) {
        PyErr_SetString(PyExc_TypeError, "not a configured confluent_kafka.Message");
        return NULL;
    }
    CkMessage *message = (CkMessage *)item;
#define OR_NONE(o) ((o) ? (o) : Py_None)
    return Py_BuildValue("(OiL(iL)OOO)", OR_NONE(message->topic), message->partition, (long long)message->offset,
                         message->tstype, (long long)message->timestamp, OR_NONE(message->key),
                         OR_NONE(message->value), OR_NONE(message->error));
#undef OR_NONE
}

/* configure(message_type, floors): the type whose layout was checked, and the latency bucket floors. */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *type, *sequence;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &type, &sequence)) return NULL;
    if (((PyTypeObject *)type)->tp_basicsize != (Py_ssize_t)sizeof(CkMessage)) {
        PyErr_Format(PyExc_TypeError, "Message size %zd, expected %zd", ((PyTypeObject *)type)->tp_basicsize,
                     (Py_ssize_t)sizeof(CkMessage));
        return NULL;
    }
    if (load_floors(sequence) < 0) return NULL;
    Py_XINCREF(type);
    Py_XSETREF(message_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"count", count, METH_VARARGS, "count(messages, now_ms, window_ms, create_time, max_time_ms) -> (groups, slow)"},
    {"read", read_message, METH_O, "read(message) -> the struct's fields, for the layout check"},
    {"configure", configure, METH_VARARGS, "configure(message_type, floors)"},
    {"window_start", window_start, METH_VARARGS, "window_start(time_ms, window_ms) -> the window's start"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcount", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastcount(void) {
    zero_object = PyLong_FromLong(0);
    if (zero_object == NULL) return NULL;
    return PyModule_Create(&module);
}
