/*
 * strom.protocol.records._record_decode — the C twin of the record loop of
 * strom.protocol.records.reader (decode_record_tuples; its Python twin is _decode_records
 * with a tuple factory, and the specification of what this module returns and refuses).
 *
 * decode(data, pos, end, count, base_offset, base_timestamp, fixed_timestamp, cls, template,
 *        slots) -> list
 *
 * Decodes `count` v2 records from data[pos:end] (record format: strom.protocol.records.record)
 * into a list of `cls` instances, `cls` being `tuple` or a tuple subclass without extra
 * storage (a NamedTuple). Each record is a copy of `template` with five of its items replaced,
 * at the indexes `slots` = (offset, timestamp, key, value, headers):
 *   offset     base_offset + offset delta
 *   timestamp  fixed_timestamp if not None (LogAppendTime), else base_timestamp + delta
 *   key/value  bytes, or None for length -1
 *   headers    a tuple of (str, bytes | None) tuples; () when there are none
 *
 * Varints follow Kafka's ByteUtils: at most 5 bytes with the result kept to 32 bits,
 * varlongs at most 10 bytes kept to 64 bits. Sums that leave int64 become Python ints, as in
 * the Python twin.
 *
 * Input comes from the network: every read is bounds-checked (a record's fields against the
 * end its length gives, lengths against `end`), so malformed input raises and never reads
 * outside data[pos:end]. Errors are ValueError whose text is the Python twin's
 * CorruptMessageError message (the caller converts the type); where the twin only notices a
 * fault after reading past a field's end, this module reports it as "truncated record".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MIN_RECORD_BODY 6
#define MIN_RECORD (MIN_RECORD_BODY + 1)
#define N_SLOTS 5

static PyObject *truncated(void) {
    PyErr_SetString(PyExc_ValueError, "invalid record: truncated record");
    return NULL;
}

/* Zigzag varint of at most `max_bytes` (5: varint, kept to 32 bits; 10: varlong, 64 bits)
 * before `limit`; -1 with ValueError set on failure. */
static inline int read_zigzag(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit,
                              int max_bytes, int64_t *out) {
    uint64_t result = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= limit) {
            truncated();
            return -1;
        }
        unsigned char byte = data[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            if (max_bytes == 5) {
                uint32_t low = (uint32_t)result;
                *out = (int32_t)((low >> 1) ^ (0u - (low & 1)));
            } else {
                *out = (int64_t)((result >> 1) ^ (0u - (result & 1)));
            }
            return 0;
        }
    }
    PyErr_SetString(PyExc_ValueError, max_bytes == 5
                                          ? "invalid record: varint longer than 5 bytes"
                                          : "invalid record: varlong longer than 10 bytes");
    return -1;
}

static int read_varint(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit,
                       int64_t *out) {
    return read_zigzag(data, pos, limit, 5, out);
}

static int read_varlong(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit,
                        int64_t *out) {
    return read_zigzag(data, pos, limit, 10, out);
}

/* base + delta as a Python int, exact even when the sum leaves int64. */
static PyObject *sum_of(int64_t base, int64_t delta) {
    int64_t total;
    if (!__builtin_add_overflow(base, delta, &total))
        return PyLong_FromLongLong(total);
    PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *r = NULL;
    if (a != NULL && b != NULL)
        r = PyNumber_Add(a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* A nullable byte string (length varint, then the bytes) ending at or before `limit`. */
static PyObject *read_nullable(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit,
                               const char *what) {
    int64_t size;
    if (read_varint(data, pos, limit, &size) < 0)
        return NULL;
    if (size == -1)
        Py_RETURN_NONE;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "invalid record: %s length %lld", what,
                            (long long)size);
    if (size > limit - *pos)
        return truncated();
    PyObject *out = PyBytes_FromStringAndSize((const char *)data + *pos, (Py_ssize_t)size);
    *pos += (Py_ssize_t)size;
    return out;
}

static PyObject *read_header(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit) {
    int64_t size;
    if (read_varint(data, pos, limit, &size) < 0)
        return NULL;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "invalid record: header key length %lld",
                            (long long)size);
    if (size > limit - *pos)
        return truncated();
    PyObject *key = PyUnicode_DecodeUTF8((const char *)data + *pos, (Py_ssize_t)size,
                                         "strict");
    if (key == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "invalid record: header key is not UTF-8");
        return NULL;
    }
    *pos += (Py_ssize_t)size;
    PyObject *value = read_nullable(data, pos, limit, "header value");
    if (value == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(key);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, key);
    PyTuple_SET_ITEM(pair, 1, value);
    return pair;
}

