/* The DLPack C exchange table (dlpack.h 1.3, DLPackExchangeAPI): the producer.
 * Part of the extension gpuarray.interop._dlpack_core (see _dlpack_core.c
 * and _dlpack_abi.h); Limited API of Python 3.10.
 *
 * Producer: one static table for the process, published by the interop
 * layer as DeviceNDArray.__dlpack_c_exchange_api__ (a PyCapsule named
 * "dlpack_exchange_api"). This file knows no array semantics: the interop
 * layer registers, once, the array type and four Python hooks
 * (exchange_install):
 *   prepare(arr)  -> a "gpuarray.dltensor" capsule (exchange_prepare) holding
 *                    the array's DLTensor (strides in elements, shape and
 *                    strides in the same block) and its flags; C caches it
 *                    on the array (slot _dlt), so the C functions read one
 *                    attribute per call and allocate nothing for a borrowed
 *                    DLTensor.  The first capsule set is kept for the array's
 *                    life: a caller's borrowed shape and strides point into
 *                    it.  Two threads may both prepare (the hook runs Python
 *                    code, so the GIL may switch inside it); the check and
 *                    the set that follow it run no Python code, so the one
 *                    that finishes first sets _dlt and the other uses it;
 *   to_py(capsule) -> the DeviceNDArray owning a "dltensor_versioned" capsule;
 *   allocate(device_type, device_id, code, bits, lanes, shape) -> a new array;
 *   stream(device_type, device_id) -> the handle of gpuarray's default stream
 *                    (cached per device until exchange_forget_streams(), which
 *                    gpuarray calls when its configuration is read again; a
 *                    cached answer is given without the GIL).
 * Every function returns 0, or -1 with a Python exception set (the allocator:
 * SetError, once, instead), whatever object or NULL it is given.  Called
 * from a thread that has no Python thread state (a C library's worker), the
 * exception has nowhere to go -- the thread state made for the call dies with
 * it -- so a failure that SetError does not take is written to
 * sys.unraisablehook instead of being lost; -1 is returned all the same.
 *
 * The consumer side (exchange_import, exchange_stream: another producer's
 * table used) is with the other imports, in _dlpack_consume.c.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "_dlpack_abi.h"

static const char PREPARED[] = "gpuarray.dltensor";
enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };

typedef struct {
    DLTensor t;      /* shape and strides point into dims */
    uint64_t flags;  /* DLPACK_FLAG_BITMASK_READ_ONLY for a read-only array */
    int64_t dims[];  /* shape, then strides: 2 * ndim */
} Prepared;

static PyObject *array_type; /* DeviceNDArray; NULL until exchange_install */
static PyObject *hook_prepare, *hook_to_py, *hook_allocate, *hook_stream;
static PyObject *dlt_name;   /* interned "_dlt" */
static uint32_t tensor_minor = 1;
/* current_work_stream's answers for kDLCUDA and kDLCUDAManaged devices 0..63
 * (NULL: ask the hook). Written with the GIL held, read without it (a cached
 * answer takes no lock): one pointer-sized word each, so a reader sees an
 * answer or NULL, never half of one. */
#define CACHED_DEVICES 64
static void *volatile cached_streams[2][CACHED_DEVICES];

static void *volatile *
cached_stream(int32_t device_type, int32_t device_id)
{
    if ((device_type != kDLCUDA && device_type != kDLCUDAManaged) || device_id < 0
        || device_id >= CACHED_DEVICES) {
        return NULL;
    }
    return &cached_streams[device_type == kDLCUDAManaged][device_id];
}

/* --- producer --- */

/* The prepared DLTensor of `obj` (a borrowed pointer, valid while obj keeps
 * its _dlt), or NULL with an exception. */
