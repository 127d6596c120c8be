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
 * - Sender: Producer.send (and send_nowait) over the network for the usual record, a keyed
 *   bytes record of a topic seen before with nothing else given, without a Python frame: it
 *   builds the record's Report (or passes the shared sink), hands the record to librdkafka's
 *   produce and polls librdkafka every POLL_EVERY records, as the Python shortcut in
 *   logmarshal/producer.py does. Any other call, and any produce() that raised (a full queue,
 *   an error to translate), goes to the Python method it stands for, which does the same
 *   again with everything checked (a produce() that raised queued nothing).
 * - ErrorSink: send_nowait()'s one report callback over the network, which keeps failures
 *   only (a success, nearly every report, costs a check and no dict write).
 * - encode_plain: a RecordBatch v2 of records without headers, byte for byte what
 *   storage.encode_batch writes (base offset 0, CreateTime, uncompressed, no producer id),
 *   in two passes over the columns (sizes, then bytes). The CRC32C is the caller's function
 *   (the crc32c package), called once per batch.
 * - murmur2: Kafka's murmur2 of a key (logmarshal.partitioners.murmur2).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>
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


/* -------------------------------------------------------------------------------- Sink */

/* ErrorSink(errors): send_nowait()'s shared report callback. A success costs a check; a
 * failure is kept as errors[error] = [its message, how many failed so] (equal errors share
 * a key, as in the Python sink), for the next flush to raise and count. */
typedef struct {
    PyObject_HEAD
    PyObject *errors; /* a dict */
} ErrorSink;

static PyObject *ErrorSink_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *errors;
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs)) ||
        !PyArg_ParseTuple(args, "O!:ErrorSink", &PyDict_Type, &errors))
        return NULL;
    ErrorSink *self = PyObject_New(ErrorSink, type);
    if (self == NULL) return NULL;
    Py_INCREF(errors);
    self->errors = errors;
    return (PyObject *)self;
}

static void ErrorSink_dealloc(ErrorSink *self) {
    Py_CLEAR(self->errors);
    PyObject_Free(self);
}

static PyObject *ErrorSink_call(ErrorSink *self, PyObject *args, PyObject *kwargs) {
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) || PyTuple_GET_SIZE(args) != 2) {
        PyErr_SetString(PyExc_TypeError, "a delivery report is (error, message)");
        return NULL;
    }
    PyObject *error = PyTuple_GET_ITEM(args, 0);
    if (error == Py_None) Py_RETURN_NONE;
    /* errors[error] = [a message, how many failed so] (equal codes share a key) */
    PyObject *entry = PyDict_GetItemWithError(self->errors, error); /* borrowed */
    if (entry == NULL) {
        if (PyErr_Occurred()) return NULL;
        entry = Py_BuildValue("[On]", PyTuple_GET_ITEM(args, 1), (Py_ssize_t)1);
        if (entry == NULL) return NULL;
        int failed = PyDict_SetItem(self->errors, error, entry);
        Py_DECREF(entry);
        if (failed < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "an ErrorSink entry is [message, count]");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(PyList_GET_ITEM(entry, 1));
    if (count == -1 && PyErr_Occurred()) return NULL;
    PyObject *more = PyLong_FromSsize_t(count + 1);
    if (more == NULL) return NULL;
    if (PyList_SetItem(entry, 1, more) < 0) return NULL; /* steals ``more``, drops the old */
    Py_RETURN_NONE;
}

static PyTypeObject ErrorSinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logmarshal._fastproduce.ErrorSink",
    .tp_doc = "ErrorSink(errors): called with (error, message), keeps errors[error] = "
              "[message, count] unless error is None (the first message of each error, and "
              "how many came). Not GC-tracked: it holds only the dict, which holds reported "
              "errors and messages, never the sink.",
    .tp_basicsize = sizeof(ErrorSink),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = ErrorSink_new,
    .tp_dealloc = (destructor)ErrorSink_dealloc,
    .tp_call = (ternaryfunc)ErrorSink_call,
};

/* ------------------------------------------------------------------------------ Sender */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *owner;    /* the Producer: each Report refers to it */
    PyObject *produce;  /* librdkafka's producer's produce (NULL once closed) */
    PyObject *poll;     /* its poll */
    PyObject *counts;   /* the Producer's _partition_counts: a topic in it was checked */
    PyObject *fallback; /* the Python method this stands for, bound to the Producer */
    PyObject *sink;     /* send_nowait: every record's report callback; NULL for send */
    Py_ssize_t unpolled;
    Py_ssize_t poll_every;
} Sender;

static PyTypeObject SenderType;
static PyObject *minus_one; /* partition -1: librdkafka's partitioner places the record */
static PyObject *zero;      /* poll(0) */