/* The headers of a record ending at `limit`: () or a tuple of (key, value) tuples. */
static PyObject *read_headers(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit,
                              PyObject *empty) {
    if (*pos >= limit)
        return truncated();
    if (data[*pos] == 0) { /* no headers: nearly every record */
        *pos += 1;
        return Py_NewRef(empty);
    }
    int64_t count;
    if (read_varint(data, pos, limit, &count) < 0)
        return NULL;
    if (count < 0 || count > (limit - *pos) / 2)
        return PyErr_Format(PyExc_ValueError, "invalid record: header count %lld out of range",
                            (long long)count);
    if (count == 0)
        return Py_NewRef(empty);
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *pair = read_header(data, pos, limit);
        if (pair == NULL) {
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
}

/* What one record is made of, before it becomes a tuple. */
typedef struct {
    PyObject *item[N_SLOTS]; /* offset, timestamp, key, value, headers (owned) */
} Fields;

static void clear_fields(Fields *f) {
    for (int i = 0; i < N_SLOTS; i++)
        Py_CLEAR(f->item[i]);
}

/* The shape of the records to build: `cls`, `template` and where the five fields go. */
typedef struct {
    PyTypeObject *cls;
    PyObject *template;
    Py_ssize_t size;
    Py_ssize_t slot_of[N_SLOTS];
    signed char field_at[256]; /* index in the tuple -> field (0-4), or -1: from template */
} Layout;

static int parse_layout(Layout *layout, PyObject *cls, PyObject *template, PyObject *slots) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
        ((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize ||
        ((PyTypeObject *)cls)->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "cls must be tuple or a subclass without extra slots");
        return -1;
    }
    if (!PyTuple_Check(template) || PyTuple_GET_SIZE(template) > 256 ||
        !PyTuple_Check(slots) || PyTuple_GET_SIZE(slots) != N_SLOTS) {
        PyErr_SetString(PyExc_TypeError,
                        "template must be a tuple (at most 256 items) and slots 5 indexes");
        return -1;
    }
    layout->cls = (PyTypeObject *)cls;
    layout->template = template;
    layout->size = PyTuple_GET_SIZE(template);
    memset(layout->field_at, -1, sizeof layout->field_at);
    for (int f = 0; f < N_SLOTS; f++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, f));
        if (at == -1 && PyErr_Occurred())
            return -1;
        if (at < 0 || at >= layout->size || layout->field_at[at] != -1) {
            PyErr_SetString(PyExc_ValueError, "slots must be distinct indexes into template");
            return -1;
        }
        layout->slot_of[f] = at;
        layout->field_at[at] = (signed char)f;
    }
    return 0;
}

/* One record of the layout, taking the references in `fields`. */
static PyObject *build(const Layout *layout, Fields *fields) {
    PyObject *record = layout->cls == &PyTuple_Type
                           ? PyTuple_New(layout->size)
                           : layout->cls->tp_alloc(layout->cls, layout->size);
    if (record == NULL) {
        clear_fields(fields);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < layout->size; i++) {
        int f = layout->field_at[i];
        PyObject *item;
        if (f < 0) {
            item = Py_NewRef(PyTuple_GET_ITEM(layout->template, i));
        } else {
            item = fields->item[f];
            fields->item[f] = NULL;
        }
        PyTuple_SET_ITEM(record, i, item);
    }
    return record;
}

