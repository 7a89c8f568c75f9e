/* The stand-in driver's bridge to Python: call(name, n, args) -> CUresult.
 *
 * One concern, included by _libcuda.c only (one translation unit; the
 * builder, sim/gpuarray_sim/standin/__init__.py, hashes every file it
 * includes): finding the running interpreter's C-API at run time and serving
 * a driver call by gpuarray_sim.standin._serve.serve(name, args).
 * Expects <dlfcn.h>, <pthread.h>, <stddef.h>, <stdio.h>, <string.h> and the CUresult
 * codes of _libcuda.c to be in scope.  Also included by _libnvjitlink.c
 * (the stand-in nvJitLink, its own library), which maps those names to
 * nvJitLink's result codes and names itself in the messages below
 * (BRIDGE_WHO, BRIDGE_UNKNOWN: defaults for the driver).
 */
#ifndef GPUARRAY_STANDIN_BRIDGE_H
#define GPUARRAY_STANDIN_BRIDGE_H

#ifndef BRIDGE_WHO
#define BRIDGE_WHO "gpuarray stand-in driver"
#endif
#ifndef BRIDGE_UNKNOWN
#define BRIDGE_UNKNOWN "CUDA_ERROR_UNKNOWN"
#endif

/* ------------------------------------------------ Python C-API (stable ABI) */
/* Resolved at run time in the process's global scope (dlsym(RTLD_DEFAULT)),
 * never linked: the library must load and answer in a process that has no
 * Python (a C program, a tool probing the driver -- `python -m gpuarray
 * standin --` puts it first for a whole process tree), where an undefined
 * strong reference would make dlopen (RTLD_NOW) or the first call fail.
 * Until every name resolves -- no interpreter in the global scope, e.g. a C
 * program, or one that loaded libpython RTLD_LOCAL -- each call answers
 * CUDA_ERROR_NOT_INITIALIZED; resolution is retried on later calls (a
 * process may embed Python after probing the driver) and published once. */
typedef struct _object PyObject;
typedef int PyGILState_STATE;

typedef struct {
    int (*IsInitialized)(void);
    PyGILState_STATE (*GILState_Ensure)(void);
    void (*GILState_Release)(PyGILState_STATE);
    PyObject *(*Import_ImportModule)(const char *);
    PyObject *(*Object_GetAttrString)(PyObject *, const char *);
    PyObject *(*Object_CallFunctionObjArgs)(PyObject *, ...);
    PyObject *(*Unicode_FromString)(const char *);
    PyObject *(*Long_FromUnsignedLongLong)(unsigned long long);
    long (*Long_AsLong)(PyObject *);
    PyObject *(*Tuple_New)(ptrdiff_t);
    int (*Tuple_SetItem)(PyObject *, ptrdiff_t, PyObject *);
    PyObject *(*Err_Occurred)(void);
    void (*Err_Print)(void);
    void (*Err_Fetch)(PyObject **, PyObject **, PyObject **);
    void (*Err_Restore)(PyObject *, PyObject *, PyObject *);
    void (*DecRef)(PyObject *);
    int (*AddPendingCall)(int (*)(void *), void *);
} PyApi;

/* The names, in PyApi's field order. */
static const char *const py_names[] = {
    "Py_IsInitialized", "PyGILState_Ensure", "PyGILState_Release", "PyImport_ImportModule",
    "PyObject_GetAttrString", "PyObject_CallFunctionObjArgs", "PyUnicode_FromString",
    "PyLong_FromUnsignedLongLong", "PyLong_AsLong", "PyTuple_New", "PyTuple_SetItem",
    "PyErr_Occurred", "PyErr_Print", "PyErr_Fetch", "PyErr_Restore", "Py_DecRef",
    "Py_AddPendingCall",
};
_Static_assert(sizeof(PyApi) == sizeof(py_names) / sizeof(py_names[0]) * sizeof(void (*)(void)),
               "PyApi and py_names must list the same functions");

static PyApi py_api;
static int py_ready; /* 1 once py_api is filled (release store / acquire load) */
static pthread_mutex_t py_lock = PTHREAD_MUTEX_INITIALIZER;

