/*
 * Optional C accelerator for broker/protocol/message.py (as aiokafka ships a
 * Cython one). Same byte layout, same results as the pure-Python code, which
 * stays the reference and the fallback; tests run both.
 *
 *   walk(buf, max_message_bytes, verify_crc)
 *       -> (status, pos, count, first_ts, max_ts, wrappers)
 *       Walks whole messages from the start. status 0: all of buf is whole
 *       valid messages; otherwise it stopped at byte `pos` for reason
 *       `status` (see WALK_* below). `wrappers` counts compressed wrappers.
 *   decode(buf, base_offset, verify_crc, topic, partition, message_type)
 *       -> (messages, pos, status)
 *       Decodes uncompressed messages into `message_type` instances (a
 *       7-field NamedTuple); stops at the end, at a partial message
 *       (status 0), at a compressed wrapper (status WALK_WRAPPER, pos at it)
 *       or at an invalid message (status > 0, pos at it).
 *   produce_frame(payload, max_message_bytes) -> (...) or None
 *       The broker's fast path for produce requests (see the function).
 *   encode_values(values, timestamps) -> bytes
 *       Key-less messages; `timestamps` is one int for all, or one per value.
 *   single_frames(middle, first_correlation_id, values, timestamps) -> bytes
 *       The producer's batch-1 hot path (see the function).
 *   route(buf, nparts) -> None or (parts, counts, unkeyed, unkeyed_count)
 *       The mirror's re-framing of whole messages by key (see the function).
 *   crc32(data, crc=0) -> int, has_clmul() -> bool
 *       zlib's CRC-32 as this module computes it (see "CRC-32" below).
 *
 * Never touches sockets or files; holds no state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

enum {
    WALK_OK = 0,
    WALK_PARTIAL = 1,      /* fewer bytes than a header, or length runs past the end */
    WALK_BAD_LENGTH = 2,   /* length < 18 */
    WALK_TOO_LARGE = 3,
    WALK_BAD_CRC = 4,
    WALK_BAD_MAGIC = 5,    /* magic != 0 or unknown attribute bits */
    WALK_BAD_KEY = 6,      /* key length out of range */
    WALK_WRAPPER = 7,      /* decode only: a compressed wrapper starts here */
};

#define HEADER 22

/* ------------------------------------------------------------------ CRC-32
 * zlib's CRC-32 (the one the format uses: polynomial 0x104C11DB7, reflected,
 * initial and final value inverted), written for this project, two ways:
 *
 * - slicing-by-8: eight 256-entry tables made at import from the
 *   polynomial; eight bytes a step. Every CPU; also for short buffers and
 *   the tails of long ones.
 * - carry-less multiplication (PCLMULQDQ, checked at run time): the buffer
 *   is folded 64 bytes a step in four 128-bit lanes, the lanes into one,
 *   then 16 bytes a step; the last 128 bits and the tail go through the
 *   tables. The math and the constants' derivation are in
 *   scripts/crc32_constants.py (Gopal et al., Intel 2009), which prints the
 *   CRC_FOLD* literals below; tests/protocol/test_crc32.py checks that they
 *   still agree, and holds both paths equal to zlib.crc32.
 *
 * Thread-safe: the tables and the CPU flag are written once, at import. */
#define CRC_FOLD4_LOW UINT64_C(0x653d982200000000)
#define CRC_FOLD4_HIGH UINT64_C(0xcad38e8f00000000)
#define CRC_FOLD1_LOW UINT64_C(0x65673b4600000000)
#define CRC_FOLD1_HIGH UINT64_C(0x9ba54c6f00000000)
#define CRC_CLMUL_MIN 64           /* shorter buffers: the tables are as fast */

static uint32_t crc_table[8][256];
static int cpu_has_clmul = 0;

static void crc_make_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

