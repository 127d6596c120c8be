/* Plain RecordBatch v2 batches straight into four columns (storage._records.decode_columns),
 * and the record walk of produce validation (storage._validation, walk_records below).
 *
 * Why C: a coordination log is replayed by every member at every cold start, and decoding
 * a stored record in Python costs more than folding it (bench/coldstart.py). This parses
 * only the common shape -- uncompressed, CRC correct, no record headers, every length
 * consistent -- and stops at the first batch that is anything else, returning its byte
 * position: the caller decodes that batch with the Python decoder (the reference, which
 * also raises the errors) and calls again after it. So the results and errors are the
 * Python decoder's by construction; tests/storage/test_fastrecords.py checks it. The CRC32C
 * itself is the caller's function (the crc32c package), called once per batch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BATCH_OVERHEAD 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH (BATCH_OVERHEAD - LOG_OVERHEAD)
#define CRC_START 21

static int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                     ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* Record keys repeat (a coordination key names one partition of one group): the same
 * bytes object is handed out again for the same key, which saves its allocation here and
 * its hashing in the replay's dict lookups. A direct-mapped cache of short keys; bytes are
 * immutable, so sharing one is invisible to the caller. Guarded by the GIL. */
#define KEY_CACHE_SIZE 8192
#define KEY_CACHE_MAX_LEN 128
static PyObject *key_cache[KEY_CACHE_SIZE];

static PyObject *key_bytes(const unsigned char *k, Py_ssize_t len) {
    if (len > KEY_CACHE_MAX_LEN) return PyBytes_FromStringAndSize((const char *)k, len);
    /* the slot: a hash of the length and the first and last (up to) 8 bytes; a collision
     * only costs a new object, every hit is compared in full */
    uint64_t head = 0, tail = 0;
    Py_ssize_t w = len < 8 ? len : 8;
    memcpy(&head, k, (size_t)w);
    memcpy(&tail, k + len - w, (size_t)w);
    uint64_t h = (head * 0x9E3779B97F4A7C15ull) ^ (tail * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t)len;
    h ^= h >> 29;
    PyObject **slot = &key_cache[(h * 0x94D049BB133111EBull >> 51) & (KEY_CACHE_SIZE - 1)];
    PyObject *hit = *slot;
    if (hit != NULL && PyBytes_GET_SIZE(hit) == len && memcmp(PyBytes_AS_STRING(hit), k, len) == 0) {
        Py_INCREF(hit);
        return hit;
    }
    PyObject *fresh = PyBytes_FromStringAndSize((const char *)k, len);
    if (fresh == NULL) return NULL;
    Py_INCREF(fresh);
    Py_XSETREF(*slot, fresh);
    return fresh;
}

/* One zigzag varint of at most `max_bytes` bytes below `end`; 0 when it is not in that
 * shape (the caller then leaves the batch to Python). */
static int varint(const unsigned char *d, Py_ssize_t *p, Py_ssize_t end, int max_bytes,
                  int64_t *out) {
    uint64_t u = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*p >= end) return 0;
        unsigned char b = d[(*p)++];
        u |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 1;
        }
    }
    return 0;
}

/* Drop what was appended to the columns since their lengths were `marks`. */
static void roll_back(PyObject *cols[4], const Py_ssize_t marks[4]) {
    for (int c = 0; c < 4; c++) PyList_SetSlice(cols[c], marks[c], PY_SSIZE_T_MAX, NULL);
}

/* Append the records of one plain batch (header at d, `size` bytes); 0 if it is not plain,
 * and then nothing of it stays appended. One pass: parse, append, roll back on a misfit. */
