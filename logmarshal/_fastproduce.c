/* The Producer's per-record work that Python cannot make cheap (docs/performance.md,
 * "Producer"). Optional, like storage/_fastrecords.c: without a compiler logmarshal uses
 * the Python code beside each function (same results, slower), and the tests compare both.
 *
 * - Report: what logmarshal.Producer.send() gives librdkafka as a record's delivery
 *   callback. Calling it stores (error, message). It is not tracked by the cyclic garbage
 *   collector: tens of thousands of them are alive while their records are in flight, and
 *   as GC-tracked objects (the dict the Python fallback uses) they made the collector
 *   traverse them again and again (~0.4 us a record over the network). It refers to its
 *   Producer and to the Message it was given; neither refers back to it (librdkafka holds
 *   it until the report), so it is never part of a reference cycle. Not subclassable: since
 *   Python 3.11 every Python-defined subclass's instances are GC-tracked.
 * - encode_plain: a RecordBatch v2 of records without headers, byte for byte what
 *   storage.encode_batch writes (base offset 0, CreateTime, uncompressed, no producer id),
 *   in two passes over the columns (sizes, then bytes). The CRC32C is the caller's function
 *   (the crc32c package), called once per batch.
 * - murmur2: Kafka's murmur2 of a key (logmarshal.partitioners.murmur2).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------------ Report */

typedef struct {
    PyObject_HEAD
    PyObject *owner;   /* the Producer: it waits for the report and turns it into a result */
    PyObject *error;   /* NULL until reported */
    PyObject *message; /* NULL until reported */
} Report;

static PyTypeObject ReportType;

/* Report(owner): built for every record sent, so without parsing any arguments */
static PyObject *Report_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "Report(owner)");
        return NULL;
    }
    Report *self = PyObject_New(Report, (PyTypeObject *)type);
    if (self == NULL) return NULL;
    Py_INCREF(args[0]);
    self->owner = args[0];
    self->error = NULL;
    self->message = NULL;
    return (PyObject *)self;
}

static PyObject *Report_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *owner;
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs)) || !PyArg_ParseTuple(args, "O:Report", &owner))
        return NULL;
    return Report_vectorcall((PyObject *)type, &owner, 1, NULL);
}

static void Report_dealloc(Report *self) {
    Py_CLEAR(self->owner);
    Py_CLEAR(self->error);
    Py_CLEAR(self->message);
    PyObject_Free(self);
}

static PyObject *Report_call(Report *self, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "a delivery report takes no keyword arguments");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 2) {
        PyErr_SetString(PyExc_TypeError, "a delivery report is (error, message)");
        return NULL;
    }
    PyObject *error = PyTuple_GET_ITEM(args, 0);
    PyObject *message = PyTuple_GET_ITEM(args, 1);
    Py_INCREF(error);
    Py_INCREF(message);
    Py_XSETREF(self->error, error);
    Py_XSETREF(self->message, message);
    Py_RETURN_NONE;
}

static int Report_bool(Report *self) { return self->message != NULL; }

static PyObject *Report_get_error(Report *self, void *Py_UNUSED(closure)) {
    PyObject *v = self->error != NULL ? self->error : Py_None;
    Py_INCREF(v);
    return v;
}

static PyObject *Report_get_message(Report *self, void *Py_UNUSED(closure)) {
    PyObject *v = self->message != NULL ? self->message : Py_None;
    Py_INCREF(v);
    return v;
}

static PyObject *Report_done(Report *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->message != NULL);
}