static Prepared *
prepared(PyObject *obj)
{
    PyObject *cap;
    Prepared *p;

    if (obj == NULL) {
        PyErr_SetString(PyExc_ValueError, "DLPack exchange: the Python object is NULL");
        return NULL;
    }
    if (array_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpuarray's DLPack exchange table is not installed");
        return NULL;
    }
    if (!PyObject_TypeCheck(obj, (PyTypeObject *)array_type)) {
        PyErr_Format(PyExc_TypeError, "gpuarray's DLPack exchange table takes a %R, got %R",
                     array_type, (PyObject *)Py_TYPE(obj));
        return NULL;
    }
    cap = PyObject_GetAttr(obj, dlt_name);
    if (cap == NULL) {
        PyObject *made, *kept;

        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return NULL;
        }
        PyErr_Clear();
        made = PyObject_CallFunctionObjArgs(hook_prepare, obj, NULL);
        if (made == NULL) {
            return NULL;
        }
        if (!PyCapsule_IsValid(made, PREPARED)) {
            PyErr_Format(PyExc_TypeError, "the prepare hook returned %R, not a prepared "
                         "DLTensor", (PyObject *)Py_TYPE(made));
            Py_DECREF(made);
            return NULL;
        }
        /* Check and set with no Python code between (slot access): another
         * thread may have set _dlt while the hook ran; the first one stays. */
        kept = PyObject_GetAttr(obj, dlt_name);
        if (kept != NULL) {
            Py_DECREF(made);
            cap = kept;
        }
        else if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_DECREF(made);
            return NULL;
        }
        else {
            PyErr_Clear();
            if (PyObject_SetAttr(obj, dlt_name, made) < 0) {
                Py_DECREF(made);
                return NULL;
            }
            cap = made;
        }
    }
    if (!PyCapsule_IsValid(cap, PREPARED)) {
        PyErr_Format(PyExc_TypeError, "%R._dlt is not a prepared DLTensor", (PyObject *)Py_TYPE(obj));
        Py_DECREF(cap);
        return NULL;
    }
    p = (Prepared *)PyCapsule_GetPointer(cap, PREPARED);
    /* The array holds the capsule (its _dlt): the pointer outlives this call. */
    if (Py_REFCNT(cap) < 2) {
        PyErr_Format(PyExc_RuntimeError, "%R does not keep its prepared DLTensor",
                     (PyObject *)Py_TYPE(obj));
        Py_DECREF(cap);
        return NULL;
    }
    Py_DECREF(cap);
    return p;
}

static int
dltensor_from_py_object(void *py_object, DLTensor *out)
{
    Prepared *p;

    if (out == NULL) {
        PyErr_SetString(PyExc_ValueError, "dltensor_from_py_object_no_sync: out is NULL");
        return -1;
    }
    p = prepared((PyObject *)py_object);
    if (p == NULL) {
        return -1;
    }
    *out = p->t; /* shape and strides live as long as the array */
    return 0;
}

/* A managed tensor that keeps `obj` alive until its deleter runs. */
static int
managed_from(PyObject *obj, Prepared *p, DLManagedTensorVersioned **out)
{
    size_t head = sizeof(DLManagedTensorVersioned), n = 2 * (size_t)p->t.ndim;
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)malloc(head + 8 * n);

    if (m == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    m->version.major = 1;
    m->version.minor = tensor_minor;
    m->manager_ctx = obj;
    m->deleter = ga_deleter_versioned;
    m->flags = p->flags;
    m->dl_tensor = p->t;
    if (n) {
        int64_t *dims = (int64_t *)((char *)m + head);

        memcpy(dims, p->dims, 8 * n);
        m->dl_tensor.shape = dims;
        m->dl_tensor.strides = dims + p->t.ndim;
    }
    Py_INCREF(obj);
    ga_count_export();
    *out = m;
    return 0;
}