/* The register (already inverted) through `len` bytes, eight at a time. */
static uint32_t crc_slice8(uint32_t reg, const unsigned char *p, size_t len) {
    while (len && ((uintptr_t)p & 7)) {
        reg = crc_table[0][(reg ^ *p++) & 0xFF] ^ (reg >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= reg;
        reg = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
              crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) reg = crc_table[0][(reg ^ *p++) & 0xFF] ^ (reg >> 8);
    return reg;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SAMSA_HAVE_CLMUL 1

/* block * x^D mod-P-equivalent, D given by the constants (see the script). */
__attribute__((target("pclmul,sse2")))
static inline __m128i crc_fold(__m128i block, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(block, k, 0x00),
                         _mm_clmulepi64_si128(block, k, 0x11));
}

/* The register (inverted) through `len` >= CRC_CLMUL_MIN bytes. */
__attribute__((target("pclmul,sse2")))
static uint32_t crc_clmul(uint32_t reg, const unsigned char *p, size_t len) {
    const __m128i k4 = _mm_set_epi64x((long long)CRC_FOLD4_HIGH, (long long)CRC_FOLD4_LOW);
    const __m128i k1 = _mm_set_epi64x((long long)CRC_FOLD1_HIGH, (long long)CRC_FOLD1_LOW);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)reg));   /* the register enters the data */
    p += 64;
    len -= 64;
    while (len >= 64) {
        x0 = _mm_xor_si128(crc_fold(x0, k4), _mm_loadu_si128((const __m128i *)p));
        x1 = _mm_xor_si128(crc_fold(x1, k4), _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = _mm_xor_si128(crc_fold(x2, k4), _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = _mm_xor_si128(crc_fold(x3, k4), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }
    x0 = _mm_xor_si128(crc_fold(x0, k1), x1);
    x0 = _mm_xor_si128(crc_fold(x0, k1), x2);
    x0 = _mm_xor_si128(crc_fold(x0, k1), x3);
    while (len >= 16) {
        x0 = _mm_xor_si128(crc_fold(x0, k1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    unsigned char last[16];
    _mm_storeu_si128((__m128i *)last, x0);
    /* from a zero register the tables compute exactly last * x^32 mod P */
    return crc_slice8(crc_slice8(0, last, 16), p, len);
}

static void detect_cpu(void) {
    __builtin_cpu_init();
    cpu_has_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
}
#else
static uint32_t crc_clmul(uint32_t reg, const unsigned char *p, size_t len) {
    return crc_slice8(reg, p, len);
}
static void detect_cpu(void) {}
#endif

/* crc32(crc, p, len) as zlib computes it. Thread-safe. */
static inline uint32_t fast_crc32(uint32_t crc, const unsigned char *p, size_t len) {
    uint32_t reg = ~crc;
    if (cpu_has_clmul && len >= CRC_CLMUL_MIN) return ~crc_clmul(reg, p, len);
    return ~crc_slice8(reg, p, len);
}

/* Every timestamp must be an int (or an int subclass) before any is read:
   PyLong_AsLongLong on anything else calls its __index__, Python code that
   could change the list whose item pointers the caller holds (borrowed, from
   PySequence_Fast_ITEMS). With ints it runs no Python code. */
static int check_int_items(PyObject **items, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyLong_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError, "timestamps must be ints");
            return -1;
        }
    }
    return 0;
}

/* crc32(data, crc=0, path=0): the module's CRC-32 (must equal zlib.crc32).
   path 0: as the codec does; 1: the tables only; 2: the carry-less
   multiplication wherever the buffer is long enough (ValueError without the
   instruction). The tests force each. */
static PyObject *py_crc32(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    unsigned int crc = 0;
    int path = 0;
    if (!PyArg_ParseTuple(args, "y*|Ii", &view, &crc, &path)) return NULL;
    if (path < 0 || path > 2 || (path == 2 && !cpu_has_clmul)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, path == 2 ? "this CPU has no PCLMULQDQ"
                                                    : "path must be 0, 1 or 2");
        return NULL;
    }
    uint32_t got;
    const unsigned char *p = view.buf;
    size_t len = (size_t)view.len;
    Py_BEGIN_ALLOW_THREADS
    if (path == 0) got = fast_crc32((uint32_t)crc, p, len);
    else if (path == 1 || len < CRC_CLMUL_MIN) got = ~crc_slice8(~(uint32_t)crc, p, len);
    else got = ~crc_clmul(~(uint32_t)crc, p, len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(got);
}

static inline uint32_t rd32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int64_t rd64(const unsigned char *p) {
    return (int64_t)(((uint64_t)rd32(p) << 32) | rd32(p + 4));
}
static inline void wr32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}
static inline void wr64(unsigned char *p, uint64_t v) {
    wr32(p, (uint32_t)(v >> 32)); wr32(p + 4, (uint32_t)v);
}

/* Checks one message at p (avail bytes left); returns a WALK_* code and its size. */
static inline int check_one(const unsigned char *p, Py_ssize_t avail, Py_ssize_t max_bytes,
                            int verify, Py_ssize_t *size_out) {
    if (avail < HEADER) return WALK_PARTIAL;
    int32_t length = (int32_t)rd32(p);
    if (length < 18) return WALK_BAD_LENGTH;
    if ((Py_ssize_t)length + 4 > avail) return WALK_PARTIAL;
    if ((Py_ssize_t)length + 4 > max_bytes) return WALK_TOO_LARGE;
    if (verify) {
        uint32_t crc = rd32(p + 4);
        uint32_t got = fast_crc32(0, p + 8, (size_t)(length - 4));
        if (got != crc) return WALK_BAD_CRC;
    }
    if (p[8] != 0 || (p[9] & ~0x07)) return WALK_BAD_MAGIC;
    int32_t key_length = (int32_t)rd32(p + 18);
    if (key_length < -1 || key_length > length - 18) return WALK_BAD_KEY;
    *size_out = (Py_ssize_t)length + 4;
    return WALK_OK;
}

static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t max_bytes;
    int verify;
    if (!PyArg_ParseTuple(args, "y*np", &view, &max_bytes, &verify)) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len, pos = 0, count = 0, wrappers = 0, size = 0;
    long long first_ts = -1, max_ts = -1;
    int status = WALK_OK;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        status = check_one(buf + pos, end - pos, max_bytes, verify, &size);
        if (status != WALK_OK) break;
        long long ts = rd64(buf + pos + 10);
        if (first_ts < 0) first_ts = ts;
        if (ts > max_ts) max_ts = ts;
        if (buf[pos + 9]) wrappers++;
        count++;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("inLLLn", status, pos, (long long)count, first_ts, max_ts, wrappers);
}

