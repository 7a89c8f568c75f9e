"""``python -m gpuarray``: what gpuarray sees, and a quick end-to-end check.

Subcommands: ``info`` (backend, devices, versions, kernel cache), ``standin --
COMMAND`` (run a command on the cuda backend over the stand-in driver: handed
over to ``python -m gpuarray_sim standin``, of the distribution
``gpuarray-sim``), ``selftest``
(transfers, views, casts, streams, CAI and DLPack round trips, and round trips
with every installed peer library on a GPU), ``cache clear``, ``bench`` (quick
benchmarks next to the raw driver calls; see ``gpuarray._bench``).  With no
subcommand: ``info`` then ``selftest``.

Backend: ``GPUARRAY_BACKEND`` when set.  Otherwise the GPU if the CUDA driver
and a device work, else the simulator -- and the output says which and why.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import traceback
from collections.abc import Callable

import numpy as np

_DESCRIPTION = "What gpuarray sees, and a quick end-to-end check."
_EPILOG = """\
With no command: info, then selftest.

backend: GPUARRAY_BACKEND=cuda (the GPU) or GPUARRAY_BACKEND=sim (the CPU
simulator) when set; otherwise the GPU if the CUDA driver and a device work,
else the simulator, and the output says which and why."""


#: Set by ``python -m gpuarray_sim standin`` in the commands it runs: the stand-in's folder.
_STANDIN = "GPUARRAY_STANDIN"
#: Entry-point groups through which gpuarray-sim adds to this command line:
#: ``standin`` (the subcommand's implementation, ``main(argv) -> int``) and
#: ``sim`` (lines for ``info`` about the simulator, ``info_lines() -> list[str]``).
_COMMANDS = "gpuarray.commands"
_INFO = "gpuarray.info"
_NO_SIM = ('the stand-in driver is part of the simulator, the distribution gpuarray-sim, '
           'which is not installed: pip install "gpuarray[sim]"')


def _entry_point(group: str, name: str):
    """The object an installed distribution offers as ``name`` in ``group``, or None."""
    found = importlib.metadata.entry_points(group=group, name=name)
    return next(iter(found)).load() if found else None


class UsageError(Exception):
    """A setting of the environment the command line cannot run with (exit status 2)."""


def choose_backend() -> str:
    """Pick the backend for the command line and say why.

    Raises
    ------
    UsageError
        When ``GPUARRAY_BACKEND`` (or a ``GPUARRAY_SIM_*`` setting of the
        simulator it selects) is not valid; the message names the valid values.
    """
    from . import _driver
    from .errors import CudaUnavailableError

    if os.environ.get("GPUARRAY_BACKEND"):
        try:
            name = _driver.backend_name()
            _driver.get_backend()  # reads the backend's own settings (GPUARRAY_SIM_*)
        except ValueError as e:
            raise UsageError(str(e)) from None
        standin = os.environ.get(_STANDIN, "").strip()
        over = (" over the stand-in driver (the CPU simulator behind libcuda.so.1 from "
                f"{standin})" if name == "cuda" and standin else "")
        print(f"backend: {name} (from GPUARRAY_BACKEND){over}")
        return name
    try:
        from ._driver.cuda import CudaBackend

        CudaBackend().init()
    except CudaUnavailableError as e:
        os.environ["GPUARRAY_BACKEND"] = "sim"
        _driver.set_backend(None)
        print(f"backend: sim -- no usable GPU ({e.reason}); running on the CPU simulator")
        return "sim"
    print("backend: cuda -- running on the GPU")
    return "cuda"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def info() -> None:
    """Print devices, versions and the kernel cache."""
    import gpuarray
    from gpuarray import _driver, _kernels

    b = _driver.get_backend()
    simulated = " (simulated)" if b.name == "sim" else ""
    print(f"gpuarray {gpuarray.__version__}, numpy {np.__version__}, "
          f"cuda-bindings {_version('cuda-bindings')}, cuda-pathfinder {_version('cuda-pathfinder')}")
    print(f"driver version: {b.driver_version()}{simulated}")
    print(f"DLPack core: {gpuarray.interop._dlpack_capsule.CORE_DESCRIPTION}")
    try:
        from gpuarray._kernels import _nvrtc

        major, minor = _nvrtc.nvrtc_version()
        print(f"NVRTC: {major}.{minor}")
    except Exception as e:  # NVRTC missing is worth reporting, not fatal
        print(f"NVRTC: unavailable ({e})")
    n = gpuarray.device_count()
    print(f"devices: {n}{simulated}")
    if b.name == "sim" or os.environ.get(_STANDIN, "").strip():  # the simulator, or behind the stand-in
        lines = _entry_point(_INFO, "sim")
        for line in lines() if lines is not None else ():
            print(line)
    for i in range(n):
        dev = gpuarray.get_device(i)
        major, minor = dev.compute_capability
        print(f"  [{i}] {dev.name}  sm_{major}{minor}  {dev.total_memory / 2**30:.1f} GiB{simulated}")
    cache = _kernels.cache_info()
    print(f"kernel cache: {cache.get('path')} ({cache.get('entries', 0)} entries, "
          f"{cache.get('bytes', 0)} bytes)")
    cupy = next((d for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy")
                 if _version(d) != "not installed"), "cupy")
    peers = ", ".join(f"{name} {_version(dist)}" for name, dist in
                      (("CuPy", cupy), ("PyTorch", "torch"), ("JAX", "jax"),
                       ("Numba", "numba-cuda"), ("cuda.core", "cuda-core")))
    print(f"peer libraries: {peers}")


# ---------------------------------------------------------------- selftest
def _check_transfers() -> str:
    import gpuarray

    n = 0
    for dtype in (np.bool_, np.int8, np.uint16, np.int32, np.int64, np.float16, np.float32,
                  np.float64, np.complex64, np.complex128):
        host = (np.arange(60) % 7).astype(dtype).reshape(3, 4, 5)
        for view in (host, np.asfortranarray(host), host[:, ::2, ::-1], host.transpose(2, 0, 1),
                     host[1, 2, 3, ...], host[:, 1:1]):
            back = gpuarray.to_device(view).copy_to_host()
            np.testing.assert_array_equal(back, view)
            n += 1
    return f"{n} dtype/layout round trips"


def _check_views_and_assignment() -> str:
    import gpuarray

    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    d = gpuarray.to_device(host)
    d[1:] = d[:-1]
    host[1:] = host[:-1].copy()
    d[:, ::2] = np.arange(3)
    host[:, ::2] = np.arange(3)
    np.testing.assert_array_equal(d.copy_to_host(), host)
    np.testing.assert_array_equal(d.T.reshape(-1).copy_to_host(), host.T.reshape(-1))
    np.testing.assert_array_equal(d.astype(np.int16)[::-1].copy_to_host(), host.astype(np.int16)[::-1])
    return "slicing, overlapping assignment, broadcast, reshape, astype"


def _check_streams() -> str:
    import gpuarray

    s, t = gpuarray.stream(non_blocking=True), gpuarray.stream(non_blocking=True)
    a = gpuarray.zeros(1 << 16, np.float32, stream=s)
    a.copy_to_device(np.ones(1 << 16, np.float32), stream=t)
    a.fill(2.0)
    assert (a.copy_to_host() == 2).all()
    return "cross-stream work ordered by events"


def _check_cai() -> str:
    import gpuarray

    d = gpuarray.to_device(np.arange(12, dtype=np.int32).reshape(3, 4))[:, ::2]
    cai = d.__cuda_array_interface__
    assert cai["version"] == 3 and cai["strides"] == (16, 8)
    assert cai["stream"] == d.stream.cai_value != 0
    back = gpuarray.as_cuda_array(d)
    assert back.ptr == d.ptr
    np.testing.assert_array_equal(back.copy_to_host(), np.arange(12).reshape(3, 4)[:, ::2])
    return "__cuda_array_interface__ v3 export and zero-copy import"


def _check_dlpack() -> str:
    import gpuarray

    host = np.arange(10, dtype=np.float64)
    d = gpuarray.from_dlpack(host)            # a host producer: copied to the device
    np.testing.assert_array_equal(d.copy_to_host(), host)
    e = gpuarray.from_dlpack(d)               # device to device: zero-copy
    assert e.ptr == d.ptr
    np.testing.assert_array_equal(np.from_dlpack(d, device="cpu"), host)
    return "DLPack 1.x export and import (NumPy as a real peer)"


def _check_peers() -> str:
    import gpuarray

    done = []
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    d = gpuarray.to_device(host)
    try:
        import cupy
    except ImportError:
        pass
    else:
        c = cupy.asarray(d)
        np.testing.assert_array_equal(cupy.asnumpy(c), host)
        np.testing.assert_array_equal(gpuarray.as_cuda_array(c).copy_to_host(), host)
        done.append("CuPy")
    try:
        import torch
    except ImportError:
        pass
    else:
        if torch.cuda.is_available():
            t = torch.from_dlpack(d)
            np.testing.assert_array_equal(t.cpu().numpy(), host)
            np.testing.assert_array_equal(gpuarray.from_dlpack(t).copy_to_host(), host)
            done.append("PyTorch")
    return "round trips with " + (", ".join(done) if done else "no peer library installed")


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("transfers", _check_transfers),
    ("views and assignment", _check_views_and_assignment),
    ("streams", _check_streams),
    ("CUDA Array Interface", _check_cai),
    ("DLPack", _check_dlpack),
]


def selftest(backend: str) -> int:
    """Run the checks; return the number that failed."""
    checks = list(CHECKS) + ([("peer libraries", _check_peers)] if backend == "cuda" else [])
    failed = 0
    for name, fn in checks:
        try:
            detail = fn()
        except Exception:
            failed += 1
            print(f"  FAIL  {name}")
            traceback.print_exc()
        else:
            print(f"  ok    {name}: {detail}")
    print(f"selftest: {len(checks) - failed} passed, {failed} failed")
    return failed


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m gpuarray``."""
    parser = argparse.ArgumentParser(prog="python -m gpuarray", description=_DESCRIPTION,
                                     epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="backend, devices, versions, kernel cache")
    sub.add_parser("selftest", help="a quick end-to-end check")
    cache = sub.add_parser("cache", help="kernel cache maintenance")
    cache.add_argument("action", choices=["clear"])
    standin = sub.add_parser("standin", help="run a command on the cuda backend over the "
                             "stand-in driver (the simulator behind libcuda)")
    standin.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    from . import _bench

    _bench.add_arguments(sub.add_parser("bench", help="quick benchmarks: gpuarray next to the raw driver"))
    args = parser.parse_args(argv)
    if args.command == "standin":
        run = _entry_point(_COMMANDS, "standin")
        if run is None:
            print(f"{parser.prog} standin: error: {_NO_SIM}", file=sys.stderr)
            return 2
        return int(run(args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd))
    if args.command == "cache":
        from gpuarray import _kernels

        removed = _kernels.clear_cache()
        print(f"kernel cache cleared ({removed} entries removed)")
        return 0
    from .errors import CudaUnavailableError

    try:
        backend = choose_backend()
        if args.command == "bench":
            return _bench.main(args)
        if args.command in (None, "info"):
            info()
        if args.command in (None, "selftest"):
            print("selftest:")
            return 1 if selftest(backend) else 0
    except UsageError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    except CudaUnavailableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
