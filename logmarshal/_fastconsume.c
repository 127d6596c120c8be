/* The Consumer's per-record work (network and embedded) that Python cannot make cheap
 * (docs/performance.md, "Consumer"). Optional, like logmarshal/_fastproduce.c: without a
 * compiler logmarshal uses the Python code beside each function (same results, slower),
 * and the tests compare both.
 *
 * - messages(Message, topic, partition, raw): librdkafka's messages (confluent-kafka's
 *   Message objects, read through their methods) as logmarshal Messages, with the bytes of
 *   their keys and values (what a fetch's max_bytes counts), each Message untracked
 *   by the cyclic garbage collector as soon as it is built (below: why), so that a
 *   collection running meanwhile never sees one. A Message is a NamedTuple, a tuple
 *   subclass, and CPython untracks only exact tuples whose items cannot refer back
 *   (gcmodule.c, untrack_tuples): every
 *   Message stayed tracked while it waited in a read-ahead, a core's buffer and a polled
 *   batch, tens of thousands at a time, so they were promoted to the oldest generation and
 *   triggered full collections, each traversing all of them again (a third of a network
 *   Consumer's CPU, 2026-11-29). A Message whose items are str, int, bytes, None and tuples
 *   of those cannot be part of a reference cycle; anything else is left tracked.
 * - batch(Message, raw): the same for a consume() batch, with the checks the reader made
 *   in Python before (no error, one topic and partition), reading confluent-kafka's
 *   Message objects' fields directly instead of calling five methods a record (and three
 *   more for the checks): about half of the per-record work of a network Consumer's fetch
 *   thread (docs/performance.md, "Consumer"). confluent-kafka's Message struct is not a
 *   public API, so this is used only once layout_matches() has checked, on Messages built
 *   with known fields by confluent-kafka's own constructor, that the struct below is its
 *   layout (size, and every field read); otherwise batch() returns None and the reader
 *   takes the method-calling path. A record with headers is read through headers().
 * - offsets_of_one(messages): Consumer.commit(*batch)'s check that a batch is of one
 *   partition, and its offsets, in one pass.
 * - from_records(Message, topic, partition, records, start): the embedded cluster's fetch,
 *   storage's decoded Records from offset ``start`` on as Messages, untracked, with the
 *   collector paused and ``records`` emptied as batch() does (below: why).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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


/* confluent-kafka's Message (src/confluent_kafka/src/confluent_kafka.h, 2.x), checked by
 * layout_matches() before batch() reads it */
typedef struct {
    PyObject_HEAD
    PyObject *topic;
    PyObject *value;
    PyObject *key;
    PyObject *headers;
    void *c_headers; /* rd_kafka_headers_t *: headers not converted to Python yet */
    PyObject *error;
    int32_t partition;
    int64_t offset;
    int32_t leader_epoch;
    int64_t timestamp;
    int tstype;
    int64_t latency;
    int16_t delivery_count;
} CkMessage;

static PyTypeObject *ck_type = NULL; /* set by layout_matches() once it held */

/* layout_matches(samples): each sample is (message, topic, partition, offset, key, value,
 * headers, timestamp), the message built by confluent_kafka.Message(...) with those; True
 * (and batch() enabled for that type) if the struct above reads every one back */
static PyObject *layout_matches(PyObject *self, PyObject *samples) {
    if (!PyList_Check(samples) || PyList_GET_SIZE(samples) == 0) {
        PyErr_SetString(PyExc_TypeError, "layout_matches(samples: non-empty list)");
        return NULL;
    }
    PyTypeObject *type = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(samples); i++) {
        PyObject *t = PyList_GET_ITEM(samples, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 8) {
            PyErr_SetString(PyExc_TypeError, "a sample is (message, topic, partition, offset, "
                                             "key, value, headers, timestamp)");
            return NULL;
        }
        PyObject *m = PyTuple_GET_ITEM(t, 0);
        if (type == NULL) type = Py_TYPE(m);
        if (Py_TYPE(m) != type || type->tp_basicsize != (Py_ssize_t)sizeof(CkMessage) ||
            type->tp_itemsize != 0)
            Py_RETURN_FALSE;
        CkMessage *c = (CkMessage *)m;
        long long partition = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 2));
        long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 3));
        long long timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 7));
        if (PyErr_Occurred()) return NULL;
        PyObject *key = PyTuple_GET_ITEM(t, 4), *value = PyTuple_GET_ITEM(t, 5);
        PyObject *headers = PyTuple_GET_ITEM(t, 6);
        if (c->topic != PyTuple_GET_ITEM(t, 1) || c->key != (key == Py_None ? NULL : key) ||
            c->value != (value == Py_None ? NULL : value) ||
            c->headers != (headers == Py_None ? NULL : headers) || c->c_headers != NULL ||
            !(c->error == NULL || c->error == Py_None) || c->partition != partition ||
            c->offset != offset || c->timestamp != timestamp)
            Py_RETURN_FALSE;
    }
    ck_type = type;
    Py_RETURN_TRUE;
}

