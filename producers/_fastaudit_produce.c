/* The audited producer's bind() and produce() (see _fastaudit.h): confluent-kafka's produce arguments,
 * sent by librdkafka's rd_kafka_produceva on the bound Producer's rd_kafka_t, with the audit time. */
#include "_fastaudit.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audit_window.h"

/* bind(producer, default_callback, emit, produce_error, full_queue_retries, full_queue_wait_s) */
PyObject *Tally_bind(Tally *self, PyObject *args) {
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

/* Hand the message to librdkafka once: 0, or librdkafka's error. */
static rd_kafka_resp_err_t send_once(rd_kafka_t *rk, rd_kafka_vu_t *vus, size_t n_vus, MessageState *state) {
    being_sent = state;
    rd_kafka_error_t *error = rdk.produceva(rk, vus, n_vus);
    being_sent = NULL;
    if (error == NULL) return 0;
    rd_kafka_resp_err_t err = rdk.error_code(error);
    rdk.error_destroy(error);
    return err;
}

#define FIXED_VECTORS 8 /* topic, partition, value, key, flags, timestamp, the audit-time header, the opaque */

/* One message as librdkafka's vectors, and what they point into until librdkafka has copied it. */
typedef struct {
    Bytes value, key;
    PyObject *pairs; /* the user's headers as (name, value) pairs */
    Bytes stack_values[STACK_HEADERS];
    Bytes *header_values;
    Py_ssize_t n_header_values; /* those held, to release */
    rd_kafka_vu_t stack_vus[FIXED_VECTORS + STACK_HEADERS];
    rd_kafka_vu_t *vus;
    size_t n;
    char stamp[24]; /* the audit time in ASCII digits */
} Outgoing;

static void outgoing_init(Outgoing *out) {
    out->value.view.obj = out->key.view.obj = NULL;
    out->pairs = NULL;
    out->header_values = out->stack_values;
    out->n_header_values = 0;
    out->vus = out->stack_vus;
    out->n = 0;
}

static void outgoing_release(Outgoing *out) {
    release(&out->value);
    release(&out->key);
    for (Py_ssize_t h = 0; h < out->n_header_values; h++) release(&out->header_values[h]);
    if (out->header_values != out->stack_values) PyMem_Free(out->header_values);
    if (out->vus != out->stack_vus) PyMem_Free(out->vus);
    Py_XDECREF(out->pairs);
}

/* The user's headers, then the audit-time one when `stamp`. 0, or -1 with an exception set. */
static int outgoing_headers(Outgoing *out, int stamp, int64_t audit_time_ms) {
    Py_ssize_t n_headers = PySequence_Fast_GET_SIZE(out->pairs); /* header_pairs gives a list or a tuple */
    rd_kafka_vu_t *vus = out->vus;
    for (Py_ssize_t h = 0; h < n_headers; h++, out->n_header_values++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(out->pairs, h);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            PyErr_SetString(PyExc_TypeError, "each header must be a (str, bytes|str|None) tuple");
            return -1;
        }
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0));
        Bytes *value = &out->header_values[h];
        if (name == NULL || bytes_of(PyTuple_GET_ITEM(pair, 1), value, "a header value") < 0) return -1;
        vus[out->n].vtype = RD_KAFKA_VTYPE_HEADER, vus[out->n].u.header.name = name;
        vus[out->n].u.header.val = value->data, vus[out->n++].u.header.size = value->data ? value->size : 0;
    }
    if (stamp) {
        vus[out->n].vtype = RD_KAFKA_VTYPE_HEADER, vus[out->n].u.header.name = audit_time_header;
        vus[out->n].u.header.val = out->stamp, vus[out->n++].u.header.size = format_decimal(out->stamp, audit_time_ms);
    }
    return 0;
}