static PyObject *Sender_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Sender *self = (Sender *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *key = NULL;
    /* (topic, value, key) or (topic, value, key=key): the usual call */
    if (nargs == 3 && nkw == 0) {
        key = args[2];
    } else if (nargs == 2 && nkw == 1) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
        if (PyUnicode_CheckExact(name) && PyUnicode_CompareWithASCIIString(name, "key") == 0)
            key = args[2];
    }
    PyObject *produce = self->produce;
    if (key == NULL || produce == NULL || !PyBytes_CheckExact(key) ||
        !PyBytes_CheckExact(args[1]) || !PyUnicode_CheckExact(args[0]))
        goto fallback;
    int known = PyDict_Contains(self->counts, args[0]);
    if (known < 0) return NULL;
    if (!known) goto fallback;
    PyObject *report;
    if (self->sink != NULL) {
        report = self->sink;
        Py_INCREF(report);
    } else {
        report = Report_vectorcall((PyObject *)&ReportType, &self->owner, 1, NULL);
        if (report == NULL) return NULL;
    }
    PyObject *call[5] = {args[0], args[1], key, minus_one, report};
    Py_INCREF(produce); /* close() may let go of it while librdkafka has the GIL released */
    PyObject *done = PyObject_Vectorcall(produce, call, 5, NULL);
    Py_DECREF(produce);
    if (done == NULL) {
        /* nothing was queued: the Python method tries again, waits for room or raises the
         * error in logmarshal's terms */
        Py_DECREF(report);
        PyErr_Clear();
        goto fallback;
    }
    Py_DECREF(done);
    if (++self->unpolled >= self->poll_every && self->poll != NULL) {
        self->unpolled = 0;
        PyObject *poll = self->poll;
        Py_INCREF(poll);
        PyObject *served = PyObject_CallOneArg(poll, zero);
        Py_DECREF(poll);
        if (served == NULL) {
            Py_DECREF(report);
            return NULL;
        }
        Py_DECREF(served);
    }
    if (self->sink != NULL) {
        Py_DECREF(report);
        Py_RETURN_NONE;
    }
    return report;
fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *Sender_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *owner, *produce, *poll, *counts, *fallback, *sink;
    Py_ssize_t poll_every;
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs)) ||
        !PyArg_ParseTuple(args, "OOOO!OOn:Sender", &owner, &produce, &poll, &PyDict_Type,
                          &counts, &fallback, &sink, &poll_every))
        return NULL;
    Sender *self = PyObject_GC_New(Sender, type);
    if (self == NULL) return NULL;
    self->vectorcall = Sender_vectorcall;
    Py_INCREF(owner);
    self->owner = owner;
    Py_INCREF(produce);
    self->produce = produce;
    Py_INCREF(poll);
    self->poll = poll;
    Py_INCREF(counts);
    self->counts = counts;
    Py_INCREF(fallback);
    self->fallback = fallback;
    if (sink == Py_None) {
        self->sink = NULL;
    } else {
        Py_INCREF(sink);
        self->sink = sink;
    }
    self->unpolled = 0;
    self->poll_every = poll_every < 1 ? 1 : poll_every;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* close(): every call from now on goes to the Python method (which raises ClosedError), and
 * librdkafka's handle is let go */
static PyObject *Sender_close(Sender *self, PyObject *Py_UNUSED(ignored)) {
    Py_CLEAR(self->produce);
    Py_CLEAR(self->poll);
    Py_RETURN_NONE;
}

static int Sender_traverse(Sender *self, visitproc visit, void *arg) {
    Py_VISIT(self->owner);
    Py_VISIT(self->produce);
    Py_VISIT(self->poll);
    Py_VISIT(self->counts);
    Py_VISIT(self->fallback);
    Py_VISIT(self->sink);
    return 0;
}

static int Sender_clear(Sender *self) {
    Py_CLEAR(self->owner);
    Py_CLEAR(self->produce);
    Py_CLEAR(self->poll);
    Py_CLEAR(self->counts);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->sink);
    return 0;
}

static void Sender_dealloc(Sender *self) {
    PyObject_GC_UnTrack(self);
    Sender_clear(self);
    PyObject_GC_Del(self);
}

static PyObject *Sender_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call(self, args, kwargs);
}

static PyMethodDef Sender_methods[] = {
    {"close", (PyCFunction)Sender_close, METH_NOARGS,
     "Every later call goes to the Python method; librdkafka's producer is let go."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logmarshal._fastproduce.Sender",
    .tp_doc = "Sender(owner, produce, poll, partition_counts, fallback, sink, poll_every): "
              "Producer.send (sink None) or send_nowait (sink: the shared report callback) "
              "for the usual record over the network; any other call is fallback(...).",
    .tp_basicsize = sizeof(Sender),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Sender, vectorcall),
    .tp_new = Sender_new,
    .tp_dealloc = (destructor)Sender_dealloc,
    .tp_traverse = (traverseproc)Sender_traverse,
    .tp_clear = (inquiry)Sender_clear,
    .tp_call = Sender_call,
    .tp_methods = Sender_methods,
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
    if (PyType_Ready(&ReportType) < 0 || PyType_Ready(&SenderType) < 0 ||
        PyType_Ready(&ErrorSinkType) < 0)
        return NULL;
    minus_one = PyLong_FromLong(-1);
    zero = PyLong_FromLong(0);
    if (minus_one == NULL || zero == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&SenderType);
    if (PyModule_AddObject(m, "Sender", (PyObject *)&SenderType) < 0) {
        Py_DECREF(&SenderType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ErrorSinkType);
    if (PyModule_AddObject(m, "ErrorSink", (PyObject *)&ErrorSinkType) < 0) {
        Py_DECREF(&ErrorSinkType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ReportType);
    if (PyModule_AddObject(m, "Report", (PyObject *)&ReportType) < 0) {
        Py_DECREF(&ReportType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
