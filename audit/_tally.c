/* audit._tally: the C twin of audit/tally.py (read that file for what a
 * tally is). Same inputs, same results; the tests compare the two.
 *
 * Per call, tallies are accumulated in a small local table of windows (a
 * batch of messages spans few windows) and added to the caller's dict at
 * the end, so the per-message work allocates no Python objects unless ids
 * are deduplicated (then one int per id, added to a set).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FIXED_FIELDS 7   /* count, bytes, no_time, malformed, checksum, unique, unique_checksum */
#define MAX_BOUNDS 64
#define LOCAL_WINDOWS 8
#define ENVELOPE 5
#define ID_BYTES 16
/* 2100-01-01T00:00Z: a timestamp at or after it is not milliseconds (no time); fixed, not
 * relative to now_ms, so that every tier puts a message in the same window (audit/tally.py) */
static const long long MAX_TIME_MS = 4102444800000LL;

typedef struct {
    long long begin;
    unsigned long long f[FIXED_FIELDS + MAX_BOUNDS + 1];
    PyObject *ids;          /* borrowed: the window's id set, when deduplicating */
} Local;

typedef struct {
    Local w[LOCAL_WINDOWS];
    int used;
    int buckets;
} Table;

static uint64_t id_hash(const unsigned char *id) {
    uint64_t a, b;
    memcpy(&a, id, 8);
    memcpy(&b, id + 8, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    a = __builtin_bswap64(a);
    b = __builtin_bswap64(b);
#endif
    uint64_t x = a ^ (b * 0x9E3779B97F4A7C15ULL);
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

/* the varint at *pos (advanced past it); -1 when it runs past end or is too long */
static int varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    while (*pos < end && shift <= 63) {
        unsigned char b = p[(*pos)++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = result;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* the event id's position in an envelope, or -1 when malformed */
static Py_ssize_t id_position(const unsigned char *p, Py_ssize_t end) {
    if (end < ENVELOPE + 3 + ID_BYTES || p[0] != 0)   /* three one-byte varints at least */
        return -1;
    Py_ssize_t pos = ENVELOPE;
    uint64_t zz;
    if (varint(p, &pos, end, &zz) < 0)          /* time_ms */
        return -1;
    for (int i = 0; i < 2; i++) {               /* host, service */
        if (varint(p, &pos, end, &zz) < 0 || (zz & 1))
            return -1;
        uint64_t len = zz >> 1;
        if (len > (uint64_t)(end - pos))
            return -1;
        pos += (Py_ssize_t)len;
    }
    if (pos > end - ID_BYTES)
        return -1;
    return pos;
}

static int flush_table(Table *t, PyObject *acc);


/* ------------------------------------------------------------------ IdSet
 * A set of 64-bit id hashes: open addressing, linear probing, load <= 1/2,
 * 8 bytes a slot. What a tier keeps to count first sightings: a Python set
 * of ints costs ~70 bytes and a PyLong per id, this ~16 bytes and nothing. */
typedef struct {
    PyObject_HEAD
    uint64_t *slots;       /* 0 = empty; the hash 0 is kept in has_zero */
    Py_ssize_t mask;       /* capacity - 1 (a power of two) */
    Py_ssize_t used;
    int has_zero;
} IdSetObject;

static PyTypeObject IdSetType;

static int idset_grow(IdSetObject *s) {
    Py_ssize_t cap = s->slots ? (s->mask + 1) * 2 : 1024;
    uint64_t *slots = PyMem_Calloc((size_t)cap, sizeof(uint64_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (s->slots != NULL) {
        for (Py_ssize_t i = 0; i <= s->mask; i++) {
            uint64_t h = s->slots[i];
            if (h) {
                Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(cap - 1));
                while (slots[j])
                    j = (j + 1) & (cap - 1);
                slots[j] = h;
            }
        }
        PyMem_Free(s->slots);
    }
    s->slots = slots;
    s->mask = cap - 1;
    return 0;
}

/* 1 if added, 0 if it was there, -1 on error */
static int idset_add(IdSetObject *s, uint64_t h) {
    if (h == 0) {
        int added = !s->has_zero;
        s->has_zero = 1;
        return added;
    }
    if (s->slots == NULL || (s->used + 1) * 2 > s->mask + 1) {
        if (idset_grow(s) < 0)
            return -1;
    }
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)s->mask);
    while (s->slots[j]) {
        if (s->slots[j] == h)
            return 0;
        j = (j + 1) & s->mask;
    }
    s->slots[j] = h;
    s->used++;
    return 1;
}

static int idset_has(IdSetObject *s, uint64_t h) {
    if (h == 0)
        return s->has_zero;
    if (s->slots == NULL)
        return 0;
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)s->mask);
    while (s->slots[j]) {
        if (s->slots[j] == h)
            return 1;
        j = (j + 1) & s->mask;
    }
    return 0;
}

static void idset_dealloc(IdSetObject *s) {
    PyMem_Free(s->slots);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static Py_ssize_t idset_len(IdSetObject *s) { return s->used + s->has_zero; }

static int idset_contains(IdSetObject *s, PyObject *key) {
    unsigned long long h = PyLong_AsUnsignedLongLong(key);
    if (h == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return idset_has(s, h);
}

static PyObject *idset_py_add(IdSetObject *s, PyObject *key) {
    unsigned long long h = PyLong_AsUnsignedLongLong(key);
    if (h == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    int r = idset_add(s, h);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyObject *idset_to_set(IdSetObject *s, PyObject *Py_UNUSED(unused)) {
    PyObject *out = PySet_New(NULL);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; s->slots && i <= s->mask; i++) {
        if (!s->slots[i])
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(s->slots[i]);
        if (v == NULL || PySet_Add(out, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    if (s->has_zero) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL || PySet_Add(out, zero) < 0) {
            Py_XDECREF(zero);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(zero);
    }
    return out;
}

static PyObject *idset_sizeof(IdSetObject *s, PyObject *Py_UNUSED(unused)) {
    Py_ssize_t slots = s->slots ? s->mask + 1 : 0;
    return PyLong_FromSsize_t((Py_ssize_t)sizeof(*s) + slots * (Py_ssize_t)sizeof(uint64_t));
}

static PyMethodDef idset_methods[] = {
    {"add", (PyCFunction)idset_py_add, METH_O, "add(hash) -> True if it was not there"},
    {"to_set", (PyCFunction)idset_to_set, METH_NOARGS, "the hashes as a Python set"},
    {"__sizeof__", (PyCFunction)idset_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods idset_as_sequence = {
    .sq_length = (lenfunc)idset_len,
    .sq_contains = (objobjproc)idset_contains,
};

static PyTypeObject IdSetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "audit._tally.IdSet",
    .tp_doc = "A set of 64-bit id hashes (what a tier keeps to count first sightings).",
    .tp_basicsize = sizeof(IdSetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)idset_dealloc,
    .tp_as_sequence = &idset_as_sequence,
    .tp_methods = idset_methods,
};

/* the window's id set in id_sets (made on its first id, as the reference does):
 * an IdSet made here, or a Python set the caller put there */
static PyObject *window_ids(Local *w, PyObject *id_sets) {
    if (w->ids != NULL)
        return w->ids;
    PyObject *key = PyLong_FromLongLong(w->begin);
    if (key == NULL)
        return NULL;
    PyObject *set = PyDict_GetItemWithError(id_sets, key);
    if (set == NULL) {
        if (PyErr_Occurred() || (set = PyType_GenericNew(&IdSetType, NULL, NULL)) == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        int r = PyDict_SetItem(id_sets, key, set);
        Py_DECREF(set);     /* the dict holds it */
        if (r < 0) {
            Py_DECREF(key);
            return NULL;
        }
    } else if (!PySet_Check(set) && !PyObject_TypeCheck(set, &IdSetType)) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_TypeError, "id_sets values must be IdSets or sets");
        return NULL;
    }
    Py_DECREF(key);
    w->ids = set;     /* borrowed: id_sets holds it */
    return set;
}

static Local *window(Table *t, long long begin, PyObject *acc) {
    for (int i = 0; i < t->used; i++)
        if (t->w[i].begin == begin)
            return &t->w[i];
    if (t->used == LOCAL_WINDOWS && flush_table(t, acc) < 0)
        return NULL;
    Local *w = &t->w[t->used++];
    memset(w, 0, sizeof(*w));
    w->begin = begin;
    return w;
}

/* add the local tallies into acc[begin] (lists of ints) and empty the table */
static int flush_table(Table *t, PyObject *acc) {
    int n = FIXED_FIELDS + t->buckets;
    for (int i = 0; i < t->used; i++) {
        Local *w = &t->w[i];
        PyObject *key = PyLong_FromLongLong(w->begin);
        if (key == NULL)
            return -1;
        PyObject *tally = PyDict_GetItemWithError(acc, key);
        if (tally == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                return -1;
            }
            tally = PyList_New(n);
            if (tally == NULL) {
                Py_DECREF(key);
                return -1;
            }
            for (int j = 0; j < n; j++)
                PyList_SET_ITEM(tally, j, PyLong_FromLong(0));
            int r = PyDict_SetItem(acc, key, tally);
            Py_DECREF(tally);
            if (r < 0) {
                Py_DECREF(key);
                return -1;
            }
        }
        Py_DECREF(key);
        if (!PyList_Check(tally) || PyList_GET_SIZE(tally) != n) {
            PyErr_SetString(PyExc_ValueError, "a tally has the wrong length for these bounds");
            return -1;
        }
        for (int j = 0; j < n; j++) {
            if (w->f[j] == 0)
                continue;
            PyObject *old = PyList_GET_ITEM(tally, j);
            unsigned long long sum;
            if (j == 4 || j == 6) {       /* the checksums: modulo 2^64 */
                unsigned long long o = PyLong_AsUnsignedLongLong(old);
                if (o == (unsigned long long)-1 && PyErr_Occurred())
                    return -1;
                sum = o + w->f[j];
                PyObject *v = PyLong_FromUnsignedLongLong(sum);
                if (v == NULL)
                    return -1;
                PyList_SetItem(tally, j, v);
                continue;
            }
            PyObject *add = PyLong_FromUnsignedLongLong(w->f[j]);
            if (add == NULL)
                return -1;
            PyObject *v = PyNumber_Add(old, add);
            Py_DECREF(add);
            if (v == NULL)
                return -1;
            PyList_SetItem(tally, j, v);
        }
    }
    t->used = 0;
    return 0;
}

static int fold_bytes(Table *t, PyObject *acc, PyObject *id_sets, const char *p,
                      Py_ssize_t len, long long ts, long long window_ms, long long now_ms,
                      const long long *bounds, int nbounds);

static int fold(Table *t, PyObject *acc, PyObject *id_sets, PyObject *value, long long ts,
                long long window_ms, long long now_ms, const long long *bounds, int nbounds) {
    char *p;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(value, &p, &len) < 0)
        return -1;
    return fold_bytes(t, acc, id_sets, p, len, ts, window_ms, now_ms, bounds, nbounds);
}

static int fold_bytes(Table *t, PyObject *acc, PyObject *id_sets, const char *p,
                      Py_ssize_t len, long long ts, long long window_ms, long long now_ms,
                      const long long *bounds, int nbounds) {
    long long begin;
    int bucket = -1, no_time = 0;
    if (ts > 0 && ts < MAX_TIME_MS) {
        begin = ts - ts % window_ms;
        long long latency = now_ms - ts;
        bucket = 0;
        if (latency > 0) {
            int lo = 0, hi = nbounds;           /* first bound >= latency */
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (bounds[mid] < latency)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            bucket = lo;
        }
    } else {
        begin = now_ms - now_ms % window_ms;
        no_time = 1;
    }
    Local *w = window(t, begin, acc);
    if (w == NULL)
        return -1;
    w->f[0] += 1;
    w->f[1] += (unsigned long long)len;
    w->f[2] += no_time;
    if (bucket >= 0)
        w->f[FIXED_FIELDS + bucket] += 1;
    Py_ssize_t at = id_position((const unsigned char *)p, len);
    if (at < 0) {
        w->f[3] += 1;
        return 0;
    }
    uint64_t h = id_hash((const unsigned char *)p + at);
    w->f[4] += h;
    if (id_sets != NULL) {
        PyObject *ids = window_ids(w, id_sets);
        if (ids == NULL)
            return -1;
        if (PyObject_TypeCheck(ids, &IdSetType)) {
            int added = idset_add((IdSetObject *)ids, h);
            if (added < 0)
                return -1;
            if (added) {
                w->f[5] += 1;
                w->f[6] += h;
            }
            return 0;
        }
        PyObject *key = PyLong_FromUnsignedLongLong(h);
        if (key == NULL)
            return -1;
        Py_ssize_t before = PySet_GET_SIZE(ids);
        int r = PySet_Add(ids, key);
        Py_DECREF(key);
        if (r < 0)
            return -1;
        if (PySet_GET_SIZE(ids) != before) {
            w->f[5] += 1;
            w->f[6] += h;
        }
    }
    return 0;
}

static int parse_common(PyObject *acc, PyObject *bounds_obj, PyObject *id_sets,
                        long long window_ms, long long *bounds, int *nbounds) {
    if (!PyDict_Check(acc)) {
        PyErr_SetString(PyExc_TypeError, "acc must be a dict");
        return -1;
    }
    if (id_sets != Py_None && !PyDict_Check(id_sets)) {
        PyErr_SetString(PyExc_TypeError, "id_sets must be a dict or None");
        return -1;
    }
    if (window_ms <= 0) {
        PyErr_SetString(PyExc_ValueError, "window_ms must be positive");
        return -1;
    }
    PyObject *seq = PySequence_Fast(bounds_obj, "bounds must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_BOUNDS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "at most %d latency bounds", MAX_BOUNDS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        bounds[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (bounds[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *nbounds = (int)n;
    return 0;
}

static PyObject *tally_values(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *acc, *values, *timestamps, *bounds_obj, *id_sets = Py_None;
    long long window_ms, now_ms;
    if (!PyArg_ParseTuple(args, "OOOLLO|O", &acc, &values, &timestamps, &window_ms, &now_ms,
                          &bounds_obj, &id_sets))
        return NULL;
    long long bounds[MAX_BOUNDS];
    int nbounds;
    if (parse_common(acc, bounds_obj, id_sets, window_ms, bounds, &nbounds) < 0)
        return NULL;
    if (!PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "values must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    int shared = PyLong_CheckExact(timestamps);
    long long shared_ts = 0;
    if (shared) {
        shared_ts = PyLong_AsLongLong(timestamps);
        if (shared_ts == -1 && PyErr_Occurred())
            return NULL;
    } else if (!PyList_Check(timestamps) || PyList_GET_SIZE(timestamps) != n) {
        PyErr_SetString(PyExc_ValueError, "values and timestamps differ in length");
        return NULL;
    }
    Table t;
    t.used = 0;
    t.buckets = nbounds + 1;
    PyObject *sets = id_sets == Py_None ? NULL : id_sets;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long ts = shared_ts;
        if (!shared) {
            /* exact ints only: no __index__ may run and change the lists under us */
            PyObject *ts_obj = PyList_GET_ITEM(timestamps, i);
            if (!PyLong_CheckExact(ts_obj)) {
                PyErr_SetString(PyExc_TypeError, "timestamps must be ints");
                return NULL;
            }
            ts = PyLong_AsLongLong(ts_obj);
            if (ts == -1 && PyErr_Occurred())
                return NULL;
        }
        if (fold(&t, acc, sets, PyList_GET_ITEM(values, i), ts, window_ms, now_ms, bounds,
                 nbounds) < 0)
            return NULL;
    }
    if (flush_table(&t, acc) < 0)
        return NULL;
    return PyLong_FromSsize_t(n);
}

static PyObject *tally_messages(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *acc, *messages, *bounds_obj, *id_sets = Py_None;
    long long window_ms, now_ms;
    if (!PyArg_ParseTuple(args, "OOLLO|O", &acc, &messages, &window_ms, &now_ms, &bounds_obj,
                          &id_sets))
        return NULL;
    long long bounds[MAX_BOUNDS];
    int nbounds;
    if (parse_common(acc, bounds_obj, id_sets, window_ms, bounds, &nbounds) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(messages, "messages must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Table t;
    t.used = 0;
    t.buckets = nbounds + 1;
    PyObject *sets = id_sets == Py_None ? NULL : id_sets;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < 7) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "messages must be Message tuples");
            return NULL;
        }
        PyObject *ts_obj = PyTuple_GET_ITEM(m, 4);
        if (!PyLong_CheckExact(ts_obj)) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "a message timestamp must be an int");
            return NULL;
        }
        long long ts = PyLong_AsLongLong(ts_obj);
        if (ts == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        if (fold(&t, acc, sets, PyTuple_GET_ITEM(m, 6), ts, window_ms, now_ms, bounds,
                 nbounds) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    if (flush_table(&t, acc) < 0)
        return NULL;
    return PyLong_FromSsize_t(n);
}

/* tally_message_set(acc, buf, window_ms, now_ms, bounds, id_sets=None)
 *   As tally_values, from the values and timestamps of the whole,
 *   uncompressed messages of `buf` (a fetched message set, not decoded: the
 *   mirror's forwarding path). Layout of a message: length:int32 crc:int32
 *   magic:int8 attributes:int8 timestamp:int64 key_length:int32 key value;
 *   the value is the rest. A compressed wrapper or bad framing is a
 *   ValueError (nothing is folded then). */
static PyObject *tally_message_set(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *acc, *bounds_obj, *id_sets = Py_None;
    Py_buffer view;
    long long window_ms, now_ms;
    if (!PyArg_ParseTuple(args, "Oy*LLO|O", &acc, &view, &window_ms, &now_ms, &bounds_obj,
                          &id_sets))
        return NULL;
    long long bounds[MAX_BOUNDS];
    int nbounds;
    PyObject *result = NULL;
    if (parse_common(acc, bounds_obj, id_sets, window_ms, bounds, &nbounds) < 0)
        goto done;
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len, pos = 0, n = 0;
    /* check the whole set first: a bad one folds nothing */
    while (pos < end) {
        if (end - pos < 22) goto bad;
        int32_t length = (int32_t)(((uint32_t)buf[pos] << 24) | ((uint32_t)buf[pos + 1] << 16)
                                   | ((uint32_t)buf[pos + 2] << 8) | buf[pos + 3]);
        if (length < 18 || (Py_ssize_t)length + 4 > end - pos) goto bad;
        if (buf[pos + 9] & 0x07) goto bad;
        const unsigned char *k = buf + pos + 18;
        int32_t key_length = (int32_t)(((uint32_t)k[0] << 24) | ((uint32_t)k[1] << 16)
                                       | ((uint32_t)k[2] << 8) | k[3]);
        if (key_length < -1 || key_length > length - 18) goto bad;
        pos += (Py_ssize_t)length + 4;
        n++;
    }
    Table t;
    t.used = 0;
    t.buckets = nbounds + 1;
    PyObject *sets = id_sets == Py_None ? NULL : id_sets;
    pos = 0;
    while (pos < end) {
        const unsigned char *m = buf + pos;
        int32_t length = (int32_t)(((uint32_t)m[0] << 24) | ((uint32_t)m[1] << 16)
                                   | ((uint32_t)m[2] << 8) | m[3]);
        uint64_t ts = 0;
        for (int i = 0; i < 8; i++)
            ts = (ts << 8) | m[10 + i];
        int32_t key_length = (int32_t)(((uint32_t)m[18] << 24) | ((uint32_t)m[19] << 16)
                                       | ((uint32_t)m[20] << 8) | m[21]);
        Py_ssize_t value_at = 22 + (key_length > 0 ? key_length : 0);
        Py_ssize_t value_len = (Py_ssize_t)length + 4 - value_at;
        if (fold_bytes(&t, acc, sets, (const char *)m + value_at, value_len, (long long)ts,
                       window_ms, now_ms, bounds, nbounds) < 0)
            goto done;
        pos += (Py_ssize_t)length + 4;
    }
    if (flush_table(&t, acc) < 0)
        goto done;
    result = PyLong_FromSsize_t(n);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError,
                    "tally_message_set() needs whole, uncompressed messages");
done:
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_id_hash(PyObject *Py_UNUSED(self), PyObject *arg) {
    char *p;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(arg, &p, &len) < 0)
        return NULL;
    if (len != ID_BYTES) {
        PyErr_SetString(PyExc_ValueError, "an event id is 16 bytes");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(id_hash((const unsigned char *)p));
}

static PyMethodDef methods[] = {
    {"tally_values", tally_values, METH_VARARGS,
     "tally_values(acc, values, timestamps, window_ms, now_ms, bounds, id_sets=None)"},
    {"tally_messages", tally_messages, METH_VARARGS,
     "tally_messages(acc, messages, window_ms, now_ms, bounds, id_sets=None)"},
    {"tally_message_set", tally_message_set, METH_VARARGS,
     "tally_message_set(acc, buf, window_ms, now_ms, bounds, id_sets=None)"},
    {"id_hash", py_id_hash, METH_O, "id_hash(event_id) -> int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tally", "C twin of audit/tally.py", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tally(void) {
    if (PyType_Ready(&IdSetType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&IdSetType);
    if (PyModule_AddObject(m, "IdSet", (PyObject *)&IdSetType) < 0) {
        Py_DECREF(&IdSetType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
