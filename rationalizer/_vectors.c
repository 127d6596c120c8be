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

/* One minimal varint of at most `limit` at *pp (advanced past it); -1 for anything else
 * (truncated, overlong: a zero last byte after the first, past 2^63 or a tenth byte). */
static int read_one(const unsigned char **pp, const unsigned char *end, uint64_t limit,
                    uint64_t *out) {
    const unsigned char *p = *pp;
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (p >= end) return -1;
        unsigned b = *p++;
        if (shift == 63 && b > 1) return -1; /* past 2^63, or a tenth byte */
        v |= (uint64_t)(b & 0x7F) << shift;
        if (v > limit) return -1;
        if (b < 0x80) {
            if (b == 0 && shift) return -1; /* overlong */
            break;
        }
        shift += 7;
    }
    *pp = p;
    *out = v;
    return 0;
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
        uint64_t v;
        if (read_one(&p, end, NUMBER_LIMIT, &v) < 0) goto none;
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

#define MAX_ID_BYTES 1024          /* messages.MAX_ID_BYTES */
#define MAX_TOPIC_LENGTH 249       /* messages.MAX_TOPIC_LENGTH */
#define MAX_PARTITION 2147483647u  /* messages.MAX_PARTITION */
#define MAX_BEAT_ENTRIES 32768     /* messages.MAX_BEAT_ENTRIES */
#define MAX_HB_MS 3600000u         /* messages.MAX_HEARTBEAT_INTERVAL_MS */