/* result() and exception() are the owner's: owner._report_result(report, timeout) */
static PyObject *Report_ask_owner(Report *self, PyObject *args, PyObject *kwargs,
                                  const char *method) {
    static char *kws[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", kws, &timeout)) return NULL;
    return PyObject_CallMethod(self->owner, method, "OO", (PyObject *)self, timeout);
}

static PyObject *Report_result(Report *self, PyObject *args, PyObject *kwargs) {
    return Report_ask_owner(self, args, kwargs, "_report_result");
}

static PyObject *Report_exception(Report *self, PyObject *args, PyObject *kwargs) {
    return Report_ask_owner(self, args, kwargs, "_report_exception");
}

static PyMethodDef Report_methods[] = {
    {"done", (PyCFunction)Report_done, METH_NOARGS,
     "Whether the record's outcome is known (stored, or failed)."},
    {"result", (PyCFunction)(void (*)(void))Report_result, METH_VARARGS | METH_KEYWORDS,
     "result(timeout=None): the record's metadata, waiting up to timeout s for it; the error "
     "that stopped it is raised, TimeoutError if its outcome is still unknown."},
    {"exception", (PyCFunction)(void (*)(void))Report_exception, METH_VARARGS | METH_KEYWORDS,
     "exception(timeout=None): wait like result(); the error that stopped the record, or None."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Report_getset[] = {
    {"error", (getter)Report_get_error, NULL, "the report's error (None: stored)", NULL},
    {"message", (getter)Report_get_message, NULL, "the reported message, None before", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyNumberMethods Report_as_number = {
    .nb_bool = (inquiry)Report_bool,
};

static PyTypeObject ReportType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logmarshal._fastproduce.Report",
    .tp_doc = "Report(owner): a record's delivery report once called with (error, message); "
              "result() and exception() are owner._report_result / _report_exception. Not "
              "tracked by the garbage collector, hence not subclassable (a Python subclass "
              "would be).",
    .tp_basicsize = sizeof(Report),
    .tp_itemsize = 0,
    /* no Py_TPFLAGS_HAVE_GC: the point of this type (see the top of the file) */
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Report_new,
    .tp_vectorcall = Report_vectorcall,
    .tp_dealloc = (destructor)Report_dealloc,
    .tp_call = (ternaryfunc)Report_call,
    .tp_as_number = &Report_as_number,
    .tp_methods = Report_methods,
    .tp_getset = Report_getset,
};

/* ------------------------------------------------------------------------ encode_plain */

#define BATCH_OVERHEAD 61
#define LOG_OVERHEAD 12
#define CRC_START 21

static inline uint64_t zigzag(int64_t n) { return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63); }

static inline Py_ssize_t varint_len(uint64_t u) {
    Py_ssize_t len = 1;
    while (u > 0x7F) {
        u >>= 7;
        len++;
    }
    return len;
}

static inline unsigned char *put_varint(unsigned char *p, uint64_t u) {
    while (u > 0x7F) {
        *p++ = (unsigned char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (unsigned char)u;
    return p;
}

static inline unsigned char *put_be(unsigned char *p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) p[bytes - 1 - i] = (unsigned char)(v >> (8 * i));
    return p + bytes;
}

/* A key or value field: its length and, when not null, its bytes. -1: not bytes or None. */
static inline Py_ssize_t field_size(PyObject *obj) {
    if (obj == Py_None) return 1; /* a null is its one-byte length, zigzag(-1) */
    if (!PyBytes_CheckExact(obj)) return -1;
    Py_ssize_t n = PyBytes_GET_SIZE(obj);
    return varint_len(zigzag(n)) + n;
}

static inline unsigned char *put_field(unsigned char *p, PyObject *obj) {
    if (obj == Py_None) {
        *p++ = 1;
        return p;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(obj);
    p = put_varint(p, zigzag(n));
    memcpy(p, PyBytes_AS_STRING(obj), (size_t)n);
    return p + n;
}

/* A record's timestamp as int64, its delta from the first as well; 0: not an int64 (the
 * caller then returns None and the Python encoder decides). */
static inline int timestamp_at(PyObject *list, Py_ssize_t i, int64_t *ts) {
    PyObject *obj = PyList_GET_ITEM(list, i);
    if (!PyLong_CheckExact(obj)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *ts = (int64_t)v;
    return 1;
}

static PyObject *encode_plain(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_plain(timestamps, keys, values, crc)");
        return NULL;
    }
    PyObject *timestamps = args[0], *keys = args[1], *values = args[2], *crc = args[3];
    if (!PyList_CheckExact(timestamps) || !PyList_CheckExact(keys) || !PyList_CheckExact(values)) {
        PyErr_SetString(PyExc_TypeError, "encode_plain takes three lists");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (n == 0 || n > INT32_MAX || PyList_GET_SIZE(keys) != n || PyList_GET_SIZE(timestamps) != n)
        Py_RETURN_NONE;

    /* pass 1: sizes (and every field checked) */
    int64_t first_ts, max_ts, ts;
    if (!timestamp_at(timestamps, 0, &first_ts)) Py_RETURN_NONE;
    max_ts = first_ts;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!timestamp_at(timestamps, i, &ts)) Py_RETURN_NONE;
        int64_t delta;
        if (__builtin_sub_overflow(ts, first_ts, &delta)) Py_RETURN_NONE;
        if (ts > max_ts) max_ts = ts;
        Py_ssize_t key = field_size(PyList_GET_ITEM(keys, i));
        Py_ssize_t value = field_size(PyList_GET_ITEM(values, i));
        if (key < 0 || value < 0) Py_RETURN_NONE;
        /* attributes, timestamp delta, offset delta, key, value, header count */
        Py_ssize_t body = 1 + varint_len(zigzag(delta)) + varint_len(zigzag(i)) + key + value + 1;
        total += varint_len(zigzag(body)) + body;
        if (total > INT32_MAX - BATCH_OVERHEAD) Py_RETURN_NONE;
    }

    PyObject *out = PyBytes_FromStringAndSize(NULL, BATCH_OVERHEAD + total);
    if (out == NULL) return NULL;
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char *p = start;
    p = put_be(p, 0, 8);                                                 /* base offset */
    p = put_be(p, (uint64_t)(BATCH_OVERHEAD + total - LOG_OVERHEAD), 4); /* batch length */
    p = put_be(p, (uint64_t)-1, 4);                                      /* leader epoch */
    *p++ = 2;                                                            /* magic */
    p = put_be(p, 0, 4);                                                 /* crc, below */
    p = put_be(p, 0, 2);                                                 /* attributes */
    p = put_be(p, (uint64_t)(n - 1), 4);                                 /* last offset delta */
    p = put_be(p, (uint64_t)first_ts, 8);
    p = put_be(p, (uint64_t)max_ts, 8);
    p = put_be(p, (uint64_t)-1, 8); /* producer id */
    p = put_be(p, (uint64_t)-1, 2); /* producer epoch */
    p = put_be(p, (uint64_t)-1, 4); /* base sequence */
    p = put_be(p, (uint64_t)n, 4);  /* record count */

    /* pass 2: the records. Pass 1 checked every field; checked again, since allocating
     * `out` may have run a finalizer (Python code) that changed the lists. */
    unsigned char *end = start + BATCH_OVERHEAD + total;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_SIZE(timestamps) != n || PyList_GET_SIZE(keys) != n ||
            PyList_GET_SIZE(values) != n || !timestamp_at(timestamps, i, &ts))
            goto changed;
        PyObject *key = PyList_GET_ITEM(keys, i);
        PyObject *value = PyList_GET_ITEM(values, i);
        int64_t signed_delta;
        if (__builtin_sub_overflow(ts, first_ts, &signed_delta)) goto changed;
        uint64_t delta = zigzag(signed_delta);
        Py_ssize_t key_size = field_size(key), value_size = field_size(value);
        if (key_size < 0 || value_size < 0) goto changed;
        Py_ssize_t body = 1 + varint_len(delta) + varint_len(zigzag(i)) + key_size + value_size + 1;
        if (varint_len(zigzag(body)) + body > end - p) goto changed;
        p = put_varint(p, zigzag(body));
        *p++ = 0; /* attributes */
        p = put_varint(p, delta);
        p = put_varint(p, zigzag(i));
        p = put_field(p, key);
        p = put_field(p, value);
        *p++ = 0; /* header count */
    }
    if (p != end) goto changed;

    /* the CRC32C of everything from the attributes on, by the caller's function */
    PyObject *view = PyMemoryView_FromMemory((char *)start + CRC_START,
                                             BATCH_OVERHEAD + total - CRC_START, PyBUF_READ);
    if (view == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *sum = PyObject_CallOneArg(crc, view);
    Py_DECREF(view);
    if (sum == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    unsigned long value = PyLong_AsUnsignedLong(sum);
    Py_DECREF(sum);
    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        Py_DECREF(out);
        return NULL;
    }
    put_be(start + 17, (uint64_t)value, 4);
    return out;

changed:
    Py_DECREF(out);
    PyErr_SetString(PyExc_RuntimeError, "encode_plain: the columns changed while encoding");
    return NULL;
}

/* ----------------------------------------------------------------------------- murmur2 */

static PyObject *murmur2(PyObject *Py_UNUSED(module), PyObject *arg) {
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *data = buf.buf;
    Py_ssize_t length = buf.len;
    const uint32_t m = 0x5BD1E995;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)length;
    Py_ssize_t blocks = length >> 2;
    for (Py_ssize_t b = 0; b < blocks; b++) {
        const unsigned char *q = data + 4 * b;
        uint32_t k = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) |
                     ((uint32_t)q[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t base = blocks << 2;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[base + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[base + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[base];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(h);
}

/* ------------------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"encode_plain", (PyCFunction)(void (*)(void))encode_plain, METH_FASTCALL,
     "encode_plain(timestamps, keys, values, crc) -> bytes | None: one v2 batch of records "
     "without headers (None when a field is not bytes/None or a timestamp not an int64)."},
    {"murmur2", (PyCFunction)murmur2, METH_O, "Kafka's murmur2 of a bytes-like key, unsigned."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "logmarshal._fastproduce",
    "The Producer's per-record helpers in C (see the source's header).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastproduce(void) {
    if (PyType_Ready(&ReportType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ReportType);
    if (PyModule_AddObject(m, "Report", (PyObject *)&ReportType) < 0) {
        Py_DECREF(&ReportType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