static int plain_batch(const unsigned char *d, Py_ssize_t size, PyObject *crc_fn,
                       PyObject *cols[4], int *error) {
    int16_t attributes = (int16_t)(((unsigned)d[21] << 8) | d[22]);
    int32_t record_count = be32(d + 57);
    if (d[16] != 2 || (attributes & 0x07) || record_count < 0 || be32(d + 23) < -1)
        return 0;
    /* the CRC first: a damaged batch is never parsed here */
    PyObject *mv = PyMemoryView_FromMemory((char *)d + CRC_START, size - CRC_START, PyBUF_READ);
    if (mv == NULL) { *error = 1; return 0; }
    PyObject *crc = PyObject_CallOneArg(crc_fn, mv);
    Py_DECREF(mv);
    if (crc == NULL) { *error = 1; return 0; }
    unsigned long got = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (got == (unsigned long)-1 && PyErr_Occurred()) { *error = 1; return 0; }
    if (got != (uint32_t)be32(d + 17)) return 0;

    int64_t base = be64(d);
    int64_t first_ts = be64(d + 27);
    int log_append = attributes & 0x08;
    const unsigned char *r = d + BATCH_OVERHEAD;
    Py_ssize_t n = size - BATCH_OVERHEAD;
    Py_ssize_t marks[4];
    for (int c = 0; c < 4; c++) marks[c] = PyList_GET_SIZE(cols[c]);
    PyObject *stamp = NULL;
    if (log_append && record_count) {
        stamp = PyLong_FromLongLong(be64(d + 35));
        if (stamp == NULL) { *error = 1; return 0; }
    }
    int plain = 1;
    Py_ssize_t p = 0;
    for (int32_t i = 0; i < record_count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, offset, ts = 0;
        if (!varint(r, &p, n, 5, &length) || length < 1 || length > n - p) { plain = 0; break; }
        Py_ssize_t rec_end = p + (Py_ssize_t)length;
        p += 1; /* record attributes */
        if (!varint(r, &p, rec_end, 9, &ts_delta) || !varint(r, &p, rec_end, 5, &off_delta) ||
            __builtin_add_overflow(base, off_delta, &offset) ||
            (!log_append && __builtin_add_overflow(first_ts, ts_delta, &ts)) ||
            !varint(r, &p, rec_end, 5, &klen)) {
            plain = 0;
            break;
        }
        const unsigned char *k = r + p;
        if (klen >= 0) {
            if (klen > rec_end - p) { plain = 0; break; }
            p += (Py_ssize_t)klen;
        }
        if (!varint(r, &p, rec_end, 5, &vlen)) { plain = 0; break; }
        const unsigned char *v = r + p;
        if (vlen >= 0) {
            if (vlen > rec_end - p) { plain = 0; break; }
            p += (Py_ssize_t)vlen;
        }
        if (p + 1 != rec_end || r[p] != 0) { plain = 0; break; } /* record headers */
        p = rec_end;
        PyObject *item[4];
        item[0] = PyLong_FromLongLong(offset);
        if (stamp != NULL) {
            Py_INCREF(stamp);
            item[1] = stamp;
        } else {
            item[1] = PyLong_FromLongLong(ts);
        }
        if (klen < 0) {
            Py_INCREF(Py_None);
            item[2] = Py_None;
        } else {
            item[2] = key_bytes(k, (Py_ssize_t)klen);
        }
        if (vlen < 0) {
            Py_INCREF(Py_None);
            item[3] = Py_None;
        } else {
            item[3] = PyBytes_FromStringAndSize((const char *)v, (Py_ssize_t)vlen);
        }
        for (int c = 0; c < 4; c++) {
            if (item[c] == NULL || (!*error && PyList_Append(cols[c], item[c]) < 0)) *error = 1;
            Py_XDECREF(item[c]);
        }
        if (*error) { plain = 0; break; }
    }
    if (plain && p != n) plain = 0;
    Py_XDECREF(stamp);
    if (!plain) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb); /* keep a pending error across the roll-back */
        roll_back(cols, marks);
        PyErr_Restore(type, value, tb);
    }
    return plain;
}