/* batch(Message, raw): None unless layout_matches() held, every message is of that type
 * with no error and all are of one topic and partition; else (topic, partition, Messages,
 * bytes of keys and values), the Messages untracked as messages() leaves them, and ``raw``
 * emptied.
 *
 * Why emptied, and why no collection runs meanwhile: confluent-kafka's Messages are tracked
 * by the cyclic GC, and each allocation of a tracked object counts towards a collection
 * (700 by default). A raw consume() loop frees each batch before the next, so its count
 * never gets there. Here a batch of n of theirs and the n Messages built from them were
 * alive at once: a collection ran in the middle of nearly every batch, found theirs still
 * alive, and promoted them, until enough had been promoted to start a full collection of
 * the whole heap (about 10 per 3 M records, 20-30 ms each over the ~50,000 objects a
 * network Consumer's process holds: a tenth of its CPU, 2026-12-04). So the collector is
 * paused while the batch is built (the GIL is held throughout: no other thread's code runs
 * meanwhile, and its previous state is restored before returning; librdkafka's headers come
 * as a list, so converting them runs no Python code either), and theirs are freed
 * before it can run again: the collection the count calls for then finds neither theirs
 * nor ours (untracked). On any failure ``raw`` is left as it was. */
static PyObject *batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "batch(Message, raw: list)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    PyObject *raw = args[1];
    Py_ssize_t n = PyList_GET_SIZE(raw), size = 0;
    if (ck_type == NULL || n == 0) Py_RETURN_NONE;
    CkMessage *first = (CkMessage *)PyList_GET_ITEM(raw, 0);
    if (Py_TYPE(first) != ck_type || first->topic == NULL || !PyUnicode_CheckExact(first->topic))
        Py_RETURN_NONE;
    PyObject *topic = first->topic;
    int32_t part = first->partition;
    for (Py_ssize_t i = 0; i < n; i++) {
        CkMessage *c = (CkMessage *)PyList_GET_ITEM(raw, i);
        if (Py_TYPE(c) != ck_type || !(c->error == NULL || c->error == Py_None) ||
            c->partition != part || c->topic == NULL)
            Py_RETURN_NONE;
        if (c->topic != topic) {
            int same = PyUnicode_Check(c->topic) ? PyUnicode_Compare(c->topic, topic) : 1;
            if (same == -1 && PyErr_Occurred()) return NULL;
            if (same != 0) Py_RETURN_NONE;
        }
    }
    /* paused before the first allocation: a collection starting even at PyList_New would
     * find every one of theirs alive (its list may come from the free list, or not) */
    int collecting = PyGC_Disable();
    PyObject *partition = PyLong_FromLong(part);
    if (partition == NULL) {
        if (collecting) PyGC_Enable();
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(partition);
        if (collecting) PyGC_Enable();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        CkMessage *c = (CkMessage *)PyList_GET_ITEM(raw, i);
        PyObject *record = type->tp_alloc(type, 7);
        if (record == NULL) goto fail;
        PyList_SET_ITEM(out, i, record);
        PyObject_GC_UnTrack(record); /* as in messages() */
        Py_INCREF(topic);
        PyTuple_SET_ITEM(record, 0, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(record, 1, partition);
        PyObject *item = PyLong_FromLongLong(c->offset);
        if (item == NULL) goto fail;
        PyTuple_SET_ITEM(record, 2, item);
        if ((item = PyLong_FromLongLong(c->timestamp)) == NULL) goto fail;
        PyTuple_SET_ITEM(record, 3, item);
        item = c->key != NULL ? c->key : Py_None;
        Py_INCREF(item);
        PyTuple_SET_ITEM(record, 4, item);
        if (PyBytes_Check(item)) size += PyBytes_GET_SIZE(item);
        item = c->value != NULL ? c->value : Py_None;
        Py_INCREF(item);
        PyTuple_SET_ITEM(record, 5, item);
        if (PyBytes_Check(item)) size += PyBytes_GET_SIZE(item);
        if (c->c_headers == NULL && (c->headers == NULL || c->headers == Py_None)) {
            item = PyTuple_New(0);
        } else { /* headers: through the method, which converts librdkafka's */
            PyObject *headers = call0((PyObject *)c, s_headers);
            if (headers == NULL) goto fail;
            if (headers == Py_None || (PyList_Check(headers) && PyList_GET_SIZE(headers) == 0)) {
                Py_DECREF(headers);
                item = PyTuple_New(0);
            } else {
                item = PySequence_Tuple(headers);
                Py_DECREF(headers);
            }
        }
        if (item == NULL) goto fail;
        PyTuple_SET_ITEM(record, 6, item);
        if (!untrackable(record, 0)) PyObject_GC_Track(record);
    }
    Py_INCREF(topic); /* (held by every Message built: n >= 1) */
    PyObject *result = Py_BuildValue("(NNNn)", topic, partition, out, size);
    /* (on failure Py_BuildValue released what "N" gave it: raw is still whole) */
    if (result != NULL && PyList_SetSlice(raw, 0, n, NULL) < 0) Py_CLEAR(result);
    if (collecting) PyGC_Enable(); /* theirs freed (unless held elsewhere) */
    return result;
fail:
    if (collecting) PyGC_Enable();
    Py_DECREF(partition);
    Py_DECREF(out);
    return NULL;
}

