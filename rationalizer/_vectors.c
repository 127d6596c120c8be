/* rationalizer._vectors: a task record's position vector read by its sources alone
 * (rationalizer/_task_vectors.py, the layout "by sources"; PROTOCOL.md, "Tasks (version 3)").
 *
 * Why C: a streams member heartbeats every task it holds with every source's position, so
 * the replay reads a vector per record. In Python that read needs a layout per key that
 * pins the offsets' upper varint bytes (one struct call, table look-ups), and every time an
 * offset's upper byte moves the strict decoder runs again. Here the layout pins only what
 * the strict decoder accepted and never changes between a sender's records -- the count
 * and each source topic, as bytes -- and the offsets are read as the strict decoder reads
 * them: minimal varints of at most 2^63 (last_offset + 1), and the vector's scalar
 * (messages.task_last_offset) at most 2^63 - 1. Anything else returns None and the strict
 * decoder decides, so verdicts are the strict decoder's by construction;
 * tests/rationalizer/test_task_lane.py checks it against the decoder and the Python layouts.
 *
 * No state: the module keeps nothing between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NUMBER_LIMIT ((uint64_t)1 << 63) /* last_offset + 1 <= 2^63; their sum too */
#define MAX_SOURCES 64                     /* messages.MAX_TASK_SOURCES */

/* read(layout, value, at) -> (positions, scalar, end) | None
 *
 * layout: (min_size, read, chunk_0 .. chunk_n-1, topic_0 .. topic_n-1): chunk_0 is the
 * count and the first source as str (length varint and bytes), chunk_i the i-th source as
 * str, topic_i its name. */
static PyObject *read_vector(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read(layout, value, at) takes 3 arguments");
        return NULL;
    }
    PyObject *lay = args[0], *value = args[1];
    if (!PyTuple_CheckExact(lay) || !PyBytes_CheckExact(value)) Py_RETURN_NONE;
    Py_ssize_t at = PyLong_AsSsize_t(args[2]);
    if (at == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t size = PyTuple_GET_SIZE(lay);
    Py_ssize_t n = (size - 2) / 2;
    if (n < 1 || size != 2 * n + 2) {
        PyErr_SetString(PyExc_ValueError, "not a layout by sources");
        return NULL;
    }
    Py_ssize_t len = PyBytes_GET_SIZE(value);
    if (at < 0 || at > len) Py_RETURN_NONE;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(value) + at;
    const unsigned char *end = (const unsigned char *)PyBytes_AS_STRING(value) + len;
    uint64_t numbers[MAX_SOURCES];
    if (n > MAX_SOURCES) Py_RETURN_NONE;
    uint64_t sum = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *chunk = PyTuple_GET_ITEM(lay, 2 + i);
        if (!PyBytes_CheckExact(chunk)) {
            PyErr_SetString(PyExc_ValueError, "not a layout by sources");
            return NULL;
        }
        Py_ssize_t clen = PyBytes_GET_SIZE(chunk);
        if (end - p < clen || memcmp(p, PyBytes_AS_STRING(chunk), (size_t)clen) != 0)
            Py_RETURN_NONE;
        p += clen;
        /* a minimal varint of at most 2^63 (varint.read_uvarint with that limit) */
        uint64_t v = 0;
        int shift = 0;
        for (;;) {
            if (p >= end) Py_RETURN_NONE;
            unsigned b = *p++;
            if (shift == 63 && b > 1) Py_RETURN_NONE; /* past 2^63, or an eleventh byte */
            v |= (uint64_t)(b & 0x7F) << shift;
            if (v > NUMBER_LIMIT) Py_RETURN_NONE;
            if (b < 0x80) {
                if (b == 0 && shift) Py_RETURN_NONE; /* overlong */
                break;
            }
            shift += 7;
        }
        if (v > NUMBER_LIMIT - sum) Py_RETURN_NONE; /* the scalar would pass 2^63 - 1 */
        sum += v;
        numbers[i] = v;
    }
    PyObject *positions = PyTuple_New(n);
    if (positions == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *topic = PyTuple_GET_ITEM(lay, 2 + n + i);
        PyObject *offset = PyLong_FromLongLong(numbers[i] ? (long long)(numbers[i] - 1) : -1);
        PyObject *pair = offset ? PyTuple_New(2) : NULL;
        if (pair == NULL) {
            Py_XDECREF(offset);
            Py_DECREF(positions);
            return NULL;
        }
        Py_INCREF(topic);
        PyTuple_SET_ITEM(pair, 0, topic);
        PyTuple_SET_ITEM(pair, 1, offset);
        PyTuple_SET_ITEM(positions, i, pair);
    }
    PyObject *out = PyTuple_New(3);
    PyObject *scalar = PyLong_FromLongLong(sum ? (long long)(sum - 1) : -1);
    PyObject *stop = PyLong_FromSsize_t((Py_ssize_t)(p - (const unsigned char *)PyBytes_AS_STRING(value)));
    if (out == NULL || scalar == NULL || stop == NULL) {
        Py_XDECREF(out);
        Py_XDECREF(scalar);
        Py_XDECREF(stop);
        Py_DECREF(positions);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, positions);
    PyTuple_SET_ITEM(out, 1, scalar);
    PyTuple_SET_ITEM(out, 2, stop);
    return out;
}

/* varints(value, at, count) -> (numbers, end) | None
 *
 * count minimal varints of at most 2^63 each at value[at:] (a version 7 MemberHeartbeat's
 * entries: partition, tenure, last_offset + 1; varint.read_varints reads the same in
 * Python), as a list of ints, and the position after them; None for anything else
 * (truncated, overlong, larger): the Python reader then says what is wrong. */
static PyObject *read_varints(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "varints(value, at, count) takes 3 arguments");
        return NULL;
    }
    PyObject *value = args[0];
    if (!PyBytes_CheckExact(value)) Py_RETURN_NONE;
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    if (at == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t len = PyBytes_GET_SIZE(value);
    if (at < 0 || at > len || count < 0 || count > len - at) Py_RETURN_NONE;
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(value);
    const unsigned char *p = base + at, *end = base + len;
    PyObject *out = PyList_New(count);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t v = 0;
        int shift = 0;
        for (;;) {
            if (p >= end) goto none;
            unsigned b = *p++;
            if (shift == 63 && b > 1) goto none; /* past 2^63, or a tenth byte */
            v |= (uint64_t)(b & 0x7F) << shift;
            if (v > NUMBER_LIMIT) goto none;
            if (b < 0x80) {
                if (b == 0 && shift) goto none; /* overlong */
                break;
            }
            shift += 7;
        }
        PyObject *n = PyLong_FromUnsignedLongLong(v);
        if (n == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, n);
    }
    PyObject *stop = PyLong_FromSsize_t((Py_ssize_t)(p - base));
    if (stop == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(out);
        Py_DECREF(stop);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, out);
    PyTuple_SET_ITEM(pair, 1, stop);
    return pair;
none:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"varints", (PyCFunction)(void (*)(void))read_varints, METH_FASTCALL,
     "varints(value, at, count) -> (numbers, end) | None\n\n"
     "count minimal varints of at most 2^63 at value[at:]; None for anything else."},
    {"read", (PyCFunction)(void (*)(void))read_vector, METH_FASTCALL,
     "read(layout, value, at) -> (positions, scalar, end) | None\n\n"
     "The position vector at value[at:] if it has the layout's sources, as the strict\n"
     "decoder would read it; else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rationalizer._vectors",
    "A task record's position vector read by its sources (see rationalizer/_task_vectors.py).", 0,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__vectors(void) { return PyModule_Create(&module); }
