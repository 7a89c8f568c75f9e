/* gpuarray.interop._dlpack_core, imports: a DLPack tensor consumed into plain values.
 *
 * One concern: consume(capsule) renames the capsule "used_..." and returns
 * the tensor's fields as plain values with a Releaser that calls the
 * producer's deleter exactly once: on release(), or when it is deallocated
 * (saving and restoring the error indicator around it). The consumer side
 * of the DLPack C exchange table (dlpack.h 1.3) too: exchange_import(api,
 * obj) calls a producer's managed_tensor_from_py_object_no_sync and consumes
 * the tensor as consume() does a capsule; exchange_stream(api, device_type,
 * device_id) its current_work_stream. Part of the extension built from the
 * units listed in _dlpack_core.c; Limited API of Python 3.10.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_dlpack_abi.h"

static const char USED_LEGACY[] = "used_dltensor";
static const char USED_VERSIONED[] = "used_dltensor_versioned";

/* --- imports: the Releaser --- */
typedef struct {
    PyObject_HEAD
    void *manager;
    void *deleter;
    int released;
} Releaser;

static PyObject *ReleaserType = NULL;
static PyObject *consume_tensor(void *manager, int versioned);

static void
releaser_run(Releaser *self)
{
    PyObject *type, *value, *tb;
    void (*fn)(void *);

    if (self->released) {
        return;
    }
    self->released = 1;
    if (self->deleter == NULL) {
        return; /* "no way to provide a destructor": allowed by the specification */
    }
    fn = (void (*)(void *))self->deleter;
    PyErr_Fetch(&type, &value, &tb);
    fn(self->manager);
    PyErr_Restore(type, value, tb);
}

static PyObject *
releaser_release(PyObject *self, PyObject *unused)
{
    (void)unused;
    releaser_run((Releaser *)self);
    Py_RETURN_NONE;
}

static PyObject *
releaser_get_released(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((Releaser *)self)->released);
}

static void
releaser_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

    releaser_run((Releaser *)self);
    tp_free(self);
    Py_DECREF(tp);
}

