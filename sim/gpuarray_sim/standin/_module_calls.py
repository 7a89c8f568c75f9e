"""The stand-in driver's code calls: modules, libraries, the linker, kernels, launches.

One concern: loading code and running it -- ``cuModuleLoadData``/``Ex``,
the context-independent library API of CUDA 12 (``cuLibraryLoadData``,
``cuLibraryGetKernel``, ``cuKernelGetFunction`` ...; a library is a module
of the current context here, device 0's primary context when none is
current, and a ``CUkernel`` is its ``CUfunction``), the JIT linker
(``cuLinkCreate_v2``/``AddData_v2``/``AddFile_v2``/``Complete``/
``Destroy``), function attributes, occupancy, and ``cuLaunchKernel``/
``cuLaunchKernelEx``.

Images are judged as a driver would (``sim/_images.py``): bad ones fail at
load or ``cuLinkAddData`` with a code cuda.h lists for that call; how an image
is read from the caller's pointer (no size argument; a
``__fatBinC_Wrapper_t`` followed to its fatbin) and how a failure reaches the
caller's ``CU_JIT_ERROR_LOG_BUFFER`` is ``_module_images.py``'s.  A fatbin
input or load takes one member, the one chosen for the device
(``sim/_fatbin.py``).  The linker's output is an ELF cubin holding its PTX and
cubin inputs in sections of their own (``sim/_cubin.link_image``), so the
kernels of each input are found in it and the simulator executes its PTX
(several PTX inputs linked as one program); ``cuLinkComplete`` refuses a
link whose PTX uses a function no input defines (``_images.UNRESOLVED_CODE``,
"Undefined reference" in the error log), unless an input whose symbols are
not read here (a host object, an archive) may define it.  A cubin without
PTX that NVRTC made in this process runs from the PTX of the same compile; a
kernel of any other cubin without PTX resolves and fails at launch with
``CUDA_ERROR_INVALID_IMAGE``,
saying how to get PTX.  Function attributes come from the kernel's PTX (static sizes,
``.maxntid``); ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` is the simulator's (48 KiB
less the static size, or the opt-in, checked against
``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``); the ``cuKernel*`` forms check their
device.  Occupancy is computed from the device profile (2048 threads,
32 blocks, 228 KiB of shared memory and 64 Ki registers per SM, 32
registers per thread, 1 KiB of shared memory reserved per block).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from gpuarray.errors import CudaError

from .. import _cubin, _images
from .._codes import FILE_NOT_FOUND as _FILE_NOT_FOUND
from .._codes import INVALID_HANDLE as _INVALID_HANDLE
from . import _link_inputs
from ._module_images import JitLog, image_at
from ._support import (
    _I32,
    _INVALID_VALUE,
    _SIZE,
    _U64,
    _device,
    _out,
    _output_first,
    _signed,
    _str_out,
    _stream,
    _with_ctx,
    backend,
)

_STRINGS: dict[bytes, Any] = {}


def _load(call: str, image: int, log: JitLog | None = None) -> int:
    if not image:
        raise CudaError(_INVALID_VALUE, call, "(NULL image)")
    try:
        return backend().module_load_data(image_at(call, image), call=call, placeholder_ok=False)
    except CudaError as e:
        if log is not None:
            log.write(f"error   : {e.detail.strip('()')}")
        raise


@_output_first
def cuModuleLoadData(p: int, image: int) -> None:
    _out("cuModuleLoadData", p, _U64, _load("cuModuleLoadData", image))


@_output_first
def cuModuleLoadDataEx(p: int, image: int, n: int, options: int, values: int) -> None:
    # of the JIT options, the error log is written (a failure's message); the others need no JIT
    h = _load("cuModuleLoadDataEx", image, JitLog(n, options, values))
    _out("cuModuleLoadDataEx", p, _U64, h)


@_output_first
def cuModuleLoadFatBinary(p: int, image: int) -> None:
    _out("cuModuleLoadFatBinary", p, _U64, _load("cuModuleLoadFatBinary", image))


def _read_file(call: str, name: int, missing: int) -> bytes:
    """The bytes of the image file whose path is the C string at ``name``."""
    if not name:
        raise CudaError(_INVALID_VALUE, call, "(NULL file name)")
    path = os.fsdecode(ctypes.string_at(name))
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise CudaError(missing, call, f"{path!r} cannot be read ({e.strerror})") from None


@_output_first
def cuModuleLoad(p: int, name: int) -> None:
    call = "cuModuleLoad"
    image = _read_file(call, name, _FILE_NOT_FOUND)
    _out(call, p, _U64, backend().module_load_data(image, call=call, placeholder_ok=False))


@_output_first
def cuLibraryLoadFromFile(p: int, name: int, jit_opts: int, jit_vals: int, n_jit: int,
                          lib_opts: int, lib_vals: int, n_lib: int) -> None:
    call = "cuLibraryLoadFromFile"
    image = _read_file(call, name, _INVALID_VALUE)  # cuda.h lists no FILE_NOT_FOUND here
    log = JitLog(n_jit, jit_opts, jit_vals)
    try:
        h = _in_some_context(lambda: backend().module_load_data(image, call=call,
                                                                placeholder_ok=False))
    except CudaError as e:
        log.write(f"error   : {e.detail.strip('()')}")
        raise
    _out(call, p, _U64, h)


def cuModuleUnload(module: int) -> None:
    backend().module_unload(module)


@_output_first
def cuModuleGetFunction(p: int, module: int, name: int) -> None:
    if not name:
        raise CudaError(_INVALID_VALUE, "cuModuleGetFunction", "(NULL name)")
    kname = ctypes.string_at(name).decode("utf-8", "replace")
    _out("cuModuleGetFunction", p, _U64, backend().module_get_function(module, kname))


def cuModuleGetGlobal_v2(pdptr: int, psize: int, module: int, name: int) -> None:
    call = "cuModuleGetGlobal"
    if not name:
        raise CudaError(_INVALID_VALUE, call, "(NULL name)")
    vname = ctypes.string_at(name).decode("utf-8", "replace")
    address, size = backend().module_get_global(module, vname)
    if pdptr:  # cuda.h: either output may be NULL
        _U64.from_address(pdptr).value = address
    if psize:
        _SIZE.from_address(psize).value = size


# -------------------------------------------------------------- libraries
def _in_some_context(fn: Any) -> Any:
    b = backend()
    return fn() if b.ctx_get_current() else _with_ctx(b.primary_ctx_handle(0), fn)


@_output_first
def cuLibraryLoadData(p: int, code: int, jit_opts: int, jit_vals: int, n_jit: int,
                      lib_opts: int, lib_vals: int, n_lib: int) -> None:
    log = JitLog(n_jit, jit_opts, jit_vals)
    h = _in_some_context(lambda: _load("cuLibraryLoadData", code, log))
    _out("cuLibraryLoadData", p, _U64, h)


def cuLibraryUnload(library: int) -> None:
    backend().module_unload(library)


@_output_first
def cuLibraryGetModule(p: int, library: int) -> None:
    _out("cuLibraryGetModule", p, _U64, library)


@_output_first
def cuLibraryGetKernel(p: int, library: int, name: int) -> None:
    if not name:
        raise CudaError(_INVALID_VALUE, "cuLibraryGetKernel", "(NULL name)")
    kname = ctypes.string_at(name).decode("utf-8", "replace")
    _out("cuLibraryGetKernel", p, _U64, backend().module_get_function(library, kname))


def cuLibraryGetGlobal(pdptr: int, psize: int, library: int, name: int) -> None:
    cuModuleGetGlobal_v2(pdptr, psize, library, name)


@_output_first
def cuKernelGetFunction(p: int, kernel: int) -> None:
    backend().function_info(kernel)
    _out("cuKernelGetFunction", p, _U64, kernel)


def cuKernelGetName(p: int, kernel: int) -> None:
    if not kernel:  # cuda.h: CUDA_ERROR_INVALID_VALUE "if name or hfunc is NULL"
        raise CudaError(_INVALID_VALUE, "cuKernelGetName", "(NULL kernel)")
    _str_out("cuKernelGetName", p, backend().function_info(kernel)[0].encode(), _STRINGS)


def cuFuncGetName(p: int, func: int) -> None:
    if not func:  # cuda.h: CUDA_ERROR_INVALID_VALUE "if name or hfunc is NULL"
        raise CudaError(_INVALID_VALUE, "cuFuncGetName", "(NULL function)")
    _str_out("cuFuncGetName", p, backend().function_info(func)[0].encode(), _STRINGS)


def _param_info(call: str, func: int, index: int, offset: int, size: int) -> None:
    if not func or not offset:  # cuda.h: SUCCESS, INVALID_VALUE (paramSize may be NULL)
        raise CudaError(_INVALID_VALUE, call, "(NULL function or paramOffset)")
    params = backend().function_params(func, call)
    if index >= len(params):
        raise CudaError(_INVALID_VALUE, call, f"parameter {index} (the kernel takes {len(params)})")
    _out(call, offset, _SIZE, params[index][0])
    if size:
        _out(call, size, _SIZE, params[index][1])


def cuKernelGetParamInfo(kernel: int, index: int, offset: int, size: int) -> None:
    _param_info("cuKernelGetParamInfo", kernel, index, offset, size)


def cuFuncGetParamInfo(func: int, index: int, offset: int, size: int) -> None:
    _param_info("cuFuncGetParamInfo", func, index, offset, size)


def _param_count(call: str, func: int, p: int) -> None:
    if not func or not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL function or paramCount)")
    _out(call, p, _SIZE, len(backend().function_params(func, call)))


def cuKernelGetParamCount(kernel: int, p: int) -> None:
    _param_count("cuKernelGetParamCount", kernel, p)


def cuFuncGetParamCount(func: int, p: int) -> None:
    _param_count("cuFuncGetParamCount", func, p)


def cuFuncGetModule(p: int, func: int) -> None:
    _out("cuFuncGetModule", p, _U64, backend().function_info(func)[1])


# --------------------------------------------------------------- linking
#: Link states: handle -> [inputs, output (kept until cuLinkDestroy), its error log, whether an
#: input whose symbols are not read here (a host object, an archive) was added, input names].
_LINKS: dict[int, list[Any]] = {}
_next_link = [0x6C00_0000]
_INPUT_KINDS = {0: "cubin", 1: "ptx", 2: "fatbin", 3: "object", 4: "library"}


def cuLinkCreate_v2(n: int, options: int, values: int, p: int) -> None:
    if p == 0:
        raise CudaError(_INVALID_VALUE, "cuLinkCreate", "(NULL state)")
    backend().ctx_get_device()  # INVALID_CONTEXT without a current context
    _next_link[0] += 0x10
    _LINKS[_next_link[0]] = [[], None, JitLog(n, options, values), False, []]
    _out("cuLinkCreate", p, _U64, _next_link[0])


def _link(call: str, state: int) -> list[Any]:
    link = _LINKS.get(state)
    if link is None:
        raise CudaError(_INVALID_HANDLE, call, f"{state:#x} is not a link state")
    return link


def _cc() -> int:
    """The current context's device's compute capability, as ``10 * major + minor``."""
    b = backend()
    dev = b.ctx_get_device()
    return (10 * b.device_attribute("compute_capability_major", dev)
            + b.device_attribute("compute_capability_minor", dev))


def _add(call: str, state: int, kind: int, data: bytes, name: str) -> None:
    link = _link(call, state)
    what = _INPUT_KINDS.get(kind)
    if what is None:
        raise CudaError(_INVALID_VALUE, call, f"input type {kind} (the simulator links CUBIN, "
                                              "PTX, FATBINARY, OBJECT and LIBRARY inputs)")
    if _link_inputs.unread_input(what, data):
        link[3] = True  # a host object or an archive: its kernels and symbols are not read
        return
    try:
        found, data = _link_inputs.code_input(data, _cc())
    except _images.ImageError as e:
        err = CudaError(_images.code_for("cuLinkAddData", e.kind), call,
                        f"({name or 'input'}: {e.reason})")
        link[2].write(f"error   : {e.reason}", report_size=False)
        raise err from None
    link[0].append((found, data))
    link[4].append(name)


def cuLinkAddData_v2(state: int, kind: int, data: int, size: int, name: int, n: int,
                     options: int, values: int) -> None:
    call = "cuLinkAddData"
    if not data or not size:
        raise CudaError(_INVALID_VALUE, call, "(NULL or empty data)")
    label = ctypes.string_at(name).decode("utf-8", "replace") if name else ""
    _add(call, state, kind, ctypes.string_at(data, size), label)


def cuLinkAddFile_v2(state: int, kind: int, path: int, n: int, options: int, values: int) -> None:
    call = "cuLinkAddFile"
    _link(call, state)
    if not path:
        raise CudaError(_INVALID_VALUE, call, "(NULL path)")
    fname = ctypes.string_at(path).decode("utf-8", "replace")
    try:
        with open(fname, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CudaError(301, call, f"({fname}: {e.strerror})") from None  # FILE_NOT_FOUND
    _add(call, state, kind, data, fname)


def cuLinkComplete(state: int, pcubin: int, psize: int) -> None:
    call = "cuLinkComplete"
    link = _link(call, state)
    if not pcubin or not psize:
        raise CudaError(_INVALID_VALUE, call, "(NULL output)")
    # An ELF cubin holding each input in a section of its own (sim/_cubin.py), so
    # the kernels of each input, and the PTX of each, are found in it.
    image = _cubin.link_image(link[0], _cc())
    missing = [] if link[3] else _link_inputs.undefined(image, link[0])
    if missing:  # the driver's linker's words: "error   : Undefined reference to 'f' in 'input'"
        lines = [f"error   : Undefined reference to '{n}' in "
                 f"'{_link_inputs.user_of(link[0], link[4], n)}'" for n in missing]
        link[2].write("\n".join(lines), report_size=False)
        raise CudaError(_images.UNRESOLVED_CODE, call,
                        f"({'; '.join(ln[10:] for ln in lines)}: no input of the link defines it)")
    out = ctypes.create_string_buffer(image, len(image))
    link[1] = out
    ctypes.c_void_p.from_address(pcubin).value = ctypes.addressof(out)
    _SIZE.from_address(psize).value = len(image)


def cuLinkDestroy(state: int) -> None:
    _link("cuLinkDestroy", state)
    del _LINKS[state]


# ------------------------------------------------------- function attributes
#: CUfunction_attribute values of every kernel (an H100 build: 32 registers; the
#: static shared/const/local sizes are read from the image, the PTX version from
#: the PTX's .target, the binary version is the device's compute capability;
#: MAX_DYNAMIC_SHARED_SIZE_BYTES is the simulator's, 48 KiB less the static size
#: until an opt-in).
_FUNC_ATTRS = {4: 32, 7: 0, 9: -1, 10: 0, 11: 0,
               12: 0, 13: 0, 14: 0, 15: 0}
_SET: dict[tuple[int, int], int] = {}  # (function, attribute) -> value set
_MAX_DYNAMIC_SHARED, _CARVEOUT = 8, 9


def _func_attr(call: str, func: int, attr: int) -> int:
    b = backend()
    name, module, dev, sizes = b.function_info(func)
    attr = _signed(attr)
    if attr == 0:  # MAX_THREADS_PER_BLOCK: .maxntid/.reqntid, else the device's 1024
        return sizes["max_threads"] or 1024
    if attr in (1, 2, 3):  # SHARED_SIZE_BYTES, CONST_SIZE_BYTES, LOCAL_SIZE_BYTES: from the image
        return sizes[("shared", "const", "local")[attr - 1]]
    if attr == _MAX_DYNAMIC_SHARED:
        return b.function_max_dynamic_shared(func)
    if attr in (5, 6):  # PTX_VERSION (the PTX's .target), BINARY_VERSION: compute capability
        cc = (b.device_attribute("compute_capability_major", dev) * 10
              + b.device_attribute("compute_capability_minor", dev))
        return (b.function_ptx_arch(func) or cc) if attr == 5 else cc
    if attr not in _FUNC_ATTRS:
        raise CudaError(_INVALID_VALUE, call, f"{attr} is not a CUfunction_attribute")
    return _SET.get((func, attr), _FUNC_ATTRS[attr])


def cuFuncGetAttribute(p: int, attr: int, func: int) -> None:
    _out("cuFuncGetAttribute", p, _I32, _func_attr("cuFuncGetAttribute", func, attr))


def cuKernelGetAttribute(p: int, attr: int, kernel: int, dev: int) -> None:
    call = "cuKernelGetAttribute"
    _device(call, dev)
    _out(call, p, _I32, _func_attr(call, kernel, attr))


def _set_attr(call: str, func: int, attr: int, value: int) -> None:
    b = backend()
    b.function_info(func)
    attr, value = _signed(attr), _signed(value)
    if attr == _MAX_DYNAMIC_SHARED:  # checked against the opt-in limit less the static size
        b.function_set_max_dynamic_shared(func, value, call)
        return
    if attr != _CARVEOUT or not -1 <= value <= 100:
        raise CudaError(_INVALID_VALUE, call, f"attribute {attr} = {value} (settable here: "
                                              "MAX_DYNAMIC_SHARED_SIZE_BYTES, "
                                              "PREFERRED_SHARED_MEMORY_CARVEOUT in -1..100)")
    _SET[(func, attr)] = value


def cuFuncSetAttribute(func: int, attr: int, value: int) -> None:
    _set_attr("cuFuncSetAttribute", func, attr, value)


def cuKernelSetAttribute(attr: int, value: int, kernel: int, dev: int) -> None:
    call = "cuKernelSetAttribute"
    _device(call, dev)
    _set_attr(call, kernel, attr, value)


def cuFuncSetCacheConfig(func: int, config: int) -> None:
    backend().function_info(func)
    if config > 3:
        raise CudaError(_INVALID_VALUE, "cuFuncSetCacheConfig", f"config {config}")


def cuKernelSetCacheConfig(kernel: int, config: int, dev: int) -> None:
    _device("cuKernelSetCacheConfig", dev)
    cuFuncSetCacheConfig(kernel, config)


# ------------------------------------------------------------- occupancy
def _blocks_per_sm(call: str, func: int, block: int, smem: int) -> int:
    backend().function_info(func)
    block, smem = _signed(block), _signed(smem)
    if not 0 < block <= 1024 or smem < 0:
        raise CudaError(_INVALID_VALUE, call, f"block size {block}, {smem} bytes of shared memory")
    warps = -(-block // 32)
    return max(0, min(32, 2048 // (32 * warps), 65536 // (32 * 32 * warps),
                      233472 // (smem + 1024)))


def cuOccupancyMaxActiveBlocksPerMultiprocessor(p: int, func: int, block: int, smem: int) -> None:
    call = "cuOccupancyMaxActiveBlocksPerMultiprocessor"
    _out(call, p, _I32, _blocks_per_sm(call, func, block, smem))


def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(p: int, func: int, block: int,
                                                         smem: int, flags: int) -> None:
    cuOccupancyMaxActiveBlocksPerMultiprocessor(p, func, block, smem)


_SMEM_FOR_BLOCK = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_int)


def cuOccupancyMaxPotentialBlockSize(pgrid: int, pblock: int, func: int, fn: int, smem: int,
                                     limit: int) -> None:
    call = "cuOccupancyMaxPotentialBlockSize"
    if not pgrid or not pblock:
        raise CudaError(_INVALID_VALUE, call, "(NULL output)")
    top = min(1024, _signed(limit) or 1024)
    per_block = _SMEM_FOR_BLOCK(fn) if fn else None
    best = (0, 0, 0)  # threads per SM, block size, blocks per SM
    for block in range(top - top % 32 or top, 0, -32):
        s = per_block(block) if per_block is not None else smem
        n = _blocks_per_sm(call, func, block, s)
        if n * block > best[0]:
            best = (n * block, block, n)
    sms = backend().device_attribute("multiprocessor_count", backend().function_info(func)[2])
    _I32.from_address(pgrid).value = best[2] * sms
    _I32.from_address(pblock).value = best[1]


def cuOccupancyMaxPotentialBlockSizeWithFlags(pgrid: int, pblock: int, func: int, fn: int,
                                              smem: int, limit: int, flags: int) -> None:
    cuOccupancyMaxPotentialBlockSize(pgrid, pblock, func, fn, smem, limit)


def cuOccupancyAvailableDynamicSMemPerBlock(p: int, func: int, blocks: int, block: int) -> None:
    call = "cuOccupancyAvailableDynamicSMemPerBlock"
    n = _signed(blocks)
    if n <= 0 or _blocks_per_sm(call, func, block, 0) < n:
        raise CudaError(_INVALID_VALUE, call, f"{n} blocks of {_signed(block)} threads do not fit")
    _out(call, p, _SIZE, min(48 << 10, 233472 // n - 1024))


# --------------------------------------------------------------- launches
def cuLaunchKernel(func: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                   shared: int, stream: int, params: int, extra: int, ptsz: bool = False,
                   cooperative: bool = False) -> None:
    call = "cuLaunchCooperativeKernel" if cooperative else "cuLaunchKernel"
    b = backend()
    kernel = b.function_kernel(func)
    types = getattr(kernel, "param_types", None)
    if types is None:
        raise CudaError(_INVALID_VALUE, call, f"{kernel!r} has no param_types: the stand-in "
                                              "cannot decode its kernelParams")
    if extra:
        raise CudaError(_INVALID_VALUE, call, "(the stand-in serves kernelParams, not extra)")
    if types and not params:
        raise CudaError(_INVALID_VALUE, call, f"(NULL kernelParams for {len(types)} parameters)")
    values = []
    for i, t in enumerate(types):
        addr = ctypes.c_void_p.from_address(params + 8 * i).value
        if not addr:
            raise CudaError(_INVALID_VALUE, call, f"(kernelParams[{i}] is NULL)")
        values.append(t.from_buffer_copy(ctypes.string_at(addr, ctypes.sizeof(t))))
    b.launch_kernel(func, (gx, gy, gz), (bx, by, bz), shared, _stream(stream, ptsz), values,
                    cooperative=cooperative)


def cuLaunchCooperativeKernel(func: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                              shared: int, stream: int, params: int, ptsz: bool = False) -> None:
    # every block resident at once, or CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
    cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shared, stream, params, 0, ptsz,
                   cooperative=True)


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` of cuda.h."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


def cuLaunchKernelEx(pconfig: int, func: int, params: int, extra: int, ptsz: bool = False) -> None:
    if not pconfig:
        raise CudaError(_INVALID_VALUE, "cuLaunchKernelEx", "(NULL config)")
    c = _LaunchConfig.from_address(pconfig)
    if c.numAttrs and not c.attrs:
        raise CudaError(_INVALID_VALUE, "cuLaunchKernelEx", f"(NULL attrs, numAttrs {c.numAttrs})")
    cooperative = False
    for i in range(c.numAttrs):  # CUlaunchAttribute: id, 4 bytes of padding, a 64-byte value
        at = c.attrs + _LAUNCH_ATTRIBUTE_SIZE * i
        if ctypes.c_uint32.from_address(at).value == _LAUNCH_ATTRIBUTE_COOPERATIVE:
            cooperative = ctypes.c_int.from_address(at + 8).value != 0
    cuLaunchKernel(func, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY,
                   c.blockDimZ, c.sharedMemBytes, c.hStream or 0, params, extra, ptsz,
                   cooperative=cooperative)


#: ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE`` and ``sizeof(CUlaunchAttribute)`` (cuda.h).
_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
_LAUNCH_ATTRIBUTE_SIZE = 72