static PyObject *decode_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_plain(buf, pos, crc32c, offsets, timestamps, keys, values)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    PyObject *cols[4];
    for (int c = 0; c < 4; c++) {
        cols[c] = args[3 + c];
        if (!PyList_CheckExact(cols[c])) {
            PyErr_SetString(PyExc_TypeError, "the columns must be lists");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len;
    if (pos < 0) pos = 0;
    int error = 0;
    /* Plain batches one after another; stop before anything else (a short or partial
     * batch, a bad length or header, a bad CRC, compression, headers, a misfit). */
    while (n - pos >= LOG_OVERHEAD) {
        int32_t length = be32(buf + pos + 8);
        if (length < MIN_BATCH_LENGTH || length > n - pos - LOG_OVERHEAD) break;
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (!plain_batch(buf + pos, size, args[2], cols, &error)) break;
        pos += size;
    }
    PyBuffer_Release(&view);
    if (error) return NULL;
    return PyLong_FromSsize_t(pos);
}

/* ------------------------------------------------------------------ the validation walk
 *
 * storage._validation's record walk (``_walk``), rule for rule and in the same order, so the
 * first rule a batch breaks is the same one. Values are 128-bit: a 10-byte varint carries up
 * to 70 bits and Python compares them unbounded, so nothing may wrap here either. The
 * verdict comes back as (kind, value): (0, largest record timestamp), or (1, record) for
 * bytes that do not parse (CorruptRecordError), or (2, record) for a rule broken by parsed
 * records (InvalidRecord); record -1 is the batch as a whole. The caller turns a refusal into
 * the reference's exception by running the Python walk, so messages have one author. */

#ifdef __SIZEOF_INT128__ /* 64-bit GCC and Clang; elsewhere only decode_plain is built */
#define HAVE_WALK 1
typedef __int128 i128;
typedef unsigned __int128 u128;

enum { WALK_OK = 0, WALK_CORRUPT = 1, WALK_INVALID = 2 };

/* One zigzag varint inside [*p, end), at most 10 bytes, as storage._varint.read_varint.
 * Most fields of a record are one byte: that case is inlined, the rest is the loop. */
static int walk_varint_long(const unsigned char *d, Py_ssize_t *p, Py_ssize_t end, i128 *out);

static inline int walk_varint(const unsigned char *d, Py_ssize_t *p, Py_ssize_t end, i128 *out) {
    Py_ssize_t q = *p;
    if (q < end && d[q] < 0x80) {
        unsigned b = d[q];
        *p = q + 1;
        *out = (i128)((int)(b >> 1) ^ -(int)(b & 1));
        return 1;
    }
    if (end - q >= 2 && d[q + 1] < 0x80) { /* two bytes: lengths of 64 B to 8 KiB */
        unsigned u = (d[q] & 0x7Fu) | ((unsigned)d[q + 1] << 7);
        *p = q + 2;
        *out = (i128)((int)(u >> 1) ^ -(int)(u & 1));
        return 1;
    }
    return walk_varint_long(d, p, end, out);
}

static int walk_varint_long(const unsigned char *d, Py_ssize_t *p, Py_ssize_t end, i128 *out) {
    u128 u = 0;
    int shift = 0;
    for (;;) {
        if (*p >= end) return 0;
        unsigned char b = d[(*p)++];
        u |= (u128)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (i128)(u >> 1) ^ -(i128)(u & 1);
            return 1;
        }
        shift += 7;
        if (shift > 63) return 0;
    }
}

/* One varint of a field Kafka reads as an int32, as storage._varint.read_varint32: at most 5
 * bytes, in the int32 range (a record's length, offset delta, key and value lengths, header
 * count and header lengths; only the timestamp delta is an int64). */
static inline int walk_varint32(const unsigned char *d, Py_ssize_t *p, Py_ssize_t end, i128 *out) {
    Py_ssize_t q = *p;
    return walk_varint(d, p, end, out) && *p - q <= 5 && *out >= (i128)INT32_MIN &&
           *out <= (i128)INT32_MAX;
}

