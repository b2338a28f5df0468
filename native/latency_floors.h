/* The latency histogram's bucket floors (audit.contract.tally.LATENCY_FLOORS), shared by the counter's
 * batch loop (_fastcount.c) and the audited producer's delivery counting (_fastaudit.c): each file
 * that includes this one keeps its own copy of the floors, loaded once by its module's configure(), so
 * only one file of a module may include it. */
#ifndef KAUDIT_LATENCY_FLOORS_H
#define KAUDIT_LATENCY_FLOORS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static int64_t *floors = NULL;
static PyObject **floor_objects = NULL; /* the same floors as Python ints, for the histogram keys */
static Py_ssize_t n_floors = 0;
/* octave_start[e]: the first index i with floors[i] >= 2**e, so a latency in [2**e, 2**(e+1)) has its
 * floor at an index in [octave_start[e] - 1, octave_start[e + 1] - 1]: a search over ~35 buckets. */
static Py_ssize_t octave_start[65];

static Py_ssize_t floor_index(int64_t latency) {
    /* largest i with floors[i] <= latency (latency >= floors[0] == 1) */
    int octave = 63 - __builtin_clzll((unsigned long long)latency);
    Py_ssize_t low = octave_start[octave] > 0 ? octave_start[octave] - 1 : 0;
    Py_ssize_t high = octave_start[octave + 1] - 1;
    /* branchless binary search: floors[low] <= latency < floors[high + 1] */
    const int64_t *base = floors + low;
    Py_ssize_t length = high - low + 1;
    while (length > 1) {
        Py_ssize_t half = length / 2;
        base = base[half] <= latency ? base + half : base;
        length -= half;
    }
    return base - floors;
}

/* Replace the floors with `sequence` (ints rising from 1); 0, or -1 with an exception set. */
static int load_floors(PyObject *sequence) {
    PyObject *fast = PySequence_Fast(sequence, "floors must be a sequence");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "floors must not be empty");
        return -1;
    }
    int64_t *new_floors = malloc(sizeof(int64_t) * (size_t)n);
    PyObject **new_objects = calloc((size_t)n, sizeof(PyObject *));
    if (new_floors == NULL || new_objects == NULL) {
        free(new_floors);
        free(new_objects);
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        new_floors[i] = PyLong_AsLongLong(item);
        if ((new_floors[i] == -1 && PyErr_Occurred()) || (i == 0 && new_floors[0] != 1) ||
            (i > 0 && new_floors[i] <= new_floors[i - 1])) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "floors must rise from 1");
            for (Py_ssize_t j = 0; j < i; j++) Py_DECREF(new_objects[j]);
            free(new_floors);
            free(new_objects);
            Py_DECREF(fast);
            return -1;
        }
        Py_INCREF(item);
        new_objects[i] = item;
    }
    Py_DECREF(fast);
    for (Py_ssize_t i = 0; i < n_floors; i++) Py_DECREF(floor_objects[i]);
    free(floors);
    free(floor_objects);
    floors = new_floors;
    floor_objects = new_objects;
    n_floors = n;
    for (int e = 0; e <= 64; e++) {
        Py_ssize_t i = 0;
        while (i < n && (e >= 63 || floors[i] < ((int64_t)1 << e))) i++;
        octave_start[e] = i;
    }
    return 0;
}

#endif