static PyObject *decode(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    long long base;
    int verify;
    PyObject *topic, *partition, *type;
    if (!PyArg_ParseTuple(args, "y*LpOOO", &view, &base, &verify, &topic, &partition, &type))
        return NULL;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "message_type must be a tuple subclass");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)type;
    /* A message holding only a str, ints, bytes and None can never be part
       of a reference cycle: it is untracked by the garbage collector, as
       CPython untracks such plain tuples, so that the young-generation
       collections that ~1000 new messages per fetch set off have nothing to
       walk (they took ~40% of a consumer's decoding time). */
    int untrack = PyType_IS_GC(tp) && PyUnicode_CheckExact(topic) && PyLong_CheckExact(partition);
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len, pos = 0, size = 0;
    /* offsets are base + position: refuse a base that would overflow int64
       (signed overflow is undefined behaviour) */
    if (base > LLONG_MAX - (long long)end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "base_offset out of range");
        return NULL;
    }
    int status = WALK_OK;
    /* fewer allocations per message: a message's offset is the previous
       one's next_offset (the same int object), and runs of equal timestamps
       (a producer stamps a whole batch at once) share one int */
    PyObject *carry = NULL, *last_ts = NULL;
    long long last_ts_value = 0;
    PyObject *list = PyList_New(0);
    if (!list) goto fail;
    while (pos < end) {
        const unsigned char *p = buf + pos;
        status = check_one(p, end - pos, PY_SSIZE_T_MAX, verify, &size);
        if (status == WALK_PARTIAL) { status = WALK_OK; break; }
        if (status != WALK_OK) break;
        if (p[9]) { status = WALK_WRAPPER; break; }
        int32_t key_length = (int32_t)rd32(p + 18);
        PyObject *key, *value;
        if (key_length < 0) {
            key = Py_None; Py_INCREF(key);
            value = PyBytes_FromStringAndSize((const char *)p + HEADER, size - HEADER);
        } else {
            key = PyBytes_FromStringAndSize((const char *)p + HEADER, key_length);
            value = PyBytes_FromStringAndSize((const char *)p + HEADER + key_length,
                                              size - HEADER - key_length);
        }
        PyObject *off = carry ? carry : PyLong_FromLongLong(base + pos);
        carry = NULL;
        PyObject *next = PyLong_FromLongLong(base + pos + size);
        long long ts_value = rd64(p + 10);
        PyObject *ts;
        if (last_ts != NULL && ts_value == last_ts_value) {
            ts = last_ts;
            Py_INCREF(ts);
        } else {
            ts = PyLong_FromLongLong(ts_value);
            if (ts) {
                Py_XSETREF(last_ts, ts);
                Py_INCREF(ts);
                last_ts_value = ts_value;
            }
        }
        /* tp_alloc of a tuple subclass (PyType_GenericAlloc) zero-fills the
           items, so the new object is valid (and traversable by the GC)
           before they are set; PyTuple_SET_ITEM on it is how CPython 3.11 -
           3.13 build tuples of subclasses too (structseq, namedtuple's C
           fast path). */
        PyObject *m = tp->tp_alloc(tp, 7);
        if (!key || !value || !off || !next || !ts || !m) {
            Py_XDECREF(key); Py_XDECREF(value); Py_XDECREF(off); Py_XDECREF(next);
            Py_XDECREF(ts); Py_XDECREF(m);
            goto fail;
        }
        Py_INCREF(topic); Py_INCREF(partition);
        PyTuple_SET_ITEM(m, 0, topic);
        PyTuple_SET_ITEM(m, 1, partition);
        PyTuple_SET_ITEM(m, 2, off);
        PyTuple_SET_ITEM(m, 3, next);
        PyTuple_SET_ITEM(m, 4, ts);
        PyTuple_SET_ITEM(m, 5, key);
        PyTuple_SET_ITEM(m, 6, value);
        if (untrack && PyObject_GC_IsTracked(m)) PyObject_GC_UnTrack(m);
        carry = next;
        Py_INCREF(carry);
        int rc = PyList_Append(list, m);
        Py_DECREF(m);
        if (rc < 0) goto fail;
        pos += size;
    }
    Py_XDECREF(carry);
    Py_XDECREF(last_ts);
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("Oni", list, pos, status);
    Py_DECREF(list);
    return result;