static int
managed_tensor_from_py_object(void *py_object, DLManagedTensorVersioned **out)
{
    Prepared *p;

    if (out == NULL) {
        PyErr_SetString(PyExc_ValueError, "managed_tensor_from_py_object_no_sync: out is NULL");
        return -1;
    }
    p = prepared((PyObject *)py_object);
    if (p == NULL) {
        return -1;
    }
    return managed_from((PyObject *)py_object, p, out);
}

static int
managed_tensor_to_py_object(DLManagedTensorVersioned *tensor, void **out_py_object)
{
    PyObject *cap, *res;

    if (tensor == NULL) {
        PyErr_SetString(PyExc_ValueError, "managed_tensor_to_py_object_no_sync: tensor is NULL");
        return -1;
    }
    /* From here on the tensor is ours: its deleter runs exactly once. */
    cap = PyCapsule_New(tensor, GA_NAME_VERSIONED, ga_capsule_destructor);
    if (cap == NULL) {
        if (tensor->deleter != NULL) {
            tensor->deleter(tensor);
        }
        return -1;
    }
    if (out_py_object == NULL) {
        Py_DECREF(cap); /* unconsumed: the destructor calls the deleter */
        PyErr_SetString(PyExc_ValueError, "managed_tensor_to_py_object_no_sync: out is NULL");
        return -1;
    }
    if (hook_to_py == NULL) {
        Py_DECREF(cap);
        PyErr_SetString(PyExc_RuntimeError, "gpuarray's DLPack exchange table is not installed");
        return -1;
    }
    res = PyObject_CallFunctionObjArgs(hook_to_py, cap, NULL);
    Py_DECREF(cap);
    if (res == NULL) {
        return -1;
    }
    *out_py_object = res;
    return 0;
}

/* Under a GIL taken with PyGILState_Ensure by a thread that had no Python
 * thread state (had_state 0): the pending exception would die with the
 * thread state PyGILState_Release is about to delete, so write it to
 * sys.unraisablehook now, naming the function. */
static void
keep_or_report(int had_state, const char *function)
{
    PyObject *where;

    if (had_state || !PyErr_Occurred()) {
        return;
    }
    where = PyUnicode_FromFormat("gpuarray's DLPack exchange table %s (called from a thread "
                                 "with no Python thread state: its error is reported here)",
                                 function);
    PyErr_WriteUnraisable(where);
    Py_XDECREF(where);
}

/* Pass the pending Python exception to SetError (clearing it), or leave it
 * set when there is no SetError. */
