#!/usr/bin/env python
"""Run numba-cuda's own driver tests, unmodified, over gpuarray's stand-in driver.

Usage (in an environment with numba-cuda 0.30.4 and gpuarray installed:
``make test-numba-driver`` makes one, ``.venv-peers``)::

    python tools/numba_driver/run.py [--workers N] [--junit FILE] [-- PYTEST_ARGS...]

What runs: ``numba.cuda.tests.cudadrv`` and
``numba.cuda.tests.cudapy.test_multiprocessing`` from the installed wheel,
with numba-cuda's pytest settings (``pytest.ini`` here: its repository's
``testing/pytest.ini``, which the wheel does not ship) and its conftest's
fixture and option (``numba_testing_plugin.py``), under
``python -m gpuarray standin --``: numba-cuda and cuda.core talk to the
real cuda-bindings, which load the stand-in ``libcuda.so.1`` over the
simulator.

The simulator runs gpuarray's kernels only: a test that launches a kernel
numba-cuda compiled fails at the launch with ``CUDA_ERROR_INVALID_IMAGE``
("the simulator cannot execute foreign kernels").  :data:`NEEDS_KERNEL`
lists each such test with what it launches; :data:`OTHER_EXPECTED` lists
the few failures with another reason, each stated.  The exit status is 0
when every failure is listed and every listed test failed (a listed test
that passes makes the list stale: 1), 1 otherwise, 2 when the run could not
be made.  The summary gives the counts and the wall time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSION = "0.30.4"
PACKAGES = ("numba.cuda.tests.cudadrv", "numba.cuda.tests.cudapy.test_multiprocessing")

_JIT = "launches a kernel it compiles with cuda.jit"
_COPY = "copies between non-contiguous device arrays, which numba-cuda does with a kernel"
_T = "transposes a device array, which numba-cuda does with a kernel"
_CB = "launches a kernel linked with a module whose setup/teardown callbacks it checks"
_CORE = "launches a kernel compiled from PTX through cuda.core (launch, Stream)"

#: "module::Class::test" -> the user kernel it needs executed.
NEEDS_KERNEL: dict[str, str] = {
    **{f"test_cuda_array_slicing::CudaArraySetting::{t}": _COPY for t in (
        "test_array_assign_all", "test_array_assign_column", "test_array_assign_deep_subarray",
        "test_array_assign_row", "test_array_assign_subarray", "test_broadcast",
        "test_no_sync_default_stream", "test_no_sync_supplied_stream", "test_rank",
        "test_scalar", "test_strides", "test_sync")},
    "test_cuda_ndarray::TestCudaNDArray::test_devicearray_transpose_T": _T,
    "test_cuda_ndarray::TestCudaNDArray::test_devicearray_transpose_ok": _T,
    "test_cuda_ndarray::TestCoreContiguous::test_device_array_like_2d_transpose": _T,
    "test_cuda_ndarray::TestCoreContiguous::test_device_array_like_2d_f_transpose": _T,
    "test_cuda_ndarray::TestRecarray::test_recarray": _JIT,
    "test_managed_alloc::TestManagedAlloc::test_managed_array_attach_global": _JIT,
    "test_managed_alloc::TestManagedAlloc::test_managed_array_attach_host": _JIT,
    **{f"test_cuda_devicerecord::TestRecordDtypeWithStructArrays::test_structured_array{i}": _JIT
       for i in (2, 3, 4)},
    "test_context_stack::Test3rdPartyContext::test_cudajit_in_attached_primary_context": _JIT,
    **{f"test_module_callbacks::TestModuleCallbacksBasic::{t}": _CB for t in (
        "test_basic", "test_different_argtypes", "test_two_kernels")},
    "test_module_callbacks::TestModuleCallbacksAPICompleteness::test_api": _CB,
    "test_module_callbacks::TestModuleCallbacks::test_decldevice_arg": _CB,
    "test_module_callbacks::TestModuleCallbacks::test_jitarg": _CB,
    "test_module_callbacks::TestMultithreadedCallbacks::test_concurrent_initialization_different_args":
        "launches kernels from 4 threads; the first launch fails in each, so the second "
        "module (float64) is never made and the test sees 1 module, not 2",
    **{f"test_cuda_driver::TestCudaDriver::{t}": _CORE for t in (
        "test_cuda_cache_config", "test_cuda_core_stream_launch_user_facing",
        "test_cuda_core_stream_operations", "test_cuda_driver_basic",
        "test_cuda_driver_stream_operations", "test_cuda_set_shared_memory_carveout")},
    "test_cuda_driver::TestAcceleratedArchitecture::test_device_arch_specific": _JIT,
    "test_cuda_driver::TestCudaDriver::test_cuda_core_graph_builder_launch_user_facing":
        "captures a cuda.jit kernel into a cuda.core graph: the capture, cuda.core's "
        "instantiation (cuGraphInstantiateWithParams, user objects) and the launch are served; "
        "the replay of the kernel fails as every user kernel's launch does",
    **{f"test_linker::TestLinker::{t}": "launches a kernel linked from its sources"
       for t in ("test_linking_cu", "test_linking_eager_compile", "test_linking_lazy_compile")},
}

#: Failures for another reason than a kernel launch, with that reason.
OTHER_EXPECTED: dict[str, str] = {
    "test_linker::TestLinker::test_set_registers_no_max":
        "needs the register count ptxas allocates for its kernel (> 57): the simulator "
        "compiles no machine code and reports 32 registers for every kernel",
}
#: What a NEEDS_KERNEL failure's message says (anything else is unexpected).
_KERNEL_MARKS = ("CUDA_ERROR_INVALID_IMAGE", "1 != 2")


def _key(tc: ET.Element) -> str:
    cls = tc.get("classname", "")
    module, _, klass = cls.rpartition(".")
    return f"{module.rpartition('.')[2]}::{klass}::{tc.get('name')}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="2", help="pytest-xdist workers (default 2)")
    p.add_argument("--junit", type=Path, help="keep the JUnit XML report here")
    p.add_argument("pytest_args", nargs="*")
    args = p.parse_args(argv)
    try:
        version = importlib.metadata.version("numba-cuda")
    except importlib.metadata.PackageNotFoundError:
        print("run.py: numba-cuda is not installed here (make test-numba-driver installs it)",
              file=sys.stderr)
        return 2
    if version != VERSION:
        print(f"run.py: numba-cuda {version} is installed; the list of expected failures is "
              f"for {VERSION}", file=sys.stderr)
        return 2
    junit = args.junit or Path(tempfile.mkdtemp(prefix="numba-driver-")) / "junit.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "gpuarray", "standin", "--", sys.executable, "-m", "pytest",
           "-c", str(HERE / "pytest.ini"), "--rootdir", str(HERE), "-n", args.workers,
           # native tracebacks: pytest's own formatter parses numba's deep frames with
           # ast.parse, which CPython 3.11 can fail on (an INTERNALERROR, not a result)
           "--tb=native", "-q", "-rN", f"--junitxml={junit}", *args.pytest_args, *PACKAGES]
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    code = subprocess.run(cmd, env=env).returncode
    wall = time.monotonic() - t0
    if not junit.exists():
        print(f"run.py: pytest exited with status {code} and wrote no report", file=sys.stderr)
        return 2
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    unexpected, stale = [], set(NEEDS_KERNEL) | set(OTHER_EXPECTED)
    kernel_failed: set[str] = set()
    teardown: list[tuple[str, str]] = []
    for tc in ET.parse(junit).iter("testcase"):
        key = _key(tc)
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        if bad is not None:
            counts["failed" if bad.tag == "failure" else "error"] += 1
            stale.discard(key)
            message = bad.get("message") or ""
            if message.startswith("failed on teardown"):
                teardown.append((key, message))
            elif key in NEEDS_KERNEL and not any(m in message for m in _KERNEL_MARKS):
                unexpected.append(f"{key} (listed as needing a kernel, failed otherwise): "
                                  f"{message.splitlines()[:1]}")
            elif key in NEEDS_KERNEL:
                kernel_failed.add(key)
            elif key not in OTHER_EXPECTED:
                unexpected.append(f"{key}: {message.splitlines()[:1]}")
        elif tc.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    # A test whose kernel launch failed may leave what it allocated to its teardown,
    # after it released the context (a GPU would have run the kernel and freed first).
    for key, message in teardown:
        if key not in kernel_failed:
            unexpected.append(f"{key}: {message.splitlines()[:1]}")
    print(f"\nnumba-cuda {VERSION} driver tests over the stand-in: "
          + ", ".join(f"{n} {k}" for k, n in counts.items()) + f" in {wall:.0f} s")
    for u in unexpected:
        print("UNEXPECTED failure:", u)
    for s in sorted(stale):
        print("listed as failing but did not fail (update run.py's lists):", s)
    return 1 if unexpected or stale or code not in (0, 1) else 0


if __name__ == "__main__":
    sys.exit(main())