fail:
    Py_XDECREF(carry);
    Py_XDECREF(last_ts);
    Py_XDECREF(list);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *encode_values(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *values, *timestamps;
    if (!PyArg_ParseTuple(args, "OO", &values, &timestamps)) return NULL;
    long long ts = 0;
    PyObject *ts_seq = NULL;
    if (PyLong_Check(timestamps)) {
        ts = PyLong_AsLongLong(timestamps);
        if (ts == -1 && PyErr_Occurred()) return NULL;
    } else if (PyIndex_Check(timestamps) && !PySequence_Check(timestamps)) {
        PyErr_SetString(PyExc_TypeError, "timestamps must be an int or a sequence of ints");
        return NULL;
    } else {
        ts_seq = PySequence_Fast(timestamps, "timestamps must be an int or a sequence of ints");
        if (!ts_seq) return NULL;
    }
    PyObject *seq = PySequence_Fast(values, "values must be a sequence of bytes");
    if (!seq) { Py_XDECREF(ts_seq); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject **ts_items = ts_seq ? PySequence_Fast_ITEMS(ts_seq) : NULL;
    PyObject *out = NULL;
    if (ts_seq && PySequence_Fast_GET_SIZE(ts_seq) != n) {
        PyErr_SetString(PyExc_ValueError, "values and timestamps differ in length");
        goto done;
    }
    if (ts_seq && check_int_items(ts_items, n) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError, "values must be bytes");
            goto done;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(items[i]);
        if (len > INT32_MAX - HEADER || total > PY_SSIZE_T_MAX - HEADER - len) {
            PyErr_SetString(PyExc_ValueError, "value too large");
            goto done;
        }
        total += HEADER + len;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char prefix[14];
    prefix[0] = 0; prefix[1] = 0;
    wr32(prefix + 10, 0xFFFFFFFFu);
    long long last_ts = ts;
    wr64(prefix + 2, (uint64_t)ts);
    uint32_t prefix_crc = fast_crc32(0, prefix, 14);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ts_items) {
            long long t = PyLong_AsLongLong(ts_items[i]);
            if (t == -1 && PyErr_Occurred()) { Py_CLEAR(out); goto done; }
            if (i == 0 || t != last_ts) {
                last_ts = t;
                wr64(prefix + 2, (uint64_t)t);
                prefix_crc = fast_crc32(0, prefix, 14);
            }
        }
        Py_ssize_t len = PyBytes_GET_SIZE(items[i]);
        const unsigned char *v = (const unsigned char *)PyBytes_AS_STRING(items[i]);
        wr32(w, (uint32_t)(len + 18));
        wr32(w + 4, fast_crc32((uint32_t)prefix_crc, v, (size_t)len));
        memcpy(w + 8, prefix, 14);
        memcpy(w + HEADER, v, len);
        w += HEADER + len;
    }
