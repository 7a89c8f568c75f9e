/* gpuarray.interop._dlpack_core, exports: DLPack capsules made from plain values.
 *
 * One concern: make() builds a "dltensor" / "dltensor_versioned" capsule from
 * plain values (the layout checked by ga_parse_layout, which the exchange
 * table's exchange_prepare shares), and the deleters and capsule destructor
 * that release it. It knows nothing of gpuarray's arrays or of CUDA; the
 * Python module gpuarray/interop/_dlpack_capsule.py validates arguments and
 * maps dtypes, and falls back to a ctypes implementation of the same
 * functions when this extension was not built. The extension's other units:
 * _dlpack_consume.c (imports), _dlpack_exchange.c (the C exchange table),
 * _cai_fields.c, and _dlpack_module.c (the module), which registers each
 * unit's functions; the helpers they share are declared in _dlpack_abi.h,
 * and calls between units run one way (module -> units -> this file).
 *
 * Written against the Limited API of Python 3.10, so one build (abi3) serves
 * every later version.
 *
 * One malloc'd block per capsule holds the managed struct and then shape and
 * strides (int64, elements); manager_ctx is a strong reference to the owner.
 * The deleter takes the GIL (PyGILState_Ensure: a consumer may call it from
 * any thread), saves the pending exception, frees the block, drops the owner
 * (which may run Python code: none runs with an exception pending), restores
 * the exception and releases the GIL. The capsule destructor calls the
 * deleter only while the capsule is unconsumed (named "dltensor" or
 * "dltensor_versioned"), saving the error indicator too. Once the
 * interpreter shuts down (after atexit) the deleter leaks rather than touch
 * it.
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


/* Counters of this module's exports; changed only with the GIL held. */
static Py_ssize_t live_count = 0;
static Py_ssize_t deleter_count = 0;
/* Set by an atexit callback: after it, the interpreter is shutting down
 * (Py_IsInitialized stays true all through Py_Finalize) and a late deleter
 * leaks its block and owner rather than run the owner's teardown in a
 * half-finalized interpreter -- as the ctypes core does (sys.is_finalizing). */
static int exiting = 0;
/* --- exports --- */
static void
release_export(void *block, PyObject *owner)
{
    PyGILState_STATE gil;
    PyObject *type, *value, *tb;

    if (!Py_IsInitialized() || exiting) {
        return; /* the interpreter is going: leak rather than touch it */
    }
    gil = PyGILState_Ensure();
    PyErr_Fetch(&type, &value, &tb); /* nothing below runs with it pending */
    deleter_count++;
    live_count--;
    free(block);
    Py_XDECREF(owner);
    PyErr_Restore(type, value, tb);
    PyGILState_Release(gil);
}

static void
deleter_legacy(DLManagedTensor *self)
{
    if (self != NULL) {
        release_export(self, (PyObject *)self->manager_ctx);
    }
}

void
ga_deleter_versioned(DLManagedTensorVersioned *self)
{
    if (self != NULL) {
        release_export(self, (PyObject *)self->manager_ctx);
    }
}

void
ga_capsule_destructor(PyObject *capsule)
{
    PyObject *type, *value, *tb;
    const char *name;
    void *ptr;

    PyErr_Fetch(&type, &value, &tb);
    name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, GA_NAME_VERSIONED) == 0) {
        ptr = PyCapsule_GetPointer(capsule, GA_NAME_VERSIONED);
        if (ptr != NULL && ((DLManagedTensorVersioned *)ptr)->deleter != NULL) {
            ((DLManagedTensorVersioned *)ptr)->deleter((DLManagedTensorVersioned *)ptr);
        }
    }
    else if (name != NULL && strcmp(name, GA_NAME_LEGACY) == 0) {
        ptr = PyCapsule_GetPointer(capsule, GA_NAME_LEGACY);
        if (ptr != NULL && ((DLManagedTensor *)ptr)->deleter != NULL) {
            ((DLManagedTensor *)ptr)->deleter((DLManagedTensor *)ptr);
        }
    }
    /* "used_..." (consumed) capsules: the consumer owns the tensor now. */
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

