"""The stand-in driver's C bridge outside the happy path (issue 30).

* A process that is not Python (a C test program, a tool probing the driver)
  may load the stand-in ``libcuda.so.1`` -- ``python -m gpuarray standin --``
  puts it first for the whole process tree -- and gets
  ``CUDA_ERROR_NOT_INITIALIZED`` from every call instead of dying of an
  undefined ``Py_*`` symbol.
* A driver call made while a Python exception is pending (a C ``tp_dealloc``
  freeing memory during unwinding) is served and leaves that exception as it
  found it.
* A ``KeyboardInterrupt`` raised while a call is being served is delivered to
  the caller once the call returns, not swallowed as ``CUDA_ERROR_UNKNOWN``;
  so is any other exception a signal handler raises then (a test runner's
  time limit).
* A thread with no Python thread state (a C library's worker) may call the
  driver while the GIL holder waits for it *with the GIL released*; waiting
  while holding the GIL deadlocks (the documented limit: the simulator is
  Python).

The C pieces are compiled here with the machine's C compiler, like the
stand-in itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gpuarray_sim import standin as _standin

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")

CUDA_ERROR_NOT_INITIALIZED = 3


@pytest.fixture(scope="module")
def folder():
    try:
        return _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")


@pytest.fixture(scope="module")
def cc():
    # The stand-in itself is built with the same compiler: if it built, this finds one.
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    pytest.skip("no C compiler (cc, gcc, clang) to build the test's C pieces")


def _compile(cc: str, out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(textwrap.dedent(source))
    res = subprocess.run([cc, "-O1", "-Wall", "-o", str(out), str(src), *flags],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return out


_C_PROGRAM = r"""
    /* No Python here: load the driver as a C tool would and call it. */
    #include <dlfcn.h>
    #include <stdio.h>

    typedef int (*get_proc_t)(const char *, void **, int, unsigned long long, int *);
    typedef int (*init_t)(unsigned int);
    typedef int (*version_t)(int *);
    typedef int (*alloc_t)(unsigned long long *, size_t);

    int main(void)
    {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            printf("dlopen failed: %s\n", dlerror());
            return 2;
        }
        get_proc_t get_proc = (get_proc_t)dlsym(lib, "cuGetProcAddress_v2");
        init_t init = (init_t)dlsym(lib, "cuInit");
        version_t version = (version_t)dlsym(lib, "cuDriverGetVersion");
        if (!get_proc || !init || !version) {
            printf("missing entry points\n");
            return 2;
        }
        void *fn = NULL;
        int status = -1;
        int rc = get_proc("cuInit", &fn, 12000, 0, &status);
        printf("cuGetProcAddress(cuInit) = %d status %d found %d\n", rc, status, fn != NULL);
        printf("cuInit via proc = %d\n", fn ? ((init_t)fn)(0) : -1);
        printf("cuInit = %d\n", init(0));
        int v = -1;
        printf("cuDriverGetVersion = %d\n", version(&v));
        fn = NULL;
        get_proc("cuMemAlloc", &fn, 12000, 0, NULL);
        unsigned long long p = 0;
        printf("cuMemAlloc = %d\n", fn ? ((alloc_t)fn)(&p, 16) : -1);
        return 0;
    }
"""


def test_a_c_program_runs_over_the_standin_without_python(folder, cc, tmp_path):
    prog = _compile(cc, tmp_path / "probe", _C_PROGRAM, "-ldl")
    res = subprocess.run([sys.executable, "-m", "gpuarray", "standin", "--", str(prog)],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    n = CUDA_ERROR_NOT_INITIALIZED
    assert res.stdout.splitlines() == [
        "cuGetProcAddress(cuInit) = 0 status 0 found 1",
        f"cuInit via proc = {n}", f"cuInit = {n}", f"cuDriverGetVersion = {n}",
        f"cuMemAlloc = {n}"], res.stdout + res.stderr


# A helper for the Python-side scenarios, built without Python's headers: the
# few C-API names it uses come from the process that loads it (ctypes.PyDLL).
_HELPER = r"""
    #include <pthread.h>
    #include <stddef.h>

    typedef struct _object PyObject;
    extern PyObject *PyExc_LookupError;
    extern void PyErr_SetString(PyObject *, const char *);

    typedef int (*init_t)(unsigned int);

    /* A C caller that calls the driver while an exception is pending. */
    void call_with_pending_exception(init_t init, int *rc)
    {
        PyErr_SetString(PyExc_LookupError, "the caller's own exception");
        *rc = init(0);
    }

    struct job { init_t init; int rc; };
    static void *worker(void *p)
    {
        struct job *j = (struct job *)p;
        j->rc = j->init(0);
        return NULL;
    }

    /* A C library's worker thread (no Python thread state) calling the driver. */
    int call_from_c_thread(init_t init)
    {
        struct job j = {init, -1};
        pthread_t t;
        if (pthread_create(&t, NULL, worker, &j) != 0)
            return -2;
        pthread_join(t, NULL);
        return j.rc;
    }