/* offsets_of_one(messages): (topic, partition, [offsets]) if every message is a tuple of
 * at least three items (a Message) of the first one's topic and partition; else None */
static PyObject *offsets_of_one(PyObject *self, PyObject *messages) {
    if (!PyTuple_Check(messages) && !PyList_Check(messages)) Py_RETURN_NONE;
    PyObject **items = PySequence_Fast_ITEMS(messages);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(messages);
    if (n == 0 || !PyTuple_Check(items[0]) || PyTuple_GET_SIZE(items[0]) < 3) Py_RETURN_NONE;
    PyObject *topic = PyTuple_GET_ITEM(items[0], 0);
    PyObject *partition = PyTuple_GET_ITEM(items[0], 1);
    if (!PyUnicode_CheckExact(topic) || !PyLong_CheckExact(partition)) Py_RETURN_NONE;
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = items[i];
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < 3) goto other;
        PyObject *t = PyTuple_GET_ITEM(m, 0), *p = PyTuple_GET_ITEM(m, 1);
        if (t != topic) {
            if (!PyUnicode_CheckExact(t)) goto other;
            int same = PyUnicode_Compare(t, topic);
            if (same == -1 && PyErr_Occurred()) goto fail;
            if (same != 0) goto other;
        }
        if (p != partition) {
            if (!PyLong_CheckExact(p)) goto other;
            int same = PyObject_RichCompareBool(p, partition, Py_EQ);
            if (same < 0) goto fail;
            if (!same) goto other;
        }
        PyObject *offset = PyTuple_GET_ITEM(m, 2);
        Py_INCREF(offset);
        PyList_SET_ITEM(out, i, offset);
    }
    return Py_BuildValue("(OON)", topic, partition, out);
other:
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    Py_DECREF(out);
    return NULL;
}

/* from_records(Message, topic, partition, records, start): Messages of the storage Records
 * (offset, timestamp, key, value, headers) whose offset is ``start`` or more, untracked as
 * messages() leaves them, built with the collector paused and ``records`` emptied at the end,
 * for the reason batch() gives: the embedded Consumer read with a tenth of its time in
 * collections (2026-12-04), its Records and Messages promoted batch after batch. On any
 * failure ``records`` is left as it was. Its attribute reads run no Python code on
 * storage's Records (attrs slots), so the GIL is held throughout here too. */