done:
    Py_DECREF(seq);
    Py_XDECREF(ts_seq);
    return out;
}

/* single_frames(middle, first_correlation_id, values, timestamps) -> bytes
 *   The produce request frames of one key-less message each (the producer
 *   with batch_size=1), back to back: for value i, the frame
 *   size | api_key 0 | version 0 | correlation id (first + i) & 0x7FFFFFFF |
 *   middle | message set size | the message (magic 0, attributes 0,
 *   timestamps[i], no key, the value). `middle` is the encoded client id,
 *   acks, timeout, entry count 1, topic and partition; the same bytes as
 *   ProduceFrameEncoder.frame() would give, one Python call for all. */
static PyObject *single_frames(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer mid;
    long long first_cid;
    PyObject *values, *timestamps;
    if (!PyArg_ParseTuple(args, "y*LOO", &mid, &first_cid, &values, &timestamps)) return NULL;
    PyObject *out = NULL, *seq = NULL, *ts_seq = NULL;
    seq = PySequence_Fast(values, "values must be a sequence of bytes");
    if (!seq) goto done;
    ts_seq = PySequence_Fast(timestamps, "timestamps must be a sequence of ints");
    if (!ts_seq) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0;
    if (PySequence_Fast_GET_SIZE(ts_seq) != n) {
        PyErr_SetString(PyExc_ValueError, "values and timestamps differ in length");
        goto done;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq), **ts_items = PySequence_Fast_ITEMS(ts_seq);
    if (check_int_items(ts_items, n) < 0) goto done;
    Py_ssize_t fixed = 4 + 8 + mid.len + 4 + HEADER;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError, "values must be bytes");
            goto done;
        }
        if (PyBytes_GET_SIZE(items[i]) > INT32_MAX - fixed
                || total > PY_SSIZE_T_MAX - fixed - PyBytes_GET_SIZE(items[i])) {
            PyErr_SetString(PyExc_ValueError, "value too large");
            goto done;
        }
        total += fixed + PyBytes_GET_SIZE(items[i]);
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long ts = PyLong_AsLongLong(ts_items[i]);
        if (ts == -1 && PyErr_Occurred()) { Py_CLEAR(out); goto done; }
        Py_ssize_t len = PyBytes_GET_SIZE(items[i]);
        const unsigned char *v = (const unsigned char *)PyBytes_AS_STRING(items[i]);
        wr32(w, (uint32_t)(fixed - 4 + len));
        wr32(w + 4, 0);                                   /* api key 0, version 0 */
        /* unsigned: first_cid comes from Python and may be near LLONG_MAX */
        wr32(w + 8, (uint32_t)(((unsigned long long)first_cid + (unsigned long long)i)
                               & 0x7FFFFFFFu));
        memcpy(w + 12, mid.buf, mid.len);
        unsigned char *m = w + 12 + mid.len;
        wr32(m, (uint32_t)(HEADER + len));                /* the message set's size */
        m += 4;
        wr32(m, (uint32_t)(len + 18));
        m[8] = 0; m[9] = 0;                               /* magic, attributes */
        wr64(m + 10, (uint64_t)ts);
        wr32(m + 18, 0xFFFFFFFFu);                        /* no key */
        memcpy(m + HEADER, v, len);
        wr32(m + 4, fast_crc32(0, m + 8, (size_t)(len + 14)));
        w = m + HEADER + len;
    }
done:
    PyBuffer_Release(&mid);
    Py_XDECREF(seq);
    Py_XDECREF(ts_seq);
    return out;
}

static inline int all_ascii(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) if (p[i] & 0x80) return 0;
    return 1;
}