/* The interpreter's C-API, or NULL when this process has none (yet). */
static const PyApi *python(void)
{
    if (__atomic_load_n(&py_ready, __ATOMIC_ACQUIRE))
        return &py_api;
    pthread_mutex_lock(&py_lock);
    if (!py_ready) {
        union { PyApi api; void *fn[sizeof(py_names) / sizeof(py_names[0])]; } found;
        size_t i;
        for (i = 0; i < sizeof(py_names) / sizeof(py_names[0]); i++) {
            found.fn[i] = dlsym(RTLD_DEFAULT, py_names[i]);
            if (found.fn[i] == NULL)
                break;
        }
        if (i == sizeof(py_names) / sizeof(py_names[0])) {
            py_api = found.api;
            __atomic_store_n(&py_ready, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&py_lock);
    return py_ready ? &py_api : NULL;
}

/* Driver calls that only release something (base names: a served form's name is the base or
 * the base and a suffix, cuMemFree_v2, cuMemFreeAsync_ptsz).  While the interpreter finalizes,
 * destructors still make them (a buffer alive at exit) and the simulator -- Python -- can serve
 * no call; the real driver, alive until the process exits, releases and answers CUDA_SUCCESS,
 * and so does the stand-in: the simulated device goes with the process.  Any other call then
 * answers CUDA_ERROR_NOT_INITIALIZED. */
static const char *const release_calls[] = {
    "cuMemFree", "cuMemFreeAsync", "cuMemFreeHost", "cuMemHostUnregister", "cuStreamDestroy",
    "cuEventDestroy", "cuModuleUnload", "cuLibraryUnload", "cuLinkDestroy", "cuCtxDestroy",
    "cuDevicePrimaryCtxRelease", "cuMemPoolDestroy", "cuGraphDestroy", "cuGraphExecDestroy",
    "cuIpcCloseMemHandle", "cuMemRelease", "cuMemUnmap", "cuMemAddressFree",
    "cuUserObjectRelease", "cuArrayDestroy", "cuTexObjectDestroy", "cuSurfObjectDestroy",
    "nvJitLinkDestroy",
};
static int py_served; /* a call found the interpreter up: later, it is finalizing */
/* The calling thread's current context as the simulator last answered or set it (cuCtxGetCurrent,
 * cuCtxSetCurrent, cuCtxPushCurrent): what a destructor that saves and restores the current
 * context around its release is answered while the interpreter finalizes. */
static __thread unsigned long long cur_ctx;

static int named(const char *name, const char *base)
{
    size_t n = strlen(base);
    return strncmp(name, base, n) == 0 && (name[n] == '\0' || name[n] == '_');
}

/* While the interpreter finalizes: a release succeeds, and so do the context calls around it. */
static CUresult finalizing_call(const char *name, const unsigned long long *a)
{
    for (size_t i = 0; i < sizeof(release_calls) / sizeof(release_calls[0]); i++)
        if (named(name, release_calls[i]))
            return CUDA_SUCCESS;
    if (named(name, "cuCtxGetCurrent") || named(name, "cuCtxPopCurrent")) {
        if (a[0] != 0)
            *(unsigned long long *)(uintptr_t)a[0] = cur_ctx;
        if (named(name, "cuCtxPopCurrent"))
            cur_ctx = 0;
        return a[0] != 0 || named(name, "cuCtxPopCurrent") ? CUDA_SUCCESS : 1; /* INVALID_VALUE */
    }
    if (named(name, "cuCtxSetCurrent") || named(name, "cuCtxPushCurrent")) {
        cur_ctx = a[0];
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_INITIALIZED;
}

/* After a served call: the current context it answered or set. */
static void note_context(const char *name, const unsigned long long *a)
{
    if (strncmp(name, "cuCtx", 5) != 0)
        return; /* every other call: one compare */
    if (named(name, "cuCtxGetCurrent") && a[0] != 0)
        cur_ctx = *(const unsigned long long *)(uintptr_t)a[0];
    else if (named(name, "cuCtxSetCurrent") || named(name, "cuCtxPushCurrent"))
        cur_ctx = a[0];
}

static PyObject *serve_fn; /* gpuarray_sim.standin._serve.serve, set under the GIL */
static PyObject *reraise_fn; /* _serve.reraise_interruption, set with serve_fn */

/* A pending call (Py_AddPendingCall: the main thread, the GIL held, at the
 * next Python instruction): raise the interruption the last call kept. */
static int reraise_interruption(void *unused)
{
    (void)unused;
    PyObject *r = py_api.Object_CallFunctionObjArgs(reraise_fn, NULL);
    if (r == NULL)
        return -1; /* the exception propagates from the caller's instruction */
    py_api.DecRef(r);
    return 0;
}

/* Call serve(name, (a0, a1, ...)) and return its CUresult.  Never raises:
 * an error of this bridge itself is printed to stderr and becomes
 * CUDA_ERROR_UNKNOWN (the serving function keeps its own errors).
 *
 * The caller's pending exception, if any (a C tp_dealloc freeing device
 * memory while an exception unwinds), is set aside while the call is served
 * and put back afterwards: serving runs Python code, which must not start
 * with an exception set, and the caller's exception is not ours to lose.
 * Likewise an exception a signal handler raises while the simulator serves
 * a call on the main thread (Ctrl-C, a test's time limit) fails the call
 * (CUDA_ERROR_UNKNOWN) and is raised again, the same object, at the
 * caller's next Python instruction (Py_AddPendingCall): where a real
 * driver's caller would get it.
 *
 * Every call takes the GIL: the simulator is Python.  A thread that holds
 * the GIL while it waits, in C, for another thread's driver call therefore
 * deadlocks, where a driver would not (docs/sim/testing.rst). */
static CUresult call(const char *name, int n, const unsigned long long *a)
{
    const PyApi *py = python();
    if (py == NULL || !py->IsInitialized())
        return py != NULL && __atomic_load_n(&py_served, __ATOMIC_RELAXED)
                   ? finalizing_call(name, a)
                   : CUDA_ERROR_NOT_INITIALIZED;
    __atomic_store_n(&py_served, 1, __ATOMIC_RELAXED);
    PyGILState_STATE g = py->GILState_Ensure();
    PyObject *pending_type, *pending_value, *pending_tb;
    py->Err_Fetch(&pending_type, &pending_value, &pending_tb);
    CUresult rc = CUDA_ERROR_UNKNOWN;
    PyObject *args = NULL, *pyname = NULL, *res = NULL;
    if (serve_fn == NULL) {
        PyObject *mod = py->Import_ImportModule("gpuarray_sim.standin._serve");
        if (mod != NULL) {
            reraise_fn = py->Object_GetAttrString(mod, "reraise_interruption");
            if (reraise_fn != NULL)
                serve_fn = py->Object_GetAttrString(mod, "serve");
            py->DecRef(mod);
        }
        if (serve_fn == NULL)
            goto fail;
    }
    args = py->Tuple_New(n);
    if (args == NULL)
        goto fail;
    for (int i = 0; i < n; i++) {
        PyObject *v = py->Long_FromUnsignedLongLong(a[i]);
        if (v == NULL || py->Tuple_SetItem(args, i, v) < 0)
            goto fail;
    }
    pyname = py->Unicode_FromString(name);
    if (pyname == NULL)
        goto fail;
    res = py->Object_CallFunctionObjArgs(serve_fn, pyname, args, NULL);
    if (res == NULL)
        goto fail;
    rc = (CUresult)py->Long_AsLong(res);
    if (rc == -1 && py->Err_Occurred())
        goto fail;
    if (rc == CUDA_SUCCESS)
        note_context(name, a);
    if (rc == SERVE_INTERRUPTED) {
        /* The call failed; the interruption is raised again, in the caller,
         * as soon as Python code runs after this call returns. */
        rc = CUDA_ERROR_UNKNOWN;
        if (py->AddPendingCall(reraise_interruption, NULL) != 0)
            fprintf(stderr, BRIDGE_WHO ": %s was interrupted by a signal "
                            "handler's exception, which could not be raised again "
                            "(Py_AddPendingCall failed): " BRIDGE_UNKNOWN "\n", name);
    }
    goto done;
fail:
    fprintf(stderr, BRIDGE_WHO ": %s failed in the Python bridge "
                    "(" BRIDGE_UNKNOWN "):\n", name);
    if (py->Err_Occurred())
        py->Err_Print();
    rc = CUDA_ERROR_UNKNOWN;
done:
    if (res) py->DecRef(res);
    if (pyname) py->DecRef(pyname);
    if (args) py->DecRef(args);
    py->Err_Restore(pending_type, pending_value, pending_tb);
    py->GILState_Release(g);
    return rc;
}

#endif /* GPUARRAY_STANDIN_BRIDGE_H */
