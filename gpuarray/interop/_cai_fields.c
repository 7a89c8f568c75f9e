/* The fast half of the CUDA Array Interface parser, in C (part of the
 * extension gpuarray.interop._dlpack_core; Limited API of Python 3.10).
 *
 * cai_fields(desc) is gpuarray/interop/_cai_desc.py's _parse_fields, rule for
 * rule: the plain values of a well-formed dictionary with exact types and a
 * typestr the full validator has already accepted (the dictionary registered
 * with cai_register, _cai_desc._FAST_TYPESTRS), else None, and then the
 * Python validator decides and writes the error message. Where this
 * extension is not built the Python function does the same; a test compares
 * the two on valid and invalid dictionaries.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "_dlpack_abi.h"

typedef __int128 wide;
#define I64_MAX ((wide)INT64_MAX)

static PyObject *typestrs; /* str -> numpy dtype, shared with _cai_desc */
static PyObject *k_typestr, *k_shape, *k_data, *k_version, *k_mask, *k_strides, *k_stream,
    *k_itemsize;

/* A dict value, borrowed; NULL when absent (or on an error, which is cleared:
 * the Python validator then sees the dictionary). */
static PyObject *
item(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(d, key);

    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* An exact int in [lo, hi], or -1 (cleared error) when not. */
static int
exact_ll(PyObject *o, long long lo, long long hi, long long *out)
{
    int overflow = 0;
    long long v;

    if (o == NULL || !PyLong_CheckExact(o)) {
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    if (v < lo || v > hi) {
        return -1;
    }
    *out = v;
    return 0;
}

/* cai_fields(desc) -> (ptr, shape, strides, dtype, readonly, stream, size,
 * lo, hi) or None. */
static PyObject *
cai_fields(PyObject *module, PyObject *desc)
{
    PyObject *typestr, *shape, *data, *version, *mask, *strides, *stream, *dtype, *ptr_o,
        *readonly, *isz, *out_strides = NULL, *r;
    long long v, n, st, itemsize, strd[GA_MAX_NDIM];
    unsigned long long ptr, stream_v;
    Py_ssize_t ndim, i;
    wide size = 1, lo = 0, hi, w;

    (void)module;
    if (typestrs == NULL || !PyDict_CheckExact(desc)) {
        Py_RETURN_NONE;
    }
    typestr = item(desc, k_typestr);
    shape = item(desc, k_shape);
    data = item(desc, k_data);
    version = item(desc, k_version);
    if (typestr == NULL || !PyUnicode_CheckExact(typestr)) {
        Py_RETURN_NONE;
    }
    dtype = item(typestrs, typestr);
    if (dtype == NULL || shape == NULL || !PyTuple_CheckExact(shape) || data == NULL
        || !PyTuple_CheckExact(data) || exact_ll(version, 0, 3, &v) < 0
        || PyTuple_Size(data) != 2 || PyTuple_Size(shape) > GA_MAX_NDIM) {
        Py_RETURN_NONE;
    }
    mask = item(desc, k_mask);
    if (mask != NULL && mask != Py_None) {
        Py_RETURN_NONE;
    }
    ptr_o = PyTuple_GetItem(data, 0);
    readonly = PyTuple_GetItem(data, 1);
    if (!PyLong_CheckExact(ptr_o) || !PyBool_Check(readonly)) {
        Py_RETURN_NONE;
    }
    ptr = PyLong_AsUnsignedLongLong(ptr_o);
    if (ptr == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or 2**64 and over */
        Py_RETURN_NONE;
    }
    isz = PyObject_GetAttr(dtype, k_itemsize);
    if (isz == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (exact_ll(isz, 1, INT64_MAX, &itemsize) < 0) {
        Py_DECREF(isz);
        Py_RETURN_NONE;
    }
    Py_DECREF(isz);
    ndim = PyTuple_Size(shape);
    strides = item(desc, k_strides);
    hi = itemsize;
    if (strides == NULL || strides == Py_None) {
        for (i = ndim - 1; i >= 0; i--) {
            if (exact_ll(PyTuple_GetItem(shape, i), 0, INT64_MAX, &n) < 0 || hi > I64_MAX) {
                Py_RETURN_NONE; /* (a stride past int64: the validator decides) */
            }
            strd[i] = (long long)hi;
            size *= n;
            if (size > I64_MAX) {
                size = I64_MAX + 1; /* too large for any itemsize: refused below */
            }
            if (n > 1) {
                hi *= n;
            }
        }
        out_strides = PyTuple_New(ndim);
        if (out_strides == NULL) {
            return NULL;
        }
        for (i = 0; i < ndim; i++) {
            PyObject *s = PyLong_FromLongLong(strd[i]);

            if (s == NULL) {
                Py_DECREF(out_strides);
                return NULL;
            }
            PyTuple_SetItem(out_strides, i, s);
        }
    }
    else {
        if (!PyTuple_CheckExact(strides) || PyTuple_Size(strides) != ndim) {
            Py_RETURN_NONE;
        }
        for (i = 0; i < ndim; i++) {
            if (exact_ll(PyTuple_GetItem(shape, i), 0, INT64_MAX, &n) < 0
                || exact_ll(PyTuple_GetItem(strides, i), -INT64_MAX, INT64_MAX, &st) < 0) {
                Py_RETURN_NONE;
            }
            size *= n;
            if (size > I64_MAX) {
                size = I64_MAX + 1;
            }
            if (n > 1) {
                w = (wide)st * (n - 1);
                if (st < 0) {
                    lo += w;
                }
                else {
                    hi += w;
                }
                if (lo < -(I64_MAX + 1) || hi > I64_MAX) {
                    Py_RETURN_NONE; /* past int64: the validator decides */
                }
            }
        }
        Py_INCREF(strides);
        out_strides = strides;
    }
    if (size == 0) {
        lo = hi = 0;
    }
    else if (ptr == 0 || size * itemsize > I64_MAX) {
        Py_DECREF(out_strides);
        Py_RETURN_NONE;
    }
    stream = item(desc, k_stream);
    if (stream != NULL && stream != Py_None) {
        if (!PyLong_CheckExact(stream)) {
            Py_DECREF(out_strides);
            Py_RETURN_NONE;
        }
        stream_v = PyLong_AsUnsignedLongLong(stream);
        if ((stream_v == (unsigned long long)-1 && PyErr_Occurred()) || stream_v == 0) {
            PyErr_Clear();
            Py_DECREF(out_strides);
            Py_RETURN_NONE;
        }
    }
    else {
        stream = Py_None;
    }
    (void)v;
    r = Py_BuildValue("(KONOOOLLL)", ptr, shape, out_strides, dtype, readonly, stream,
                      (long long)size, (long long)lo, (long long)hi);
    return r;
}

/* cai_register(typestrs): the dict of typestrs the fast path may take. */
static PyObject *
cai_register(PyObject *module, PyObject *d)
{
    PyObject *old = typestrs;

    (void)module;
    if (!PyDict_CheckExact(d)) {
        PyErr_Format(PyExc_TypeError, "cai_register needs a dict, got %R", (PyObject *)Py_TYPE(d));
        return NULL;
    }
    Py_INCREF(d);
    typestrs = d;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyMethodDef cai_methods[] = {
    {"cai_fields", cai_fields, METH_O,
     "cai_fields(desc) -> (ptr, shape, strides, dtype, readonly, stream, size, lo, hi) or None"},
    {"cai_register", cai_register, METH_O,
     "cai_register(typestrs): the typestr -> dtype dict cai_fields looks typestrs up in"},
    {NULL, NULL, 0, NULL},
};

int
ga_cai_add(PyObject *module)
{
    static const char *names[] = {"typestr", "shape", "data", "version", "mask", "strides",
                                  "stream", "itemsize"};
    PyObject **keys[] = {&k_typestr, &k_shape, &k_data, &k_version, &k_mask, &k_strides,
                         &k_stream, &k_itemsize};
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*keys[i] == NULL) {
            *keys[i] = PyUnicode_InternFromString(names[i]);
            if (*keys[i] == NULL) {
                return -1;
            }
        }
    }
    return PyModule_AddFunctions(module, cai_methods);
}
