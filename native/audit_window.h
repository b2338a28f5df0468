/* The audit contract's window alignment and usable audit time (audit/contract/windows.py window_start_ms,
 * audit/contract/audit_time.py is_usable) for the C loops: the counter's (_fastcount.c) and the audited
 * producer's (_fastaudit_produce.c). tests/contract_cases.py holds both, through their modules, to the contract. */
#ifndef KAUDIT_AUDIT_WINDOW_H
#define KAUDIT_AUDIT_WINDOW_H

#include <stdint.h>

/* Start of the `window_ms`-long window holding `time_ms`: floor division, as Python's %, so a time before
 * the epoch is in a window that starts before it (C's % truncates toward zero). For any time at least one
 * window above INT64_MIN. */
static inline int64_t window_start_ms(int64_t time_ms, int64_t window_ms) {
    int64_t into = time_ms % window_ms;
    if (into < 0) into += window_ms;
    return time_ms - into;
}

/* After the epoch and not past `max_time_ms` (the contract's MAX_AUDIT_TIME_MS, handed in by Python). */
static inline int is_usable_time(int64_t time_ms, int64_t max_time_ms) { return time_ms > 0 && time_ms <= max_time_ms; }

#ifdef Py_PYTHON_H
/* window_start(time_ms, window_ms) -> the window rule as the including module compiled it, for the contract's
 * table of cases (each module exports it, so each build is held to the contract). */
__attribute__((unused)) static PyObject *window_start(PyObject *self, PyObject *args) {
    long long time_ms, window_ms;
    if (!PyArg_ParseTuple(args, "LL", &time_ms, &window_ms)) return NULL;
    if (window_ms <= 0) {
        PyErr_SetString(PyExc_ValueError, "window_ms must be positive");
        return NULL;
    }
    return PyLong_FromLongLong(window_start_ms(time_ms, window_ms));
}
#endif

#endif