/* The message's vectors, all but the opaque. 0, or -1 with an exception set. */
static int outgoing_fill(Outgoing *out, PyObject **slots, const char *topic, long long partition, int64_t timestamp,
                         int64_t audit_time_ms, int stamp) {
    if (bytes_of(slots[A_VALUE], &out->value, "value") < 0 || bytes_of(slots[A_KEY], &out->key, "key") < 0) return -1;
    out->pairs = header_pairs(slots[A_HEADERS]);
    if (out->pairs == NULL) return -1;
    Py_ssize_t n_headers = PySequence_Fast_GET_SIZE(out->pairs);
    if (n_headers > STACK_HEADERS) {
        out->header_values = PyMem_Malloc(sizeof(Bytes) * (size_t)n_headers);
        out->vus = PyMem_Malloc(sizeof(rd_kafka_vu_t) * (size_t)(FIXED_VECTORS + n_headers));
        if (out->header_values == NULL || out->vus == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    rd_kafka_vu_t *vus = out->vus;
    vus[out->n].vtype = RD_KAFKA_VTYPE_TOPIC, vus[out->n++].u.cstr = topic;
    vus[out->n].vtype = RD_KAFKA_VTYPE_PARTITION, vus[out->n++].u.i32 = (int32_t)partition;
    vus[out->n].vtype = RD_KAFKA_VTYPE_VALUE, vus[out->n].u.mem.ptr = out->value.data;
    vus[out->n++].u.mem.size = (size_t)out->value.size;
    vus[out->n].vtype = RD_KAFKA_VTYPE_KEY, vus[out->n].u.mem.ptr = out->key.data;
    vus[out->n++].u.mem.size = (size_t)out->key.size;
    vus[out->n].vtype = RD_KAFKA_VTYPE_MSGFLAGS, vus[out->n++].u.i = RD_KAFKA_MSG_F_COPY;
    vus[out->n].vtype = RD_KAFKA_VTYPE_TIMESTAMP, vus[out->n++].u.i64 = timestamp;
    return outgoing_headers(out, stamp, audit_time_ms);
}

/* Send the message, serving delivery reports while librdkafka's queue is full as confluent-kafka's produce()
 * does. The entry counts it as sent throughout, so no drain() on another thread forgets the entry meanwhile.
 * 0, or -1 with the exception confluent-kafka would raise. */
static int send_with_retries(Tally *self, Outgoing *out, MessageState *state) {
    rd_kafka_resp_err_t err = 0;
    state->entry->sent++;
    for (int attempt = 0;; attempt++) {
        rd_kafka_t *rk = ((HandleHead *)self->producer)->rk;
        if (rk == NULL) {
            state->entry->sent--;
            PyErr_SetString(PyExc_RuntimeError, "Producer has been closed");
            return -1;
        }
        err = send_once(rk, out->vus, out->n, state);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || attempt >= self->full_queue_retries) break;
        PyObject *served = PyObject_CallMethod(self->producer, "poll", "d", self->full_queue_wait_s);
        if (served == NULL) {
            state->entry->sent--;
            return -1;
        }
        Py_DECREF(served);
    }
    if (!err) return 0;
    state->entry->sent--; /* not enqueued */
    PyObject *exception = PyObject_CallFunction(self->produce_error, "i", err);
    if (exception != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exception), exception);
        Py_DECREF(exception);
    }
    return -1;
}

/* produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0, headers=None,
 *         callback=None): confluent-kafka's produce, stamping the audit time, counted when acknowledged. */
PyObject *Tally_produce(Tally *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
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
    const char *topic = PyUnicode_AsUTF8(slots[A_TOPIC]);
    if (topic == NULL) return NULL;
    /* audit/contract/audit_time.py send_audit_time */
    int64_t audit_time_ms = is_usable_time(timestamp, max_audit_time_ms) ? timestamp : now_ms();
    Entry *entry = lookup_entry(self, slots[A_TOPIC], window_start_ms(audit_time_ms, self->window_ms));
    if (entry == NULL) return NULL;
    /* The header wherever the message's timestamp may not carry the audit time: a topic not known to keep
     * CreateTime, or a timestamp that is not the audit time. */
    int stamp = __atomic_load_n(&entry->timestamp_type, __ATOMIC_RELAXED) != RD_KAFKA_TIMESTAMP_CREATE_TIME ||
                (timestamp && timestamp != audit_time_ms);
    PyObject *callback = slots[A_ON_DELIVERY] != NULL && slots[A_ON_DELIVERY] != Py_None ? slots[A_ON_DELIVERY]
                         : slots[A_CALLBACK] != NULL && slots[A_CALLBACK] != Py_None ? slots[A_CALLBACK]
                                                                                     : self->default_callback;
    PyObject *result = NULL;
    MessageState *state = NULL;
    Outgoing out;
    outgoing_init(&out);
    if (outgoing_fill(&out, slots, topic, partition, timestamp ? timestamp : audit_time_ms, audit_time_ms, stamp) < 0)
        goto done;
    state = calloc(1, sizeof(MessageState));
    if (state == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    state->magic = STATE_MAGIC, state->entry = entry, state->audit_time_ms = audit_time_ms;
    out.vus[out.n].vtype = RD_KAFKA_VTYPE_OPAQUE, out.vus[out.n++].u.ptr = state;
    if (send_with_retries(self, &out, state) < 0) goto done;
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
    outgoing_release(&out);
    return result;
}