static PyObject *from_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "from_records(Message, topic, partition, records: list, start: int)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    PyObject *topic = args[1], *partition = args[2], *records = args[3];
    long long start = PyLong_AsLongLong(args[4]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(records), kept = 0;
    int collecting = PyGC_Disable(); /* before the first allocation, as in batch() */
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        if (collecting) PyGC_Enable();
        return NULL;
    }
    PyObject *r = NULL; /* held while its attributes are read (another object's could run
                         * code that changes the list: it is then read no further) */
    for (Py_ssize_t i = 0; i < n && i < PyList_GET_SIZE(records); i++) {
        r = PyList_GET_ITEM(records, i);
        Py_INCREF(r);
        PyObject *offset = PyObject_GetAttr(r, s_offset);
        if (offset == NULL) goto fail;
        long long at = PyLong_AsLongLong(offset);
        if (at == -1 && PyErr_Occurred()) {
            Py_DECREF(offset);
            goto fail;
        }
        if (at < start) { /* (a batch's records before the offset asked for) */
            Py_DECREF(offset);
            Py_CLEAR(r);
            continue;
        }
        PyObject *record = type->tp_alloc(type, 7);
        if (record == NULL) {
            Py_DECREF(offset);
            goto fail;
        }
        PyList_SET_ITEM(out, kept++, record);
        PyObject_GC_UnTrack(record);
        Py_INCREF(topic);
        PyTuple_SET_ITEM(record, 0, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(record, 1, partition);
        PyTuple_SET_ITEM(record, 2, offset);
        PyObject *names[4] = {s_timestamp, s_key, s_value, s_headers};
        for (int j = 0; j < 4; j++) {
            PyObject *item = PyObject_GetAttr(r, names[j]);
            if (item == NULL) goto fail;
            PyTuple_SET_ITEM(record, 3 + j, item);
        }
        if (!untrackable(record, 0)) PyObject_GC_Track(record); /* odd headers: as Python */
        Py_CLEAR(r);
    }
    if (PyList_SetSlice(out, kept, n, NULL) < 0) goto fail; /* (the NULL slots) */
    if (PyList_SetSlice(records, 0, PyList_GET_SIZE(records), NULL) < 0) goto fail;
    if (collecting) PyGC_Enable();
    return out;
fail:
    Py_XDECREF(r);
    if (collecting) PyGC_Enable();
    Py_DECREF(out); /* (NULL slots and items, never filled in: deallocs skip them) */
    return NULL;
}

/* size(records): the bytes of the keys and values of Messages (what a fetch's max_bytes
 * counts): items 4 and 5 of each, None counting 0; None if one is not such a tuple */
static PyObject *size(PyObject *self, PyObject *records) {
    if (!PyList_Check(records) && !PyTuple_Check(records)) Py_RETURN_NONE;
    PyObject **items = PySequence_Fast_ITEMS(records);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = items[i];
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < 6) Py_RETURN_NONE;
        for (int j = 4; j <= 5; j++) {
            PyObject *item = PyTuple_GET_ITEM(m, j);
            if (PyBytes_Check(item)) {
                total += PyBytes_GET_SIZE(item);
            } else if (item != Py_None) {
                Py_RETURN_NONE; /* not bytes: the caller counts with len() */
            }
        }
    }
    return PyLong_FromSsize_t(total);
}

static PyMethodDef methods[] = {
    {"size", (PyCFunction)size, METH_O,
     "size(records) -> int | None: the bytes of the keys and values of Messages (None "
     "when one is not a Message of bytes or None: the caller counts in Python)."},
    {"messages", (PyCFunction)(void (*)(void))messages, METH_FASTCALL,
     "messages(Message, topic, partition, raw) -> (Messages, bytes): confluent-kafka's "
     "messages as Messages (offset, timestamp()[1], key, value, headers as a tuple), "
     "untracked by the cyclic GC, and the bytes of their keys and values."},
    {"batch", (PyCFunction)(void (*)(void))batch, METH_FASTCALL,
     "batch(Message, raw) -> (topic, partition, Messages, bytes) | None: messages() of a "
     "consume() batch of one partition without errors, read from confluent-kafka's struct "
     "once layout_matches() held; None otherwise (the caller takes the general path)."},
    {"offsets_of_one", (PyCFunction)offsets_of_one, METH_O,
     "offsets_of_one(messages) -> (topic, partition, offsets) | None: the offsets of "
     "Messages all of one partition (None when they are not, or are not Messages)."},
    {"from_records", (PyCFunction)(void (*)(void))from_records, METH_FASTCALL,
     "from_records(Message, topic, partition, records, start) -> Messages: storage Records "
     "from offset start on as Messages, untracked by the cyclic GC; empties records."},
    {"layout_matches", (PyCFunction)layout_matches, METH_O,
     "layout_matches(samples) -> bool: whether confluent-kafka's Message struct is the one "
     "batch() reads (samples: (message, topic, partition, offset, key, value, headers, "
     "timestamp) built by confluent_kafka.Message); enables batch() when it is."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "logmarshal._fastconsume",
    "The Consumer's per-record helpers in C (see the source's header).", -1, methods,
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