static PyMethodDef releaser_methods[] = {
    {"release", releaser_release, METH_NOARGS,
     "Call the producer's deleter now; later calls do nothing."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef releaser_getset[] = {
    {"released", releaser_get_released, NULL, "Whether the deleter has been called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot releaser_slots[] = {
    {Py_tp_dealloc, (void *)releaser_dealloc},
    {Py_tp_methods, releaser_methods},
    {Py_tp_getset, releaser_getset},
    {Py_tp_doc, (void *)"Calls a consumed DLPack tensor's deleter exactly once."},
    {0, NULL},
};

static PyType_Spec releaser_spec = {
    "gpuarray.interop._dlpack_core.Releaser",
    sizeof(Releaser),
    0,
    Py_TPFLAGS_DEFAULT,
    releaser_slots,
};

static PyObject *
int64_tuple(const int64_t *values, Py_ssize_t n)
{
    PyObject *out = PyTuple_New(n);
    Py_ssize_t i;

    if (out == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong((long long)values[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SetItem(out, i, v);
    }
    return out;
}

#ifndef __SIZEOF_INT128__
#error "the DLPack core needs a 128-bit integer type for its size checks"
#endif
typedef __int128 wide;
#define I64_MAX ((wide)INT64_MAX)
#define ADDR_END ((wide)1 << 64)

/* Release, then raise BufferError(message % shape): the caller returns NULL. */
static PyObject *
refuse(Releaser *rel, PyObject *shape, const char *message)
{
    releaser_run(rel);
    Py_DECREF(rel);
    PyErr_Format(PyExc_BufferError, message, shape);
    Py_DECREF(shape);
    return NULL;
}

/* consume(capsule) -> (releaser, versioned, major, minor, flags, data_ptr,
 *                      device_type, device_id, code, bits, lanes, shape,
 *                      byte_strides, size, lo, hi)
 * data_ptr is data + byte_offset; byte_strides are bytes (C-contiguous when
 * the producer gave NULL); [data_ptr + lo, data_ptr + hi) are the bytes the
 * tensor addresses ((0, 0) for size 0). After a major version other than 1
 * the fields from data_ptr on are None (only the fields up to `flags` may be
 * read); for a dtype whose item size is not whole bytes (lanes != 1
 * included), shape and what follows are None: the caller refuses the dtype.
 * BufferError, after calling the deleter, for a bad ndim or shape, and for
 * sizes, strides or addresses that do not fit 64 bits. */
static PyObject *
core_consume(PyObject *module, PyObject *capsule)
{
    const char *name;
    int versioned;
    void *manager;

    (void)module;
    if (!PyCapsule_CheckExact(capsule)) {
        PyErr_SetString(PyExc_TypeError, "expected a DLPack PyCapsule");
        return NULL;
    }
    name = PyCapsule_GetName(capsule);
    if (name == NULL && PyErr_Occurred()) {
        return NULL;
    }
    if (name != NULL && (strcmp(name, USED_LEGACY) == 0 || strcmp(name, USED_VERSIONED) == 0)) {
        PyErr_Format(PyExc_BufferError, "this DLPack capsule was already consumed (its name "
                     "is '%s'); a capsule can be consumed only once", name);
        return NULL;
    }
    if (name != NULL && strcmp(name, GA_NAME_VERSIONED) == 0) {
        versioned = 1;
    }
    else if (name != NULL && strcmp(name, GA_NAME_LEGACY) == 0) {
        versioned = 0;
    }
    else {
        if (name == NULL) {
            PyErr_SetString(PyExc_ValueError, "not a DLPack capsule: its name is None, "
                            "expected 'dltensor' or 'dltensor_versioned'");
        }
        else {
            PyErr_Format(PyExc_ValueError, "not a DLPack capsule: its name is b'%s', "
                         "expected 'dltensor' or 'dltensor_versioned'", name);
        }
        return NULL;
    }
    manager = PyCapsule_GetPointer(capsule, name);
    if (manager == NULL) {
        return NULL;
    }
    if (PyCapsule_SetName(capsule, versioned ? USED_VERSIONED : USED_LEGACY) < 0) {
        return NULL;
    }
    return consume_tensor(manager, versioned);
}

/* Take ownership of a DLPack tensor (its deleter runs exactly once from
 * here on, errors included): consume()'s tuple, or NULL with an exception. */
static PyObject *
consume_tensor(void *manager, int versioned)
{
    Releaser *rel;
    DLTensor *t;
    unsigned long long major = 0, minor = 0, flags = 0;
    PyObject *shape, *strides;
    int64_t ndim, i, n, itemsize, bs[GA_MAX_NDIM];
    wide size = 1, lo = 0, hi, acc, step, ptr;
    int empty = 0;

    rel = (Releaser *)PyType_GenericAlloc((PyTypeObject *)ReleaserType, 0);
    if (rel == NULL) {
        Releaser tmp;

        tmp.manager = manager;
        tmp.deleter = versioned ? (void *)((DLManagedTensorVersioned *)manager)->deleter
                                : (void *)((DLManagedTensor *)manager)->deleter;
        tmp.released = 0;
        releaser_run(&tmp);
        return NULL;
    }
    rel->manager = manager;
    rel->released = 0;
    if (versioned) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)manager;
        rel->deleter = (void *)m->deleter;
        major = m->version.major;
        minor = m->version.minor;
        flags = m->flags;
        if (major != 1) {
            return Py_BuildValue("(NiKKKOOOOOOOOOOO)", (PyObject *)rel, 1, major, minor, flags,
                                 Py_None, Py_None, Py_None, Py_None, Py_None, Py_None,
                                 Py_None, Py_None, Py_None, Py_None, Py_None);
        }
        t = &m->dl_tensor;
    }
    else {
        DLManagedTensor *m = (DLManagedTensor *)manager;
        rel->deleter = (void *)m->deleter;
        t = &m->dl_tensor;
    }
    ndim = t->ndim;
    if (ndim < 0 || ndim > GA_MAX_NDIM || (ndim && t->shape == NULL)) {
        releaser_run(rel);
        Py_DECREF(rel);
        PyErr_Format(PyExc_BufferError, "invalid DLPack tensor: ndim=%d, shape pointer %s",
                     (int)ndim, t->shape == NULL ? "NULL" : "set");
        return NULL;
    }
    if (t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8) {
        return Py_BuildValue("(NiKKKKiiiiiOOOOO)", (PyObject *)rel, versioned, major, minor,
                             flags, 0ULL, (int)t->device.device_type,
                             (int)t->device.device_id, (int)t->dtype.code, (int)t->dtype.bits,
                             (int)t->dtype.lanes, Py_None, Py_None, Py_None, Py_None, Py_None);
    }
    itemsize = t->dtype.bits / 8;
    shape = int64_tuple(t->shape, ndim);
    if (shape == NULL) {
        Py_DECREF(rel);
        return NULL;
    }
    hi = itemsize;
    acc = itemsize;
    for (i = ndim - 1; i >= 0; i--) {
        n = t->shape[i];
        if (n < 0) {
            return refuse(rel, shape, "invalid DLPack tensor: negative shape %R");
        }
        if (n == 0) {
            empty = 1;
        }
        else if (size <= I64_MAX) {
            size *= n; /* saturates in effect: once past int64 it is refused below */
        }
        if (t->strides != NULL) {
            step = (wide)t->strides[i] * itemsize;
        }
        else {
            step = acc;
            if (n > 1 && acc <= I64_MAX) {
                acc *= n;
            }
        }
        if ((step > I64_MAX || step < -I64_MAX) && t->strides == NULL) {
            return refuse(rel, shape, "DLPack tensor of shape %R has a stride that does not "
                          "fit 64 bits in bytes");
        }
        if (step > I64_MAX || step < -I64_MAX) {
            /* the stride named: a producer's unsigned quotient of a negative stride
             * (CuPy 14.2: 2**62 - 4 for -16 bytes of float32) is read here */
            releaser_run(rel);
            Py_DECREF(rel);
            PyErr_Format(PyExc_BufferError, "DLPack tensor of shape %R has a stride of %lld "
                         "elements of %lld bytes (axis %lld) that does not fit 64 bits in bytes",
                         shape, (long long)t->strides[i], (long long)itemsize, (long long)i);
            Py_DECREF(shape);
            return NULL;
        }
        bs[i] = (int64_t)step;
        if (n > 1) {
            if ((step < 0 ? -step : step) > (ADDR_END / (n - 1))) {
                return refuse(rel, shape, "DLPack tensor of shape %R spans more than a 64-bit "
                              "address space");
            }
            if (step < 0) {
                lo += step * (n - 1);
            }
            else {
                hi += step * (n - 1);
            }
        }
    }
    if (!empty && (size > I64_MAX || size * itemsize > I64_MAX || hi - lo > I64_MAX)) {
        return refuse(rel, shape, "DLPack tensor of shape %R is too large for a 64-bit "
                      "address space");
    }
    ptr = (wide)(uintptr_t)t->data + (wide)t->byte_offset;
    if (empty) {
        lo = hi = 0;
        size = 0;
    }
    else if (t->data == NULL) {
        return refuse(rel, shape, "invalid DLPack tensor: NULL data for shape %R");
    }
    if (ptr + lo < 0 || ptr + hi > ADDR_END || ptr >= ADDR_END) {
        char where[96];
        snprintf(where, sizeof(where), "data 0x%llx + byte_offset 0x%llx",
                 (unsigned long long)(uintptr_t)t->data, (unsigned long long)t->byte_offset);
        releaser_run(rel);
        Py_DECREF(rel);
        PyErr_Format(PyExc_BufferError, "DLPack tensor %s with shape %R addresses memory "
                     "outside a 64-bit address space", where, shape);
        Py_DECREF(shape);
        return NULL;
    }
    strides = int64_tuple(bs, ndim);
    if (strides == NULL) {
        Py_DECREF(shape);
        Py_DECREF(rel);
        return NULL;
    }
    return Py_BuildValue("(NiKKKKiiiiiNNLLL)", (PyObject *)rel, versioned, major, minor, flags,
                         (unsigned long long)ptr, (int)t->device.device_type,
                         (int)t->device.device_id, (int)t->dtype.code, (int)t->dtype.bits,
                         (int)t->dtype.lanes, shape, strides, (long long)size, (long long)lo,
                         (long long)hi);
}

/* The table in a "dlpack_exchange_api" capsule: major version 1, or the first
 * of its prev_api chain that is. */
static const DLPackExchangeAPI *
table_of(PyObject *api)
{
    const DLPackExchangeAPIHeader *h;

    if (!PyCapsule_IsValid(api, GA_NAME_API)) {
        PyErr_Format(PyExc_TypeError, "expected a \"%s\" capsule, got %R", GA_NAME_API,
                     (PyObject *)Py_TYPE(api));
        return NULL;
    }
    h = (const DLPackExchangeAPIHeader *)PyCapsule_GetPointer(api, GA_NAME_API);
    while (h != NULL && h->version.major != 1) {
        h = h->prev_api;
    }
    if (h == NULL) {
        PyErr_SetString(PyExc_BufferError, "the DLPack exchange table has no major version 1");
        return NULL;
    }
    return (const DLPackExchangeAPI *)h;
}

/* exchange_import(api, obj) -> consume()'s tuple for obj's managed tensor. */
static PyObject *
exchange_import(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const DLPackExchangeAPI *api;
    DLManagedTensorVersioned *m = NULL;

    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "exchange_import() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    api = table_of(args[0]);
    if (api == NULL) {
        return NULL;
    }
    if (api->managed_tensor_from_py_object_no_sync == NULL) {
        PyErr_SetString(PyExc_BufferError, "the DLPack exchange table has no "
                        "managed_tensor_from_py_object_no_sync");
        return NULL;
    }
    if (api->managed_tensor_from_py_object_no_sync(args[1], &m) != 0 || m == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_BufferError, "%R's DLPack exchange table failed without "
                         "saying why", (PyObject *)Py_TYPE(args[1]));
        }
        return NULL;
    }
    return consume_tensor(m, 1);
}

/* exchange_stream(api, device_type, device_id) -> int (0: NULL) or None when
 * the table has no current_work_stream. */
static PyObject *
exchange_stream(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const DLPackExchangeAPI *api;
    void *stream = NULL;
    int dev_type, dev_id;

    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "exchange_stream() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    api = table_of(args[0]);
    if (api == NULL) {
        return NULL;
    }
    dev_type = (int)PyLong_AsLong(args[1]);
    dev_id = (int)PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (api->current_work_stream == NULL) {
        Py_RETURN_NONE;
    }
    if (api->current_work_stream(dev_type, dev_id, &stream) != 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "current_work_stream failed without saying why");
        }
        return NULL;
    }
    return PyLong_FromVoidPtr(stream);
}

static PyMethodDef consume_methods[] = {
    {"consume", core_consume, METH_O, "consume(capsule) -> tuple of plain values"},
    {"exchange_import", (PyCFunction)(void (*)(void))exchange_import, METH_FASTCALL,
     "exchange_import(api, obj) -> consume()'s tuple, through a producer's exchange table"},
    {"exchange_stream", (PyCFunction)(void (*)(void))exchange_stream, METH_FASTCALL,
     "exchange_stream(api, device_type, device_id) -> the producer's current work stream"},
    {NULL, NULL, 0, NULL},
};

int
ga_consume_add(PyObject *module)
{
    if (ReleaserType == NULL) {
        ReleaserType = PyType_FromSpec(&releaser_spec);
        if (ReleaserType == NULL) {
            return -1;
        }
    }
    Py_INCREF(ReleaserType);
    if (PyModule_AddObject(module, "Releaser", ReleaserType) < 0) {
        Py_DECREF(ReleaserType);
        return -1;
    }
    return PyModule_AddFunctions(module, consume_methods);
}
