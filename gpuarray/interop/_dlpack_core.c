/* gpuarray.interop._dlpack_core: the C half of DLPack (dlpack.h 1.x).
 *
 * One concern: make a DLPack capsule from plain values, and consume one into
 * plain values; and read a host array's address (host_address), which a
 * host export's data field and every host copy need. It knows nothing of
 * gpuarray's arrays or of CUDA; the Python module
 * gpuarray/interop/_dlpack_capsule.py validates arguments, maps dtypes and
 * builds the ImportedTensor, and falls back to a ctypes implementation of the
 * same functions when this extension was not built.
 *
 * Written against the Limited API of Python 3.10, so one build (abi3) serves
 * every later version.
 *
 * Exports: one malloc'd block per capsule holds the managed struct and then
 * shape and strides (int64, elements); manager_ctx is a strong reference to
 * the owner. The deleter takes the GIL (PyGILState_Ensure: a consumer may
 * call it from any thread), saves the pending exception, frees the block,
 * drops the owner (which may run Python code: none runs with an exception
 * pending), restores the exception and releases the GIL. The capsule
 * destructor calls the deleter only while the capsule is unconsumed (named
 * "dltensor" or "dltensor_versioned"), saving the error indicator too.
 * Once the interpreter shuts down (after atexit) the deleter leaks rather
 * than touch it.
 *
 * Host addresses: host_address(obj) reads the NumPy array interface in C
 * (obj.__array_struct__, a capsule holding a PyArrayInterface, which every
 * ndarray has) and returns the address of element [0, ..., 0]; the capsule
 * and its copy of the interface are released before returning, the caller
 * keeps obj (and so the memory) alive. A third of the cost of ctypes'
 * addressof(c_char.from_buffer(a)), and read-only arrays too.
 *
 * Imports: consume() renames the capsule "used_..." and returns a Releaser
 * that calls the producer's deleter exactly once: on release(), or when it is
 * deallocated (again saving and restoring the error indicator around it).
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

#define MAX_NDIM GA_MAX_NDIM
static const char NAME_LEGACY[] = "dltensor";
static const char NAME_VERSIONED[] = "dltensor_versioned";
static const char USED_LEGACY[] = "used_dltensor";
static const char USED_VERSIONED[] = "used_dltensor_versioned";

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
    if (name != NULL && strcmp(name, NAME_VERSIONED) == 0) {
        ptr = PyCapsule_GetPointer(capsule, NAME_VERSIONED);
        if (ptr != NULL && ((DLManagedTensorVersioned *)ptr)->deleter != NULL) {
            ((DLManagedTensorVersioned *)ptr)->deleter((DLManagedTensorVersioned *)ptr);
        }
    }
    else if (name != NULL && strcmp(name, NAME_LEGACY) == 0) {
        ptr = PyCapsule_GetPointer(capsule, NAME_LEGACY);
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
    if (ndim > MAX_NDIM || PyTuple_Size(strides) != ndim) {
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
    capsule = PyCapsule_New(block, versioned ? NAME_VERSIONED : NAME_LEGACY,
                            ga_capsule_destructor);
    if (capsule == NULL) {
        live_count--;
        free(block);
        Py_DECREF(owner);
    }
    return capsule;
}

/* --- imports: the Releaser --- */
typedef struct {
    PyObject_HEAD
    void *manager;
    void *deleter;
    int released;
} Releaser;

static PyObject *ReleaserType = NULL;

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
    if (name != NULL && strcmp(name, NAME_VERSIONED) == 0) {
        versioned = 1;
    }
    else if (name != NULL && strcmp(name, NAME_LEGACY) == 0) {
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
    return ga_consume_tensor(manager, versioned);
}

/* Take ownership of a DLPack tensor (its deleter runs exactly once from
 * here on, errors included): consume()'s tuple, or NULL with an exception. */