/* An int argument as int64 in [lo, hi]; ValueError naming `what` otherwise. */
static int
as_int64(PyObject *obj, const char *what, long long lo, long long hi, long long *out)
{
    int overflow = 0;
    long long v;

    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %R", what, obj);
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s %R is out of range for DLPack", what, obj);
        return -1;
    }
    *out = v;
    return 0;
}

/* The layout arguments of make() and exchange_prepare(): args[0..8] are
 * data, shape, byte_strides, itemsize, code, bits, lanes, device_type,
 * device_id (shape and byte_strides tuples of ints). Checks them and fills
 * `out` with strides in elements and data NULL for size 0; -1 with a Python
 * exception (TypeError/ValueError, BufferError for byte strides that are not
 * whole elements) otherwise. */
int
ga_parse_layout(PyObject *const *args, GaLayout *out)
{
    PyObject *shape = args[1], *strides = args[2];
    long long code, bits, lanes, dev_type, dev_id, extent = 1, expected = 1, q, r;
    Py_ssize_t ndim, i;
    int empty = 0;

    if (!PyLong_Check(args[0]) || PyBool_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "data_ptr must be an int, got %R", args[0]);
        return -1;
    }
    out->data = PyLong_AsUnsignedLongLong(args[0]);
    if (out->data == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "data_ptr %R is not a 64-bit address", args[0]);
        return -1;
    }
    if (!PyTuple_Check(shape) || !PyTuple_Check(strides)) {
        PyErr_SetString(PyExc_TypeError, "shape and byte_strides must be tuples of ints");
        return -1;
    }
    ndim = PyTuple_Size(shape);
    if (ndim > GA_MAX_NDIM || PyTuple_Size(strides) != ndim) {
        PyErr_Format(PyExc_ValueError, "invalid export: shape %R, byte_strides %R", shape,
                     strides);
        return -1;
    }
    if (as_int64(args[3], "itemsize", 1, INT64_MAX, &out->itemsize) < 0
        || as_int64(args[4], "dtype code", 0, 255, &code) < 0
        || as_int64(args[5], "dtype bits", 0, 255, &bits) < 0
        || as_int64(args[6], "dtype lanes", 0, 65535, &lanes) < 0
        || as_int64(args[7], "device_type", INT32_MIN, INT32_MAX, &dev_type) < 0
        || as_int64(args[8], "device_id", INT32_MIN, INT32_MAX, &dev_id) < 0) {
        return -1;
    }
    for (i = 0; i < ndim; i++) {
        if (as_int64(PyTuple_GetItem(shape, i), "shape entry", 0, INT64_MAX,
                     &out->shape[i]) < 0
            || as_int64(PyTuple_GetItem(strides, i), "byte stride", -INT64_MAX, INT64_MAX,
                        &out->strides[i]) < 0) {
            return -1;
        }
        if (out->shape[i] == 0) {
            empty = 1;
        }
        else if (extent > INT64_MAX / out->shape[i]) {
            PyErr_Format(PyExc_ValueError, "shape %R is too large for DLPack", shape);
            return -1;
        }
        else {
            extent *= out->shape[i];
        }
    }
    if (extent > INT64_MAX / out->itemsize) {
        PyErr_Format(PyExc_ValueError, "shape %R is too large for DLPack", shape);
        return -1;
    }
    for (i = ndim - 1; i >= 0; i--) {
        q = out->strides[i] / out->itemsize;
        r = out->strides[i] % out->itemsize;
        if (r != 0) {
            if (out->shape[i] > 1 && !empty) {
                PyErr_Format(PyExc_BufferError,
                             "byte strides %R are not multiples of the item size %lld: "
                             "DLPack counts strides in elements", strides, out->itemsize);
                return -1;
            }
            q = expected; /* the stride of an axis of extent <= 1 does not matter */
        }
        out->strides[i] = q;
        expected *= (out->shape[i] > 1 ? out->shape[i] : 1);
    }
    if (empty) {
        out->data = 0;
    }
    out->ndim = ndim;
    out->dtype.code = (uint8_t)code;
    out->dtype.bits = (uint8_t)bits;
    out->dtype.lanes = (uint16_t)lanes;
    out->device.device_type = (int32_t)dev_type;
    out->device.device_id = (int32_t)dev_id;
    return 0;
}