/* produce_frame(payload, max_message_bytes)
 *   -> (correlation_id, acks, timeout_ms,
 *       [(topic, partition, start, end, count, first_ts, max_ts), ...])
 *   or None when the frame is anything but a plain, valid version-0 produce
 *   request (not produce, malformed, non-ASCII names, a bad or compressed
 *   message set): the Python decoder then handles it, errors included. */
static PyObject *produce_frame(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "y*n", &view, &max_bytes)) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t end = view.len, pos;
    PyObject *entries = NULL, *result = NULL;
    if (end < 10) goto none;
    int16_t api_key = (int16_t)((b[0] << 8) | b[1]);
    int16_t version = (int16_t)((b[2] << 8) | b[3]);
    int32_t cid = (int32_t)rd32(b + 4);
    int16_t client_len = (int16_t)((b[8] << 8) | b[9]);
    if (api_key != 0 || version != 0 || client_len < -1) goto none;
    pos = 10 + (client_len > 0 ? client_len : 0);
    if (pos + 9 > end || !all_ascii(b + 10, pos - 10)) goto none;
    int acks = (int8_t)b[pos];
    int32_t timeout_ms = (int32_t)rd32(b + pos + 1);
    int32_t count = (int32_t)rd32(b + pos + 5);
    pos += 9;
    /* acks 0..3: Acks NONE, WRITTEN, FLUSHED, ALL (api.py); others go to Python to be refused */
    if (acks < 0 || acks > 3 || count < 0 || (Py_ssize_t)count * 10 > end - pos) goto none;
    entries = PyList_New(0);
    if (!entries) goto fail;
    for (int32_t i = 0; i < count; i++) {
        if (pos + 2 > end) goto none;
        int16_t tlen = (int16_t)((b[pos] << 8) | b[pos + 1]);
        pos += 2;
        if (tlen < 0 || pos + tlen + 8 > end || !all_ascii(b + pos, tlen)) goto none;
        const unsigned char *topic_p = b + pos;
        pos += tlen;
        int32_t partition = (int32_t)rd32(b + pos);
        int32_t size = (int32_t)rd32(b + pos + 4);
        pos += 8;
        if (size < 0 || pos + size > end) goto none;
        /* validate the message set exactly as walk(..., verify=1) does */
        Py_ssize_t p = pos, stop = pos + size, msize = 0, n = 0;
        long long first_ts = -1, max_ts = -1;
        while (p < stop) {
            if (check_one(b + p, stop - p, max_bytes, 1, &msize) != WALK_OK) goto none;
            if (b[p + 9]) goto none;               /* compressed: Python validates deeply */
            long long ts = rd64(b + p + 10);
            if (first_ts < 0) first_ts = ts;
            if (ts > max_ts) max_ts = ts;
            n++;
            p += msize;
        }
        PyObject *topic = PyUnicode_DecodeASCII((const char *)topic_p, tlen, NULL);
        if (!topic) goto fail;
        PyObject *entry = Py_BuildValue("Ninnn" "LL", topic, (int)partition, pos, stop, n,
                                        first_ts, max_ts);
        if (!entry) goto fail;
        int rc = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (rc < 0) goto fail;
        pos = stop;
    }
    if (pos != end) goto none;
    result = Py_BuildValue("iiiO", (int)cid, acks, (int)timeout_ms, entries);
    Py_DECREF(entries);
    PyBuffer_Release(&view);
    return result;
none:
    Py_XDECREF(entries);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(entries);
    PyBuffer_Release(&view);
    return NULL;
}

/* route(buf, nparts) -> None or (parts, counts, unkeyed, unkeyed_count)
 *   The mirror's re-framing: buf holds whole, valid messages (walk() said
 *   so). None when no message has a key (buf can go as it is). Otherwise the
 *   messages split by key, order kept within each: parts[i] the bytes of
 *   every message whose crc32(key) % nparts == i, counts[i] how many of
 *   them; unkeyed the key-less ones. The bytes of each message are copied
 *   unchanged (its CRC still holds). */