/* Strict UTF-8, as bytes.decode("utf-8"): no overlong forms, surrogates or code points
 * above U+10FFFF. */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (n - i < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0;  /* overlong */
            if (c == 0xED && s[i + 1] >= 0xA0) return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (n - i < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0;  /* overlong */
            if (c == 0xF4 && s[i + 1] >= 0x90) return 0; /* above U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

#define REFUSE(kind) do { *at = i; return (kind); } while (0)

/* The walk itself; WALK_OK with the largest timestamp in *top, or the kind and record. */
static int walk(const unsigned char *d, Py_ssize_t n, long long count, int64_t first_ts,
                int require_keys, i128 *top, long long *at) {
    const i128 i64_min = (i128)INT64_MIN, i64_max = (i128)INT64_MAX;
    i128 max_delta = i64_min, min_delta = i64_max;
    Py_ssize_t p = 0;
    long long i, odd = -1; /* odd: the first record with a length below -1 (a reader's null) */
    for (i = 0; i < count; i++) {
        i128 length, ts_delta, off_delta, size, hcount;
        if (p >= n) REFUSE(WALK_CORRUPT);
        if (!walk_varint32(d, &p, n, &length)) REFUSE(WALK_CORRUPT);
        if (length < 6 || length > (i128)(n - p)) REFUSE(WALK_CORRUPT);
        Py_ssize_t end = p + (Py_ssize_t)length;
        p += 1; /* attributes, unused in v2 */
        if (!walk_varint(d, &p, end, &ts_delta)) REFUSE(WALK_CORRUPT);
        if (ts_delta > max_delta) max_delta = ts_delta;
        if (ts_delta < min_delta) min_delta = ts_delta;
        if (!walk_varint32(d, &p, end, &off_delta)) REFUSE(WALK_CORRUPT);
        if (off_delta != (i128)i) REFUSE(WALK_INVALID);
        /* key */
        if (!walk_varint32(d, &p, end, &size)) REFUSE(WALK_CORRUPT);
        if (size < -1) { if (odd < 0) odd = i; }
        else if (size > (i128)(end - p)) REFUSE(WALK_CORRUPT);
        if (size > 0) p += (Py_ssize_t)size;
        else if (size < 0 && require_keys) REFUSE(WALK_INVALID);
        /* value */
        if (!walk_varint32(d, &p, end, &size)) REFUSE(WALK_CORRUPT);
        if (size < -1) { if (odd < 0) odd = i; }
        else if (size > (i128)(end - p)) REFUSE(WALK_CORRUPT);
        if (size > 0) p += (Py_ssize_t)size;
        /* headers: usually none, one zero byte that ends the record */
        if (p + 1 == end && d[p] == 0) {
            p = end;
            continue;
        }
        if (!walk_varint32(d, &p, end, &hcount)) REFUSE(WALK_CORRUPT);
        if (hcount < 0 || hcount > (i128)(end - p)) REFUSE(WALK_CORRUPT);
        for (i128 h = 0; h < hcount; h++) {
            if (!walk_varint32(d, &p, end, &size)) REFUSE(WALK_CORRUPT);
            if (size < 0 || size > (i128)(end - p)) REFUSE(WALK_CORRUPT);
            if (!utf8_ok(d + p, (Py_ssize_t)size)) REFUSE(WALK_CORRUPT);
            p += (Py_ssize_t)size;
            if (!walk_varint32(d, &p, end, &size)) REFUSE(WALK_CORRUPT);
            if (size < -1) { if (odd < 0) odd = i; }
            else if (size > (i128)(end - p)) REFUSE(WALK_CORRUPT);
            if (size > 0) p += (Py_ssize_t)size;
        }
        if (p != end) REFUSE(WALK_CORRUPT);
    }
    i = -1;
    if (p != n) REFUSE(WALK_CORRUPT);
    if (odd >= 0) { /* decodable, against the rule (after the walk: corrupt comes first) */
        *at = odd;
        return WALK_INVALID;
    }
    if (count == 0) {
        *top = first_ts;
        return WALK_OK;
    }
    *top = (i128)first_ts + max_delta;
    if ((i128)first_ts + min_delta < i64_min || *top > i64_max) REFUSE(WALK_INVALID);
    return WALK_OK;
}

static PyObject *walk_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "walk_records(data, count, first_ts, require_keys)");
        return NULL;
    }
    long long count = PyLong_AsLongLong(args[1]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    long long first_ts = PyLong_AsLongLong(args[2]);
    if (first_ts == -1 && PyErr_Occurred()) return NULL;
    int require_keys = PyObject_IsTrue(args[3]);
    if (require_keys < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    i128 top = 0;
    long long at = -1;
    int kind = walk(view.buf, view.len, count, (int64_t)first_ts, require_keys, &top, &at);
    PyBuffer_Release(&view);
    if (kind != WALK_OK) return Py_BuildValue("(iL)", kind, at);
    if (top >= (i128)INT64_MIN && top <= (i128)INT64_MAX)
        return Py_BuildValue("(iL)", WALK_OK, (long long)top);
    /* only without records (a negative count): first_ts + INT64_MIN, as Python computes */
    PyObject *a = PyLong_FromLongLong(first_ts), *b = PyLong_FromLongLong(INT64_MIN);
    PyObject *sum = (a && b) ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (sum == NULL) return NULL;
    return Py_BuildValue("(iN)", WALK_OK, sum);
}
#endif /* __SIZEOF_INT128__ */

static PyMethodDef methods[] = {
    {"decode_plain", (PyCFunction)(void (*)(void))decode_plain, METH_FASTCALL,
     "decode_plain(buf, pos, crc32c, offsets, timestamps, keys, values) -> position\n\n"
     "Append the records of the plain batches from byte pos on; return where it stopped."},
#ifdef HAVE_WALK
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL,
     "walk_records(data, count, first_ts, require_keys) -> (kind, value)\n\n"
     "storage._validation's record walk: (0, max timestamp), (1, record) corrupt, "
     "(2, record) invalid."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._fastrecords",
    "Plain RecordBatch v2 batches into columns (see storage._records.decode_columns).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__fastrecords(void) { return PyModule_Create(&module); }