"""


@pytest.fixture(scope="module")
def scenarios(folder, cc, tmp_path_factory):
    """Run the Python-side scenarios in one child over the stand-in; its output lines."""
    d = tmp_path_factory.mktemp("standin-hardening")
    helper = _compile(cc, d / "libhelper.so", _HELPER, "-shared", "-fPIC", "-pthread")
    code = textwrap.dedent(f"""
        import ctypes, signal
        from cuda.bindings import driver
        from gpuarray_sim.standin import _serve

        cuinit = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuInit, ctypes.c_void_p).value
        py = ctypes.PyDLL({str(helper)!r})

        # 1. a pending exception survives a driver call made under it
        rc = ctypes.c_int(-1)
        try:
            py.call_with_pending_exception(ctypes.c_void_p(cuinit), ctypes.byref(rc))
        except LookupError as e:
            print("pending:", rc.value, type(e).__name__, e)
        else:
            print("pending: lost", rc.value)

        # 2. a signal whose handler raises while a call is being served (Ctrl-C; a test
        # runner's time limit): the exception reaches the caller, the stand-in serves on
        served = _serve._HANDLERS["cuInit"]
        def signalled(label, sig, caught, said):
            def during(flags):
                signal.raise_signal(sig)
                for _ in range(1000):
                    pass
                raise AssertionError("the signal did not arrive")
            _serve._HANDLERS["cuInit"] = during
            try:
                r = driver.cuInit(0)
                for _ in range(1000):
                    pass
                print(label + ": lost", r)
            except caught as e:
                print(label + ": delivered", said(e))
            _serve._HANDLERS["cuInit"] = served
        signalled("interrupt", signal.SIGINT, KeyboardInterrupt,
                  lambda e: type(_serve.last_error()).__name__)
        print("after:", driver.cuInit(0)[0].value)

        class TimeLimit(Exception):
            pass
        def expire(sig, frame):
            raise TimeLimit("ran past its time")
        signal.signal(signal.SIGALRM, expire)
        signalled("time limit", signal.SIGALRM, TimeLimit,
                  lambda e: str(e) + " " + str(_serve.last_error() is e))
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        print("after time limit:", driver.cuInit(0)[0].value)

        # 3. a thread without a Python thread state, the GIL released by its waiter
        lib = ctypes.CDLL({str(helper)!r})
        print("c thread:", lib.call_from_c_thread(ctypes.c_void_p(cuinit)))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=180, env=_standin.environment(folder))
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def _line(res, key: str) -> str:
    for line in res.stdout.splitlines():
        if line.startswith(key + ":"):
            return line[len(key) + 1:].strip()
    raise AssertionError(f"no {key!r} line in\n{res.stdout}\n{res.stderr}")


def test_a_pending_exception_survives_a_driver_call(scenarios):
    assert _line(scenarios, "pending") == "0 LookupError the caller's own exception", (
        scenarios.stderr)
    assert "SystemError" not in scenarios.stderr


def test_an_interrupt_during_a_served_call_is_delivered(scenarios):
    assert _line(scenarios, "interrupt") == "delivered KeyboardInterrupt", scenarios.stderr
    assert _line(scenarios, "after") == "0"  # the stand-in serves on afterwards
    assert "KeyboardInterrupt" not in scenarios.stderr  # delivered, not printed as a failure


def test_a_signal_handlers_exception_during_a_served_call_is_delivered(scenarios):
    # a test runner's per-test time limit (SIGALRM) firing while the simulator ran a long
    # kernel: the caller gets the handler's exception, not CUDA_ERROR_UNKNOWN
    assert _line(scenarios, "time limit") == "delivered ran past its time True", scenarios.stderr
    assert _line(scenarios, "after time limit") == "0"
    assert "CUDA_ERROR_UNKNOWN" not in scenarios.stderr


def test_a_thread_without_python_state_is_served(scenarios):
    assert _line(scenarios, "c thread") == "0", scenarios.stderr


def test_releases_while_the_interpreter_finalizes_succeed_as_the_drivers_do(folder):
    """A destructor run at interpreter exit (a buffer a module still holds) frees through the
    driver after the simulator -- Python -- can serve no call: the real driver, alive until the
    process ends, answers CUDA_SUCCESS, and cuda.core printed "cuMemFreeAsync failed during
    resource destruction (CUDA error 3)" for every buffer alive at exit over the stand-in.  Now
    the releases succeed, the context calls around them too (the current context the simulator
    last answered), and any other call answers CUDA_ERROR_NOT_INITIALIZED."""
    code = textwrap.dedent("""
        import os
        from cuda.bindings import driver

        driver.cuInit(0)
        err, dev = driver.cuDeviceGet(0)
        err, ctx = driver.cuDevicePrimaryCtxRetain(dev)
        driver.cuCtxSetCurrent(ctx)
        err, ptr = driver.cuMemAlloc(256)
        assert err == driver.CUresult.CUDA_SUCCESS, err

        class AtExit:
            def __del__(self, drv=driver, write=os.write, ptr=ptr, ctx=ctx, dev=dev):
                err, cur = drv.cuCtxGetCurrent()
                said = [f"get {int(err)} {int(cur) == int(ctx)}",
                        f"set {int(drv.cuCtxSetCurrent(ctx)[0])}",
                        f"free {int(drv.cuMemFree(ptr)[0])}",
                        f"release {int(drv.cuDevicePrimaryCtxRelease(dev)[0])}",
                        f"alloc {int(drv.cuMemAlloc(256)[0])}"]
                write(1, ("finalizing: " + ", ".join(said) + "\\n").encode())

        KEEP = AtExit()  # destroyed when the module is torn down, the interpreter finalizing
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=_standin.environment(folder))
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert _line(res, "finalizing") == (
        f"get 0 True, set 0, free 0, release 0, alloc {CUDA_ERROR_NOT_INITIALIZED}"), res.stdout