static PyObject *route(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t nparts;
    if (!PyArg_ParseTuple(args, "y*n", &view, &nparts)) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len, pos = 0, n = 0;
    PyObject *result = NULL, *parts = NULL, *counts = NULL, *unkeyed = NULL;
    Py_ssize_t *sizes = NULL, *nums = NULL, *fill = NULL;
    int *dest = NULL;
    int keyed = 0;
    if (nparts < 1) {
        PyErr_SetString(PyExc_ValueError, "nparts must be >= 1");
        goto done;
    }
    /* count the messages, check the framing, see whether any has a key */
    while (pos < end) {
        if (end - pos < HEADER) goto bad;
        int32_t length = (int32_t)rd32(buf + pos);
        if (length < 18 || (Py_ssize_t)length + 4 > end - pos) goto bad;
        int32_t key_length = (int32_t)rd32(buf + pos + 18);
        if (key_length < -1 || key_length > length - 18) goto bad;
        if (key_length >= 0) keyed = 1;
        pos += (Py_ssize_t)length + 4;
        n++;
    }
    if (!keyed) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    dest = PyMem_Malloc(sizeof(int) * (size_t)(n ? n : 1));
    sizes = PyMem_Calloc((size_t)nparts + 1, sizeof(Py_ssize_t));
    nums = PyMem_Calloc((size_t)nparts + 1, sizeof(Py_ssize_t));
    fill = PyMem_Calloc((size_t)nparts + 1, sizeof(Py_ssize_t));
    if (!dest || !sizes || !nums || !fill) { PyErr_NoMemory(); goto done; }
    pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t length = (int32_t)rd32(buf + pos);
        int32_t key_length = (int32_t)rd32(buf + pos + 18);
        Py_ssize_t d = nparts;             /* the key-less ones' slot */
        if (key_length >= 0)
            d = (Py_ssize_t)(fast_crc32(0, buf + pos + HEADER, (size_t)key_length)
                             % (uint32_t)nparts);
        dest[i] = (int)d;
        sizes[d] += (Py_ssize_t)length + 4;
        nums[d]++;
        pos += (Py_ssize_t)length + 4;
    }
    parts = PyList_New(nparts);
    counts = PyList_New(nparts);
    if (!parts || !counts) goto done;
    unsigned char **w = PyMem_Calloc((size_t)nparts + 1, sizeof(unsigned char *));
    if (!w) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t d = 0; d <= nparts; d++) {
        PyObject *b = PyBytes_FromStringAndSize(NULL, sizes[d]);
        if (!b) { PyMem_Free(w); goto done; }
        w[d] = (unsigned char *)PyBytes_AS_STRING(b);
        if (d < nparts) {
            PyList_SET_ITEM(parts, d, b);
            PyObject *c = PyLong_FromSsize_t(nums[d]);
            if (!c) { PyMem_Free(w); goto done; }
            PyList_SET_ITEM(counts, d, c);
        } else {
            unkeyed = b;
        }
    }
    pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size = (Py_ssize_t)rd32(buf + pos) + 4;
        memcpy(w[dest[i]] + fill[dest[i]], buf + pos, (size_t)size);
        fill[dest[i]] += size;
        pos += size;
    }
    PyMem_Free(w);
    result = Py_BuildValue("OOOn", parts, counts, unkeyed, nums[nparts]);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "route() needs whole, valid messages");
done:
    Py_XDECREF(parts);
    Py_XDECREF(counts);
    Py_XDECREF(unkeyed);
    PyMem_Free(dest);
    PyMem_Free(sizes);
    PyMem_Free(nums);
    PyMem_Free(fill);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *has_clmul(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(unused)) {
    return PyBool_FromLong(cpu_has_clmul);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Validate/scan whole messages; see the file comment."},
    {"crc32", py_crc32, METH_VARARGS, "crc32(data, crc=0, path=0): zlib's CRC-32 (path 1: tables, 2: PCLMULQDQ)."},
    {"has_clmul", has_clmul, METH_NOARGS, "Whether the CRC-32 uses PCLMULQDQ."},
    {"decode", decode, METH_VARARGS, "Decode uncompressed messages; see the file comment."},
    {"route", route, METH_VARARGS, "Split whole messages by crc32(key) % nparts; see the function."},
    {"encode_values", encode_values, METH_VARARGS, "Encode key-less values."},
    {"single_frames", single_frames, METH_VARARGS,
     "Produce request frames of one key-less message each; see the comment above it."},
    {"produce_frame", produce_frame, METH_VARARGS,
     "Decode and validate a plain produce request; see the comment above it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "C accelerator for the Samsa message codec", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_make_tables();
    detect_cpu();
    return PyModule_Create(&module);
}
