"""IPC events as cuda.h has them, through cuda.bindings over the stand-in (issue 45).

Before, ``cuIpcGetEventHandle`` and ``cuIpcOpenEventHandle`` answered
``CUDA_ERROR_NOT_SUPPORTED``, so cuda.core's IPC-enabled events
(``EventOptions(ipc_enabled=True)``) could not be made.  cuda.h: only an
event created with ``CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`` is
exported, as a 64-byte handle; the event opened from it in another process
behaves like a local event without timing, and ``cuEventRecord``,
``cuEventSynchronize``, ``cuStreamWaitEvent`` and ``cuEventQuery`` may be
used on it in either process.

- refusals: an event without ``CU_EVENT_INTERPROCESS``, a handle that is no
  event handle, a handle opened in the process that made it;
- a child process opens the parent's event and memory, waits for the
  parent's record (which the parent never synchronizes itself: the GPU runs
  its work unasked), reads what the parent's stream wrote before the record;
  then records the event itself after a write, and the parent waits for that
  record (``cuEventSynchronize`` and ``cuStreamWaitEvent``) and reads the
  child's write.
"""

from __future__ import annotations

import textwrap

import pytest

from sim.tests.standin.test_standin import BINDINGS_PRELUDE, folder, ok, run  # noqa: F401  (the module-scoped fixture)

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")

_PRELUDE = BINDINGS_PRELUDE + '''
def err(r):
    return (r[0] if isinstance(r, tuple) else r).name
IPC = int(d.CUevent_flags.CU_EVENT_INTERPROCESS) | int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
def raw(h):  # the 64 bytes of a handle (cuda-bindings 13.5 does not expose .reserved)
    return ctypes.string_at(h.getPtr(), 64)
def event_handle(b):
    h = d.CUipcEventHandle()
    ctypes.memmove(h.getPtr(), b, 64)
    return h
def mem_handle(b):
    h = d.CUipcMemHandle()
    ctypes.memmove(h.getPtr(), b, 64)
    return h
'''

_CHILD = _PRELUDE + r'''
import sys
ev = chk(d.cuIpcOpenEventHandle(event_handle(bytes.fromhex(sys.argv[1]))))
ptr = chk(d.cuIpcOpenMemHandle(mem_handle(bytes.fromhex(sys.argv[2])), 1))
# the parent's record: its memset ran before it
chk(d.cuEventSynchronize(ev))
assert err(d.cuEventQuery(ev)) == "CUDA_SUCCESS"
s = chk(d.cuStreamCreate(1))
chk(d.cuStreamWaitEvent(s, ev, 0))
host = bytearray(4096)
chk(d.cuMemcpyDtoHAsync(host, ptr, 4096, s)); chk(d.cuStreamSynchronize(s))
assert bytes(host) == b"\x11" * 4096, host[:8]
# the child's own record of the same event, after its write: the parent waits for it
chk(d.cuMemsetD8Async(ptr, 0x22, 4096, s))
chk(d.cuEventRecord(ev, s))
print("recorded", flush=True)
assert sys.stdin.readline().strip() == "go"
chk(d.cuStreamSynchronize(s))
chk(d.cuEventDestroy(ev)); chk(d.cuIpcCloseMemHandle(ptr))
print("child done", flush=True)
'''


def _go(folder, body: str) -> None:  # noqa: F811
    ok(run(folder, _PRELUDE + textwrap.dedent(body)))


def test_only_interprocess_events_are_exported_and_opened_elsewhere(folder):  # noqa: F811
    _go(folder, """
        assert chk(d.cuDeviceGetAttribute(
            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 0)) == 1
        plain = chk(d.cuEventCreate(int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)))
        assert err(d.cuIpcGetEventHandle(plain)) == "CUDA_ERROR_INVALID_VALUE"
        ev = chk(d.cuEventCreate(IPC))
        h = raw(chk(d.cuIpcGetEventHandle(ev)))
        assert len(h) == 64 and raw(chk(d.cuIpcGetEventHandle(ev))) == h   # the same handle
        assert err(d.cuIpcOpenEventHandle(event_handle(h))) == "CUDA_ERROR_INVALID_CONTEXT"
        assert err(d.cuIpcOpenEventHandle(event_handle(b"\\0" * 64))) == "CUDA_ERROR_INVALID_VALUE"
        mem = chk(d.cuMemAlloc(64))   # a memory handle is no event handle
        assert err(d.cuIpcOpenEventHandle(event_handle(raw(chk(d.cuIpcGetMemHandle(mem)))))) == (
            "CUDA_ERROR_INVALID_VALUE")
        # timing stays refused on an IPC event, as on any event without timing
        assert err(d.cuEventElapsedTime(ev, ev)) == "CUDA_ERROR_INVALID_HANDLE"
        chk(d.cuEventDestroy(ev)); chk(d.cuEventDestroy(plain)); chk(d.cuMemFree(mem))
        assert err(d.cuIpcGetEventHandle(ev)) == "CUDA_ERROR_INVALID_HANDLE"
        print("OK")
    """)


def test_an_event_shared_with_a_child_process_orders_work_both_ways(folder):  # noqa: F811
    _go(folder, f"CHILD = {_CHILD!r}\n" + textwrap.dedent("""
        import subprocess, sys
        s = chk(d.cuStreamCreate(1))
        ptr = chk(d.cuMemAlloc(4096))
        ev = chk(d.cuEventCreate(IPC))
        chk(d.cuMemsetD8Async(ptr, 0x11, 4096, s))
        chk(d.cuEventRecord(ev, s))          # recorded before the export: that record is shared
        eh = raw(chk(d.cuIpcGetEventHandle(ev)))
        mh = raw(chk(d.cuIpcGetMemHandle(ptr)))
        proc = subprocess.Popen([sys.executable, "-c", CHILD, eh.hex(), mh.hex()],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        # the parent waits for the child without synchronizing: its work runs unasked
        assert proc.stdout.readline().strip() == "recorded"
        chk(d.cuEventSynchronize(ev))        # the child's record, after its write
        host = bytearray(4096)
        chk(d.cuMemcpyDtoH(host, ptr, 4096))
        assert bytes(host) == b"\\x22" * 4096, host[:8]
        s2 = chk(d.cuStreamCreate(1))
        chk(d.cuStreamWaitEvent(s2, ev, 0)); chk(d.cuStreamSynchronize(s2))
        assert err(d.cuEventQuery(ev)) == "CUDA_SUCCESS"
        out, _ = proc.communicate("go\\n", timeout=120)
        assert proc.returncode == 0 and out.strip() == "child done", out
        # recorded again here: this process's record again
        chk(d.cuMemsetD8Async(ptr, 0x33, 4096, s)); chk(d.cuEventRecord(ev, s))
        chk(d.cuEventSynchronize(ev))
        chk(d.cuMemcpyDtoH(host, ptr, 4096))
        assert bytes(host) == b"\\x33" * 4096, host[:8]
        chk(d.cuEventDestroy(ev)); chk(d.cuMemFree(ptr))
        print("OK")
    """))
