/* gpuarray.interop._dlpack_core: the module (the C half of DLPack, dlpack.h 1.x).
 *
 * One concern: the extension module itself -- its definition and init, which
 * registers the functions of each unit (_dlpack_core.c: exports,
 * _dlpack_consume.c: imports, _dlpack_exchange.c: the C exchange table,
 * _cai_fields.c: the CUDA Array Interface parser) and the exports' atexit
 * hook -- and host_address, which a host export's data field and every host
 * copy need. Calls run one way: from here into the units, never back.
 *
 * Host addresses: host_address(obj) reads the NumPy array interface in C
 * (obj.__array_struct__, a capsule holding a PyArrayInterface, which every
 * ndarray has) and returns the address of element [0, ..., 0]; the capsule
 * and its copy of the interface are released before returning, the caller
 * keeps obj (and so the memory) alive. A third of the cost of ctypes'
 * addressof(c_char.from_buffer(a)), and read-only arrays too.
 *
 * Written against the Limited API of Python 3.10 (abi3).
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_dlpack_abi.h"

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
    {"host_address", core_host_address, METH_O,
     "host_address(obj) -> int: address of element [0, ..., 0] of an object with the NumPy "
     "array interface (__array_struct__)"},
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
    if (ga_export_add(m) < 0 || ga_consume_add(m) < 0) {
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