static int legal_topic(const unsigned char *t, Py_ssize_t n) {
    if (n == 1 && t[0] == '.') return 0;
    if (n == 2 && t[0] == '.' && t[1] == '.') return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* CRC-32 (ISO-HDLC, zlib's) by table: the envelope's check (codec._check). The table is
 * filled once, when the module is imported, and only read after. */
static uint32_t crc_table[256];

static void fill_crc_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    crc = ~crc;
    for (Py_ssize_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* beat(key, value) -> (group_id, heartbeat_interval_ms, client_id, instance_id, rows) | None
 *
 * A version 7 MemberHeartbeat (PROTOCOL.md, "Version 7") read exactly as
 * codec.decode_v7_fields reads it: the envelope (version 7, type 1, the CRC-32 check, the
 * group id: 1..1,024 bytes of UTF-8, the key that very group id), the interval
 * (1..3,600,000), the two ids (as the group id), then 1..32,768 entries grouped by topic,
 * topics (legal names) and partitions strictly ascending, canonical varints, nothing after.
 * rows: per entry (identity part, topic, partition, tenure, last_offset), the identity part
 * being the bytes a version 1 record of that sender and partition carries (ids, group,
 * topic, partition, each as the codec writes it). None for anything else: the Python
 * decoder then says what is wrong, so what is accepted is its by construction
 * (tests/rationalizer/test_version7.py compares the two). */
static PyObject *read_beat(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "beat(key, value) takes 2 arguments");
        return NULL;
    }
    PyObject *key = args[0], *value = args[1];
    if (!PyBytes_CheckExact(value) || !PyBytes_CheckExact(key)) Py_RETURN_NONE;
    Py_ssize_t len = PyBytes_GET_SIZE(value);
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(value);
    if (len < 8 || base[0] != 7 || base[1] != 1) Py_RETURN_NONE;
    uint32_t check = ((uint32_t)base[2] << 24) | ((uint32_t)base[3] << 16) |
                     ((uint32_t)base[4] << 8) | base[5];
    if (crc32_update(crc32_update(0, base, 2), base + 6, len - 6) != check) Py_RETURN_NONE;
    const unsigned char *g = base + 6;
    uint64_t group_len;
    if (read_one(&g, base + len, MAX_ID_BYTES, &group_len) < 0 || group_len == 0 ||
        (Py_ssize_t)group_len > base + len - g)
        Py_RETURN_NONE;
    if (PyBytes_GET_SIZE(key) != (Py_ssize_t)group_len ||
        memcmp(PyBytes_AS_STRING(key), g, (size_t)group_len) != 0)
        Py_RETURN_NONE;
    Py_ssize_t at = (g - base) + (Py_ssize_t)group_len;
    const unsigned char *p = base + at, *end = base + len;
    if (end - p < 4) Py_RETURN_NONE;
    uint32_t hb = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    if (hb < 1 || hb > MAX_HB_MS) Py_RETURN_NONE;
    p += 4;
    const unsigned char *ids_start = p;
    const unsigned char *id_at[2];
    Py_ssize_t id_len[2];
    for (int k = 0; k < 2; k++) {
        uint64_t n;
        if (read_one(&p, end, MAX_ID_BYTES, &n) < 0 || n == 0 || (Py_ssize_t)n > end - p)
            Py_RETURN_NONE;
        id_at[k] = p;
        id_len[k] = (Py_ssize_t)n;
        p += n;
    }
    const unsigned char *ids_end = p;
    uint64_t n_topics;
    if (read_one(&p, end, MAX_BEAT_ENTRIES, &n_topics) < 0 || n_topics == 0) Py_RETURN_NONE;

    PyObject *group = NULL, *client = NULL, *instance = NULL, *rows = NULL, *topic = NULL;
    PyObject *out = NULL;
    unsigned char *ident = NULL;
    group = PyUnicode_DecodeUTF8((const char *)g, (Py_ssize_t)group_len, NULL);
    if (group == NULL) goto none;
    client = PyUnicode_DecodeUTF8((const char *)id_at[0], id_len[0], NULL);
    if (client == NULL) goto none;
    instance = PyUnicode_DecodeUTF8((const char *)id_at[1], id_len[1], NULL);
    if (instance == NULL) goto none;
    rows = PyList_New(0);
    if (rows == NULL) goto fail;
    /* the identity part: ids and group (as in the value), topic, partition varint */
    Py_ssize_t who = (ids_end - ids_start) + (at - 6);
    ident = PyMem_Malloc((size_t)who + 2 + MAX_TOPIC_LENGTH + 5);
    if (ident == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(ident, ids_start, (size_t)(ids_end - ids_start));
    memcpy(ident + (ids_end - ids_start), base + 6, (size_t)(at - 6));
    const unsigned char *prev = NULL;
    Py_ssize_t prev_len = 0;
    Py_ssize_t total = 0;
    for (uint64_t ti = 0; ti < n_topics; ti++) {
        const unsigned char *tlen_at = p;
        uint64_t tn;
        if (read_one(&p, end, MAX_TOPIC_LENGTH, &tn) < 0 || tn == 0 || (Py_ssize_t)tn > end - p)
            goto none;
        const unsigned char *t = p;
        if (!legal_topic(t, (Py_ssize_t)tn)) goto none;
        if (prev != NULL) {
            Py_ssize_t m = prev_len < (Py_ssize_t)tn ? prev_len : (Py_ssize_t)tn;
            int c = memcmp(prev, t, (size_t)m);
            if (c > 0 || (c == 0 && prev_len >= (Py_ssize_t)tn)) goto none; /* not ascending */
        }
        prev = t;
        prev_len = (Py_ssize_t)tn;
        p += tn;
        Py_ssize_t tpart = who + (p - tlen_at); /* ids, group, topic with its length */
        memcpy(ident + who, tlen_at, (size_t)(p - tlen_at));
        Py_XDECREF(topic);
        topic = PyUnicode_DecodeASCII((const char *)t, (Py_ssize_t)tn, NULL);
        if (topic == NULL) goto fail;
        uint64_t count;
        if (read_one(&p, end, (uint64_t)(MAX_BEAT_ENTRIES - total), &count) < 0 || count == 0)
            goto none;
        int64_t last_partition = -1;
        for (uint64_t e = 0; e < count; e++) {
            uint64_t part, tenure, next;
            const unsigned char *part_at = p;
            if (read_one(&p, end, NUMBER_LIMIT, &part) < 0) goto none;
            const unsigned char *part_end = p;
            if (read_one(&p, end, NUMBER_LIMIT, &tenure) < 0) goto none;
            if (read_one(&p, end, NUMBER_LIMIT, &next) < 0) goto none;
            if (part > MAX_PARTITION || (int64_t)part <= last_partition) goto none;
            if (tenure > NUMBER_LIMIT - 1) goto none;
            last_partition = (int64_t)part;
            memcpy(ident + tpart, part_at, (size_t)(part_end - part_at));
            /* (built field by field: Py_BuildValue parses its format for every entry) */
            PyObject *row = PyTuple_New(5);
            if (row == NULL) goto fail;
            PyObject *f0 = PyBytes_FromStringAndSize((const char *)ident,
                                                     tpart + (part_end - part_at));
            PyObject *f2 = PyLong_FromUnsignedLongLong(part);
            PyObject *f3 = PyLong_FromUnsignedLongLong(tenure);
            PyObject *f4 = PyLong_FromLongLong(next ? (long long)(next - 1) : -1LL);
            Py_INCREF(topic);
            PyTuple_SET_ITEM(row, 0, f0);
            PyTuple_SET_ITEM(row, 1, topic);
            PyTuple_SET_ITEM(row, 2, f2);
            PyTuple_SET_ITEM(row, 3, f3);
            PyTuple_SET_ITEM(row, 4, f4);
            if (f0 == NULL || f2 == NULL || f3 == NULL || f4 == NULL) {
                Py_DECREF(row); /* (frees what was made; NULL items are skipped) */
                goto fail;
            }
            if (PyList_Append(rows, row) < 0) {
                Py_DECREF(row);
                goto fail;
            }
            Py_DECREF(row);
        }
        total += (Py_ssize_t)count;
    }
    if (p != end) goto none;
    PyObject *entries = PyList_AsTuple(rows);
    if (entries == NULL) goto fail;
    Py_DECREF(rows);
    rows = NULL;
    out = Py_BuildValue("(NINNN)", group, (unsigned int)hb, client, instance, entries);
    group = client = instance = NULL; /* (stolen by N, as entries) */
    Py_XDECREF(topic);
    PyMem_Free(ident);
    return out;
none:
    PyErr_Clear(); /* (invalid UTF-8: the Python decoder names it) */
    Py_XDECREF(group);
    Py_XDECREF(client);
    Py_XDECREF(instance);
    Py_XDECREF(rows);
    Py_XDECREF(topic);
    PyMem_Free(ident);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(group);
    Py_XDECREF(client);
    Py_XDECREF(instance);
    Py_XDECREF(rows);
    Py_XDECREF(topic);
    PyMem_Free(ident);
    return NULL;
}

static PyMethodDef methods[] = {
    {"varints", (PyCFunction)(void (*)(void))read_varints, METH_FASTCALL,
     "varints(value, at, count) -> (numbers, end) | None\n\n"
     "count minimal varints of at most 2^63 at value[at:]; None for anything else."},
    {"beat", (PyCFunction)(void (*)(void))read_beat, METH_FASTCALL,
     "beat(key, value) -> (group_id, heartbeat_interval_ms, client_id, instance_id, rows)"
     " | None\n\n"
     "A version 7 MemberHeartbeat as the strict decoder reads it, each entry with its\n"
     "identity part; None for anything else."},
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

PyMODINIT_FUNC PyInit__vectors(void) {
    fill_crc_table();
    return PyModule_Create(&module);
}
