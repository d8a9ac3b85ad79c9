/*
 * strom.storage._record_scan — the C twin of strom.storage.log_validator.scan_records_python.
 *
 * scan(data, pos, end, count, collect_keyless) walks `count` v2 records in data[pos:end]
 * (record format: strom.protocol.records.record) without decoding keys, values or headers and
 * returns (smallest timestamp delta, largest timestamp delta, [indexes of keyless records]).
 * A malformed record raises ValueError whose text is exactly the Python twin's detail, so the
 * two are interchangeable (tests/storage/test_log_validator.py runs both on the same input).
 *
 * Every read is bounds-checked against `end` (the input comes from the network): a read at
 * or past `end` is "a record runs past the end of its batch", as the Python twin's IndexError.
 * Varints follow Kafka's ByteUtils: at most 5 bytes (32-bit, higher bits dropped), varlongs
 * at most 10 bytes (64-bit).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define PAST_END "a record runs past the end of its batch"

typedef struct {
    const unsigned char *data;
    Py_ssize_t end;
} Input;

/* Zigzag varint of at most max_bytes at *pos; -1 with ValueError set on failure. */
static int read_varint(const Input *in, Py_ssize_t *pos, int max_bytes, int64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= in->end) {
            PyErr_SetString(PyExc_ValueError, PAST_END);
            return -1;
        }
        unsigned char byte = in->data[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            if (max_bytes == 5)
                result &= 0xFFFFFFFFu;
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 0;
        }
        shift += 7;
    }
    PyErr_Format(PyExc_ValueError, "varint longer than %d bytes", max_bytes);
    return -1;
}

static int past_end(void) {
    PyErr_SetString(PyExc_ValueError, PAST_END);
    return -1;
}

static int skip_headers(const Input *in, Py_ssize_t *pos, Py_ssize_t record_end,
                        Py_ssize_t index) {
    int64_t count, size;
    if (read_varint(in, pos, 5, &count) < 0)
        return -1;
    if (count < 0 || 2 * count > record_end - *pos) {
        PyErr_Format(PyExc_ValueError, "record %zd has %lld headers", index, (long long)count);
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        if (read_varint(in, pos, 5, &size) < 0)
            return -1;
        if (size < 0 || *pos + size > record_end) {
            PyErr_Format(PyExc_ValueError, "record %zd has a header key of length %lld",
                         index, (long long)size);
            return -1;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)in->data + *pos, (Py_ssize_t)size,
                                             "strict");
        if (key == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "record %zd has a header key that is not UTF-8",
                         index);
            return -1;
        }
        Py_DECREF(key);
        *pos += (Py_ssize_t)size;
        if (read_varint(in, pos, 5, &size) < 0)
            return -1;
        if (size < -1) {
            PyErr_Format(PyExc_ValueError, "record %zd has a header value of length %lld",
                         index, (long long)size);
            return -1;
        }
        if (size > 0)
            *pos += (Py_ssize_t)size;
    }
    return 0;
}

/* One record at *pos; -1 with ValueError set if malformed. */
static int scan_one(const Input *in, Py_ssize_t *pos, Py_ssize_t index, int64_t *delta,
                    int *keyless) {
    int64_t length, value;
    if (read_varint(in, pos, 5, &length) < 0)
        return -1;
    if (length < 0) {
        PyErr_Format(PyExc_ValueError, "record %zd has a negative length", index);
        return -1;
    }
    Py_ssize_t record_end = *pos + (Py_ssize_t)length;
    if (record_end > in->end) {
        PyErr_Format(PyExc_ValueError, "record %zd runs past the end of its batch", index);
        return -1;
    }
    if (*pos >= in->end)
        return past_end();
    unsigned char attributes = in->data[*pos];
    if (attributes > 0x7F) {
        PyErr_Format(PyExc_ValueError, "record %zd has attributes 0x%x", index, attributes);
        return -1;
    }
    *pos += 1;
    if (read_varint(in, pos, 10, delta) < 0)
        return -1;
    if (read_varint(in, pos, 5, &value) < 0)
        return -1;
    if (value != index) {
        PyErr_Format(PyExc_ValueError, "record %zd has offset delta %lld", index,
                     (long long)value);
        return -1;
    }
    if (read_varint(in, pos, 5, &value) < 0)
        return -1;
    if (value < -1) {
        PyErr_Format(PyExc_ValueError, "record %zd has key length %lld", index,
                     (long long)value);
        return -1;
    }
    *keyless = value == -1;
    if (value > 0)
        *pos += (Py_ssize_t)value;
    if (read_varint(in, pos, 5, &value) < 0)
        return -1;
    if (value < -1) {
        PyErr_Format(PyExc_ValueError, "record %zd has value length %lld", index,
                     (long long)value);
        return -1;
    }
    if (value > 0)
        *pos += (Py_ssize_t)value;
    if (*pos >= in->end)
        return past_end();
    if (in->data[*pos] == 0) {
        *pos += 1;
    } else if (skip_headers(in, pos, record_end, index) < 0) {
        return -1;
    }
    if (*pos != record_end) {
        PyErr_Format(PyExc_ValueError,
                     "the fields of record %zd do not end where its length says", index);
        return -1;
    }
    return 0;
}

static PyObject *scan(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer buffer;
    Py_ssize_t pos, end, count;
    int collect_keyless;
    if (!PyArg_ParseTuple(args, "y*nnnp", &buffer, &pos, &end, &count, &collect_keyless))
        return NULL;
    PyObject *keyless = NULL;
    if (pos < 0 || end < pos || end > buffer.len) {
        PyErr_SetString(PyExc_IndexError, "scan range outside the buffer");
        goto fail;
    }
    if (count < 0 || count > (end - pos) / 7) {
        PyErr_Format(PyExc_ValueError, "%zd records cannot fit in %zd bytes", count, end - pos);
        goto fail;
    }
    keyless = PyList_New(0);
    if (keyless == NULL)
        goto fail;
    Input in = {(const unsigned char *)buffer.buf, end};
    int64_t min_delta = INT64_MAX, max_delta = INT64_MIN, delta;
    for (Py_ssize_t index = 0; index < count; index++) {
        int no_key = 0;
        if (scan_one(&in, &pos, index, &delta, &no_key) < 0)
            goto fail;
        if (delta < min_delta)
            min_delta = delta;
        if (delta > max_delta)
            max_delta = delta;
        if (no_key && collect_keyless) {
            PyObject *number = PyLong_FromSsize_t(index);
            if (number == NULL || PyList_Append(keyless, number) < 0) {
                Py_XDECREF(number);
                goto fail;
            }
            Py_DECREF(number);
        }
    }
    if (pos != end) {
        PyErr_Format(PyExc_ValueError, "%zd bytes follow the batch's %zd records", end - pos,
                     count);
        goto fail;
    }
    PyBuffer_Release(&buffer);
    return Py_BuildValue("LLN", (long long)min_delta, (long long)max_delta, keyless);
fail:
    Py_XDECREF(keyless);
    PyBuffer_Release(&buffer);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, pos, end, count, collect_keyless) -> (min delta, max delta, keyless)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "strom.storage._record_scan",
    "C twin of strom.storage.log_validator's record scan.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_scan(void) { return PyModule_Create(&module); }
