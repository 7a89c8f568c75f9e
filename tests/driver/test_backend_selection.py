"""The process-wide backend is made once, even when making it runs finalizers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import gpuarray._driver as d

    made = []
    real = d._checked

    def checked(backend):
        # what a finalizer run by a collection inside the backend's making
        # does: ask for the process backend on the same thread
        if not made:
            made.append(1)
            inner = d.get_backend()
            assert inner is not None
        return real(backend)

    d._checked = checked
    d.set_backend(None)
    outer = d.get_backend()
    assert outer is d.get_backend()  # one backend for the process
    print("ok", type(outer).__name__)
""")


def test_a_finalizer_asking_for_the_backend_while_it_is_made_does_not_deadlock():
    # Before: get_backend() made the backend under a non-reentrant lock, and a
    # finalizer (_stream._destroy_stream) run by the collector inside the
    # making waited for that lock on the same thread: the process hung
    # (test_race_detector.py over the stand-in, run in one process).
    env = {"GPUARRAY_BACKEND": "sim", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok Checkpoint")