PyObject *
ga_consume_tensor(void *manager, int versioned)
{
    Releaser *rel;
    DLTensor *t;
    unsigned long long major = 0, minor = 0, flags = 0;
    PyObject *shape, *strides;
    int64_t ndim, i, n, itemsize, bs[MAX_NDIM];
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
    if (ndim < 0 || ndim > MAX_NDIM || (ndim && t->shape == NULL)) {
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
        if (step > I64_MAX || step < -I64_MAX) {
            return refuse(rel, shape, "DLPack tensor of shape %R has a stride that does not "
                          "fit 64 bits in bytes");
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


/* --- host addresses: the NumPy array interface in C (__array_struct__) --- */
typedef struct {
    int two; /* 2: the interface's own sanity check */
    int nd;
    char typekind;
    int itemsize;
    int flags;
    Py_intptr_t *shape;
    Py_intptr_t *strides;
    void *data;
    PyObject *descr;
} ArrayInterface;

static PyObject *array_struct_name; /* interned "__array_struct__" */

static PyObject *
core_host_address(PyObject *module, PyObject *obj)
{
    PyObject *cap;
    ArrayInterface *ai;
    PyObject *r;

    (void)module;
    cap = PyObject_GetAttr(obj, array_struct_name);
    if (cap == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "host_address needs an object with the NumPy array "
                         "interface (__array_struct__), got %R", (PyObject *)Py_TYPE(obj));
        }
        return NULL;
    }
    if (!PyCapsule_CheckExact(cap)) {
        PyErr_Format(PyExc_TypeError, "__array_struct__ of %R is %R, not a capsule",
                     (PyObject *)Py_TYPE(obj), (PyObject *)Py_TYPE(cap));
        Py_DECREF(cap);
        return NULL;
    }
    ai = (ArrayInterface *)PyCapsule_GetPointer(cap, PyCapsule_GetName(cap));
    if (ai == NULL) {
        Py_DECREF(cap);
        return NULL;
    }
    if (ai->two != 2) {
        PyErr_Format(PyExc_ValueError, "__array_struct__ of %R is not a NumPy array interface "
                     "(its first field is %d, not 2)", (PyObject *)Py_TYPE(obj), ai->two);
        Py_DECREF(cap);
        return NULL;
    }
    r = PyLong_FromVoidPtr(ai->data);
    Py_DECREF(cap);
    return r;
}

static PyMethodDef core_methods[] = {
    {"make", (PyCFunction)(void (*)(void))core_make, METH_FASTCALL,
     "make(owner, data, shape, byte_strides, itemsize, code, bits, lanes, device_type, "
     "device_id, versioned, major, minor, flags) -> DLPack capsule"},
    {"consume", core_consume, METH_O, "consume(capsule) -> tuple of plain values"},
    {"host_address", core_host_address, METH_O,
     "host_address(obj) -> int: address of element [0, ..., 0] of an object with the NumPy "
     "array interface (__array_struct__)"},
    {"live_exports", core_live_exports, METH_NOARGS,
     "How many exports still hold their owner (deleter not run yet)."},
    {"deleter_calls", core_deleter_calls, METH_NOARGS,
     "How many times this module's deleter has run."},
    {"_at_exit", core_at_exit, METH_NOARGS,
     "Registered with atexit: from then on, late deleters leak instead of releasing."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    "gpuarray.interop._dlpack_core",
    "DLPack capsules in C: make one from plain values, consume one into plain values.",
    -1,
    core_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__dlpack_core(void)
{
    PyObject *m = PyModule_Create(&core_module);

    if (m == NULL) {
        return NULL;
    }
    if (array_struct_name == NULL) {
        array_struct_name = PyUnicode_InternFromString("__array_struct__");
        if (array_struct_name == NULL) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (ReleaserType == NULL) {
        ReleaserType = PyType_FromSpec(&releaser_spec);
        if (ReleaserType == NULL) {
            Py_DECREF(m);
            return NULL;
        }
    }
    Py_INCREF(ReleaserType);
    if (PyModule_AddObject(m, "Releaser", ReleaserType) < 0) {
        Py_DECREF(ReleaserType);
        Py_DECREF(m);
        return NULL;
    }
    {
        PyObject *atexit = PyImport_ImportModule("atexit");
        PyObject *hook = PyObject_GetAttrString(m, "_at_exit");
        PyObject *r = NULL;

        if (atexit != NULL && hook != NULL) {
            r = PyObject_CallMethod(atexit, "register", "O", hook);
        }
        Py_XDECREF(hook);
        Py_XDECREF(atexit);
        if (r == NULL) {
            Py_DECREF(m);
            return NULL;
        }
        Py_DECREF(r);
    }
    if (ga_exchange_add(m) < 0 || ga_cai_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