static PyObject *decode(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer buffer;
    Py_ssize_t pos, end, count;
    long long base_offset, base_timestamp;
    PyObject *fixed_timestamp, *cls, *template, *slots;
    if (!PyArg_ParseTuple(args, "y*nnnLLOOOO", &buffer, &pos, &end, &count, &base_offset,
                          &base_timestamp, &fixed_timestamp, &cls, &template, &slots))
        return NULL;
    PyObject *records = NULL, *empty = NULL, *last_timestamp = NULL;
    Fields fields = {{NULL}};
    Layout layout;
    if (parse_layout(&layout, cls, template, slots) < 0)
        goto fail;
    if (pos < 0 || end < pos || end > buffer.len) {
        PyErr_SetString(PyExc_IndexError, "decode range outside the buffer");
        goto fail;
    }
    if (count > (end - pos) / MIN_RECORD) {
        PyErr_Format(PyExc_ValueError, "invalid record: %zd records cannot fit in %zd bytes",
                     count, end - pos);
        goto fail;
    }
    const unsigned char *data = (const unsigned char *)buffer.buf;
    Py_ssize_t n = count > 0 ? count : 0;
    records = PyList_New(n);
    empty = PyTuple_New(0);
    if (records == NULL || empty == NULL)
        goto fail;
    int64_t last_delta = 0;
    for (Py_ssize_t index = 0; index < n; index++) {
        int64_t length, timestamp_delta, offset_delta;
        if (read_varint(data, &pos, end, &length) < 0)
            goto fail;
        if (length < MIN_RECORD_BODY || length > end - pos) {
            PyErr_Format(PyExc_ValueError, "invalid record: record length %lld out of range",
                         (long long)length);
            goto fail;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1; /* the (unused) attributes byte */
        if (read_varlong(data, &pos, record_end, &timestamp_delta) < 0 ||
            read_varint(data, &pos, record_end, &offset_delta) < 0)
            goto fail;
        if ((fields.item[0] = sum_of(base_offset, offset_delta)) == NULL)
            goto fail;
        if (fixed_timestamp != Py_None) { /* LogAppendTime: the batch's time for all */
            fields.item[1] = Py_NewRef(fixed_timestamp);
        } else if (last_timestamp != NULL && timestamp_delta == last_delta) {
            fields.item[1] = Py_NewRef(last_timestamp); /* records of one millisecond */
        } else {
            if ((fields.item[1] = sum_of(base_timestamp, timestamp_delta)) == NULL)
                goto fail;
            Py_XSETREF(last_timestamp, Py_NewRef(fields.item[1]));
            last_delta = timestamp_delta;
        }
        if ((fields.item[2] = read_nullable(data, &pos, record_end, "key")) == NULL ||
            (fields.item[3] = read_nullable(data, &pos, record_end, "value")) == NULL ||
            (fields.item[4] = read_headers(data, &pos, record_end, empty)) == NULL)
            goto fail;
        if (pos != record_end) {
            PyErr_Format(PyExc_ValueError,
                         "invalid record: record body is %lld bytes but its fields end "
                         "elsewhere", (long long)length);
            goto fail;
        }
        PyObject *record = build(&layout, &fields);
        if (record == NULL)
            goto fail;
        PyList_SET_ITEM(records, index, record);
    }
    if (pos != end) {
        PyErr_Format(PyExc_ValueError, "%zd bytes left after the batch's %zd records",
                     end - pos, count);
        goto fail;
    }
    Py_DECREF(empty);
    Py_XDECREF(last_timestamp);
    PyBuffer_Release(&buffer);
    return records;
fail:
    clear_fields(&fields);
    Py_XDECREF(records); /* unfilled items are NULL, which list dealloc skips */
    Py_XDECREF(empty);
    Py_XDECREF(last_timestamp);
    PyBuffer_Release(&buffer);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(data, pos, end, count, base_offset, base_timestamp, fixed_timestamp, cls, "
     "template, slots) -> list of records"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "strom.protocol.records._record_decode",
    "C twin of strom.protocol.records.reader's record loop, building tuple records.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_decode(void) { return PyModule_Create(&module); }