/* Fill a DLTensor from a layout; shape and strides go to `dims` (2 * ndim). */
static void
fill_tensor(DLTensor *t, const GaLayout *L, int64_t *dims)
{
    Py_ssize_t i;

    t->data = (void *)(uintptr_t)L->data;
    t->device = L->device;
    t->ndim = (int32_t)L->ndim;
    t->dtype = L->dtype;
    t->byte_offset = 0;
    t->shape = t->strides = NULL;
    if (L->ndim) {
        t->shape = dims;
        t->strides = dims + L->ndim;
        for (i = 0; i < L->ndim; i++) {
            t->shape[i] = (int64_t)L->shape[i];
            t->strides[i] = (int64_t)L->strides[i];
        }
    }
}

void
ga_count_export(void)
{
    live_count++;
}

/* make(owner, data, shape, byte_strides, itemsize, code, bits, lanes,
 *      device_type, device_id, versioned, major, minor, flags) -> capsule
 * shape and byte_strides are tuples of ints; strides are exported in elements. */
static PyObject *
core_make(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *owner, *capsule;
    long long major, minor;
    unsigned long long flags;
    int versioned;
    GaLayout L;
    size_t head;
    char *block;

    (void)module;
    if (nargs != 14) {
        PyErr_Format(PyExc_TypeError, "make() takes 14 arguments (%zd given)", nargs);
        return NULL;
    }
    owner = args[0];
    if (ga_parse_layout(args + 1, &L) < 0) {
        return NULL;
    }
    versioned = PyObject_IsTrue(args[10]);
    if (versioned < 0 || as_int64(args[11], "version major", 1, 1, &major) < 0
        || as_int64(args[12], "version minor", 0, UINT32_MAX, &minor) < 0) {
        return NULL;
    }
    if (!PyLong_Check(args[13]) || PyBool_Check(args[13])) {
        PyErr_SetString(PyExc_TypeError, "flags must be an int");
        return NULL;
    }
    flags = PyLong_AsUnsignedLongLong(args[13]);
    if (flags == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
    block = (char *)calloc(1, head + 16 * (size_t)L.ndim);
    if (block == NULL) {
        return PyErr_NoMemory();
    }
    if (versioned) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)block;
        m->version.major = (uint32_t)major;
        m->version.minor = (uint32_t)minor;
        m->manager_ctx = owner;
        m->deleter = ga_deleter_versioned;
        m->flags = flags;
        fill_tensor(&m->dl_tensor, &L, (int64_t *)(block + head));
    }
    else {
        DLManagedTensor *m = (DLManagedTensor *)block;
        m->manager_ctx = owner;
        m->deleter = deleter_legacy;
        fill_tensor(&m->dl_tensor, &L, (int64_t *)(block + head));
    }
    Py_INCREF(owner);
    live_count++;
    capsule = PyCapsule_New(block, versioned ? GA_NAME_VERSIONED : GA_NAME_LEGACY,
                            ga_capsule_destructor);
    if (capsule == NULL) {
        live_count--;
        free(block);
        Py_DECREF(owner);
    }
    return capsule;
}

static PyObject *
core_live_exports(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromSsize_t(live_count);
}

static PyObject *
core_deleter_calls(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromSsize_t(deleter_count);
}

static PyObject *
core_at_exit(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    exiting = 1;
    Py_RETURN_NONE;
}

static PyMethodDef export_methods[] = {
    {"make", (PyCFunction)(void (*)(void))core_make, METH_FASTCALL,
     "make(owner, data, shape, byte_strides, itemsize, code, bits, lanes, device_type, "
     "device_id, versioned, major, minor, flags) -> DLPack capsule"},
    {"live_exports", core_live_exports, METH_NOARGS,
     "How many exports still hold their owner (deleter not run yet)."},
    {"deleter_calls", core_deleter_calls, METH_NOARGS,
     "How many times this module's deleter has run."},
    {"_at_exit", core_at_exit, METH_NOARGS,
     "Registered with atexit: from then on, late deleters leak instead of releasing."},
    {NULL, NULL, 0, NULL},
};

int
ga_export_add(PyObject *module)
{
    return PyModule_AddFunctions(module, export_methods);
}
