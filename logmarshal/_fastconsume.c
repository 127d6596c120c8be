/* The network Consumer's per-record work that Python cannot make cheap (docs/performance.md,
 * "Consumer"). Optional, like logmarshal/_fastproduce.c: without a compiler logmarshal
 * uses the Python code beside each function (same results, slower), and the tests compare
 * both.
 *
 * - messages(Message, topic, partition, raw): librdkafka's messages (confluent-kafka's
 *   Message objects, read through their methods) as logmarshal Messages, with the bytes of
 *   their keys and values (what a fetch's max_bytes counts), each Message untracked
 *   by the cyclic garbage collector as soon as it is built (below: why), so that a
 *   collection running meanwhile never sees one. A Message is a NamedTuple, a tuple subclass, and CPython untracks
 *   only exact tuples whose items cannot refer back (gcmodule.c, untrack_tuples): every
 *   Message stayed tracked while it waited in a read-ahead, a core's buffer and a polled
 *   batch, tens of thousands at a time, so they were promoted to the oldest generation and
 *   triggered full collections, each traversing all of them again (a third of a network
 *   Consumer's CPU, 2026-11-29). A Message whose items are str, int, bytes, None and tuples
 *   of those cannot be part of a reference cycle; anything else is left tracked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* 1 if ``o`` can refer to no GC-tracked object: not a GC type, or a tuple (exact or a
 * subclass without a dict, as a NamedTuple) whose items are such (untracked on the way) */
static int untrackable(PyObject *o, int depth) {
    if (!PyObject_IS_GC(o)) return 1;
    if (!PyTuple_Check(o) || depth > 2) return 0;
    if (!PyTuple_CheckExact(o) && Py_TYPE(o)->tp_dictoffset != 0) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(o);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!untrackable(PyTuple_GET_ITEM(o, i), depth + 1)) return 0;
    }
    if (PyObject_GC_IsTracked(o)) PyObject_GC_UnTrack(o);
    return 1;
}

static PyObject *s_offset, *s_timestamp, *s_key, *s_value, *s_headers;

static PyObject *call0(PyObject *obj, PyObject *name) {
    PyObject *args[1] = {obj};
    return PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *messages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "messages(Message, topic, partition, raw: list)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    PyObject *topic = args[1], *partition = args[2], *raw = args[3];
    Py_ssize_t n = PyList_GET_SIZE(raw), size = 0;
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(raw, i);
        PyObject *record = type->tp_alloc(type, 7);
        if (record == NULL) goto fail;
        PyList_SET_ITEM(out, i, record); /* owned by out from here on */
        /* out of the collector's sight before anything else is allocated (a collection
         * then would move it to an older generation, and count it there) */
        PyObject_GC_UnTrack(record);
        Py_INCREF(topic);
        PyTuple_SET_ITEM(record, 0, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(record, 1, partition);
        PyObject *item = call0(m, s_offset);
        if (item == NULL) goto fail;
        PyTuple_SET_ITEM(record, 2, item);
        PyObject *ts = call0(m, s_timestamp);
        if (ts == NULL) goto fail;
        if (!PyTuple_Check(ts) || PyTuple_GET_SIZE(ts) != 2) {
            Py_DECREF(ts);
            PyErr_SetString(PyExc_TypeError, "timestamp() is not a (type, timestamp) pair");
            goto fail;
        }
        item = PyTuple_GET_ITEM(ts, 1);
        Py_INCREF(item);
        Py_DECREF(ts);
        PyTuple_SET_ITEM(record, 3, item);
        if ((item = call0(m, s_key)) == NULL) goto fail;
        PyTuple_SET_ITEM(record, 4, item);
        if (PyBytes_Check(item)) size += PyBytes_GET_SIZE(item);
        if ((item = call0(m, s_value)) == NULL) goto fail;
        PyTuple_SET_ITEM(record, 5, item);
        if (PyBytes_Check(item)) size += PyBytes_GET_SIZE(item);
        PyObject *headers = call0(m, s_headers);
        if (headers == NULL) goto fail;
        if (headers == Py_None || (PyList_Check(headers) && PyList_GET_SIZE(headers) == 0)) {
            Py_DECREF(headers);
            item = PyTuple_New(0);
        } else {
            item = PySequence_Tuple(headers);
            Py_DECREF(headers);
        }
        if (item == NULL) goto fail;
        PyTuple_SET_ITEM(record, 6, item);
        if (!untrackable(record, 0)) PyObject_GC_Track(record); /* odd headers: as Python */
    }
    PyObject *pair = Py_BuildValue("(Nn)", out, size);
    return pair;
fail:
    Py_DECREF(out); /* a record not filled in has NULL items: tuple dealloc skips them */
    return NULL;
}

static PyMethodDef methods[] = {
    {"messages", (PyCFunction)(void (*)(void))messages, METH_FASTCALL,
     "messages(Message, topic, partition, raw) -> (Messages, bytes): confluent-kafka's "
     "messages as Messages (offset, timestamp()[1], key, value, headers as a tuple), "
     "untracked by the cyclic GC, and the bytes of their keys and values."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "logmarshal._fastconsume",
    "The network Consumer's per-record helpers in C (see the source's header).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastconsume(void) {
    if ((s_offset = PyUnicode_InternFromString("offset")) == NULL ||
        (s_timestamp = PyUnicode_InternFromString("timestamp")) == NULL ||
        (s_key = PyUnicode_InternFromString("key")) == NULL ||
        (s_value = PyUnicode_InternFromString("value")) == NULL ||
        (s_headers = PyUnicode_InternFromString("headers")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