static void
report(void *error_ctx, void (*set_error)(void *, const char *, const char *))
{
    PyObject *type, *value, *tb, *name = NULL, *text = NULL;
    const char *kind = NULL, *message = NULL;

    if (set_error == NULL) {
        return;
    }
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (type != NULL) {
        name = PyObject_GetAttrString(type, "__name__");
    }
    if (value != NULL) {
        text = PyObject_Str(value);
    }
    PyErr_Clear();
    if (name != NULL && PyUnicode_Check(name)) {
        kind = PyUnicode_AsUTF8AndSize(name, NULL);
    }
    if (text != NULL && PyUnicode_Check(text)) {
        message = PyUnicode_AsUTF8AndSize(text, NULL);
    }
    PyErr_Clear();
    set_error(error_ctx, kind != NULL ? kind : "RuntimeError",
              message != NULL ? message : "gpuarray's DLPack allocator failed");
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static int
allocate_into(DLTensor *prototype, DLManagedTensorVersioned **out)
{
    PyObject *shape, *arr;
    Prepared *p;
    int32_t i;
    int rc;

    if (prototype == NULL || out == NULL) {
        PyErr_Format(PyExc_ValueError, "managed_tensor_allocator: %s is NULL",
                     prototype == NULL ? "prototype" : "out");
        return -1;
    }
    if (prototype->ndim < 0 || prototype->ndim > GA_MAX_NDIM
        || (prototype->ndim > 0 && prototype->shape == NULL)) {
        PyErr_Format(PyExc_ValueError, "managed_tensor_allocator: invalid prototype (ndim=%d, "
                     "shape pointer %s)", (int)prototype->ndim,
                     prototype->shape == NULL ? "NULL" : "set");
        return -1;
    }
    if (hook_allocate == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpuarray's DLPack exchange table is not installed");
        return -1;
    }
    shape = PyTuple_New(prototype->ndim);
    if (shape == NULL) {
        return -1;
    }
    for (i = 0; i < prototype->ndim; i++) {
        PyObject *v = PyLong_FromLongLong((long long)prototype->shape[i]);

        if (v == NULL) {
            Py_DECREF(shape);
            return -1;
        }
        PyTuple_SetItem(shape, i, v);
    }
    /* The hook checks the shape (negative, overflowing) and the dtype. */
    arr = PyObject_CallFunction(hook_allocate, "iiiiiN", (int)prototype->device.device_type,
                                (int)prototype->device.device_id, (int)prototype->dtype.code,
                                (int)prototype->dtype.bits, (int)prototype->dtype.lanes, shape);
    if (arr == NULL) {
        return -1;
    }
    p = prepared(arr);
    rc = p == NULL ? -1 : managed_from(arr, p, out);
    Py_DECREF(arr);
    return rc;
}

static int
managed_tensor_allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                         void (*set_error)(void *, const char *, const char *))
{
    int had_state = PyGILState_GetThisThreadState() != NULL;
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = allocate_into(prototype, out);

    if (rc != 0) {
        report(error_ctx, set_error);
        keep_or_report(had_state, "managed_tensor_allocator");
    }
    PyGILState_Release(gil);
    return rc;
}

/* The stream hook's answer, cached; 0 or -1 with an exception (GIL held). */
static int
work_stream(int32_t device_type, int32_t device_id, void **out_current_stream)
{
    PyObject *r;
    void *handle, *volatile *slot;

    if (out_current_stream == NULL) {
        PyErr_SetString(PyExc_ValueError, "current_work_stream: out_current_stream is NULL");
        return -1;
    }
    if (hook_stream == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpuarray's DLPack exchange table is not installed");
        return -1;
    }
    r = PyObject_CallFunction(hook_stream, "ii", (int)device_type, (int)device_id);
    if (r == NULL) {
        return -1;
    }
    handle = PyLong_AsVoidPtr(r);
    Py_DECREF(r);
    if (handle == NULL && PyErr_Occurred()) {
        return -1;
    }
    slot = cached_stream(device_type, device_id);
    if (slot != NULL) {
        *slot = handle;
    }
    *out_current_stream = handle;
    return 0;
}

static int
current_work_stream(int32_t device_type, int32_t device_id, void **out_current_stream)
{
    PyGILState_STATE gil;
    int had_state, rc;
    void *volatile *slot = cached_stream(device_type, device_id);
    void *handle = slot != NULL ? *slot : NULL;

    if (out_current_stream != NULL && (handle != NULL || device_type == kDLCPU
                                       || device_type == kDLCUDAHost)) {
        *out_current_stream = handle; /* cached, or host memory: no stream to order on */
        return 0;
    }
    had_state = PyGILState_GetThisThreadState() != NULL;
    gil = PyGILState_Ensure();
    rc = work_stream(device_type, device_id, out_current_stream);
    if (rc != 0) {
        keep_or_report(had_state, "current_work_stream");
    }
    PyGILState_Release(gil);
    return rc;
}

static DLPackExchangeAPI table = {
    {{1, GA_DLPACK_MINOR}, NULL},
    managed_tensor_allocator,
    managed_tensor_from_py_object,
    managed_tensor_to_py_object,
    dltensor_from_py_object,
    current_work_stream,
};

/* --- Python functions --- */

static void
replace(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;

    Py_INCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

/* exchange_install(array_type, prepare, to_py, allocate, stream, tensor_minor)
 * -> the table's "dlpack_exchange_api" capsule. */
static PyObject *
exchange_install(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long minor;
    int i;

    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "exchange_install() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyType_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "exchange_install: %R is not a type", args[0]);
        return NULL;
    }
    for (i = 1; i < 5; i++) {
        if (!PyCallable_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "exchange_install: hook %R is not callable", args[i]);
            return NULL;
        }
    }
    minor = PyLong_AsLong(args[5]);
    if (minor == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (minor < 0 || minor > GA_DLPACK_MINOR) {
        PyErr_Format(PyExc_ValueError, "exchange_install: tensor minor version %ld", minor);
        return NULL;
    }
    replace(&array_type, args[0]);
    replace(&hook_prepare, args[1]);
    replace(&hook_to_py, args[2]);
    replace(&hook_allocate, args[3]);
    replace(&hook_stream, args[4]);
    memset((void *)cached_streams, 0, sizeof cached_streams);
    tensor_minor = (uint32_t)minor;
    return PyCapsule_New(&table, GA_NAME_API, NULL);
}

/* exchange_forget_streams(): the stream hook's cached answers are stale. */
static PyObject *
exchange_forget_streams(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    memset((void *)cached_streams, 0, sizeof cached_streams);
    Py_RETURN_NONE;
}

static void
prepared_destructor(PyObject *capsule)
{
    free(PyCapsule_GetPointer(capsule, PREPARED));
}

/* exchange_prepare(data, shape, byte_strides, itemsize, code, bits, lanes,
 *                  device_type, device_id, readonly) -> "gpuarray.dltensor" */
static PyObject *
exchange_prepare(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    GaLayout L;
    Prepared *p;
    PyObject *cap;
    Py_ssize_t i;
    int readonly;

    (void)module;
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "exchange_prepare() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    if (ga_parse_layout(args, &L) < 0 || (readonly = PyObject_IsTrue(args[9])) < 0) {
        return NULL;
    }
    p = (Prepared *)calloc(1, sizeof(Prepared) + 16 * (size_t)L.ndim);
    if (p == NULL) {
        return PyErr_NoMemory();
    }
    p->t.data = (void *)(uintptr_t)L.data;
    p->t.device = L.device;
    p->t.ndim = (int32_t)L.ndim;
    p->t.dtype = L.dtype;
    p->flags = readonly ? GA_FLAG_READ_ONLY : 0;
    if (L.ndim) {
        p->t.shape = p->dims;
        p->t.strides = p->dims + L.ndim;
        for (i = 0; i < L.ndim; i++) {
            p->dims[i] = (int64_t)L.shape[i];
            p->dims[L.ndim + i] = (int64_t)L.strides[i];
        }
    }
    cap = PyCapsule_New(p, PREPARED, prepared_destructor);
    if (cap == NULL) {
        free(p);
    }
    return cap;
}

static PyMethodDef exchange_methods[] = {
    {"exchange_install", (PyCFunction)(void (*)(void))exchange_install, METH_FASTCALL,
     "exchange_install(array_type, prepare, to_py, allocate, stream, tensor_minor) -> the "
     "DLPack exchange table's capsule"},
    {"exchange_forget_streams", exchange_forget_streams, METH_NOARGS,
     "exchange_forget_streams(): drop the stream hook's cached answers"},
    {"exchange_prepare", (PyCFunction)(void (*)(void))exchange_prepare, METH_FASTCALL,
     "exchange_prepare(data, shape, byte_strides, itemsize, code, bits, lanes, device_type, "
     "device_id, readonly) -> an array's prepared DLTensor"},
    {NULL, NULL, 0, NULL},
};

int
ga_exchange_add(PyObject *module)
{
    if (dlt_name == NULL) {
        dlt_name = PyUnicode_InternFromString("_dlt");
        if (dlt_name == NULL) {
            return -1;
        }
    }
    return PyModule_AddFunctions(module, exchange_methods);
}
