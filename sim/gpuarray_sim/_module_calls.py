"""The simulator's module, launch and IPC calls.

One concern: code and sharing -- ``cuModuleLoadData`` /
``cuModuleGetFunction`` check the image as a driver would and resolve a
kernel name to its implementation, ``cuLaunchKernel`` checks the launch and
queues the kernel, which reaches device memory only through
:class:`_KernelMemory` (bounds, use after free, peer access); the
``cuIpc*`` calls delegate to ``_ipc.py``.

Launch dispatch: a kernel name is looked up in ``gpuarray_sim.kernels``
first (gpuarray's own kernels: the host build of ``kernels/`` run by
``_hostrt``, or a reference).  Any other kernel of a PTX image runs on the
PTX executor (``ptx/``): the image is parsed at ``cuModuleLoadData`` (bad
PTX fails there, 218/222), the entry's :class:`~.ptx._run.PtxKernel` is
the function's implementation, the module's ``.global``/``.const``
variables are allocated once per loaded module (the same bytes
``cuModuleGetGlobal`` answers) and handed to the kernel at launch.  A
kernel of an image with no PTX fails at launch (``_images.ForeignKernel``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuarray.errors import CudaError

from . import _images, _profile, _sticky
from . import kernels as sim_kernels
from ._codes import (
    COOPERATIVE_LAUNCH_TOO_LARGE,
    ILLEGAL_ADDRESS,
    INVALID_HANDLE,
    INVALID_IMAGE,
    NOT_FOUND,
    NOT_SUPPORTED,
)
from ._core import INVALID_VALUE, SimContext, SimCore, _locked
from ._memory import Allocation, DeviceFault
from ._race import Reports

#: Calls whose cuda.h documentation lists CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
_VERSION_CALLS = ("cuModuleLoadData", "cuModuleLoadDataEx", "cuLibraryLoadData", "cuModuleLoad",
                  "cuModuleLoadFatBinary", "cuLibraryLoadFromFile")


class _KernelMemory:
    """The ``SimMemoryAccess`` given to reference kernels of one launch."""

    def __init__(self, backend: SimCore, ctx: SimContext, kernel: str) -> None:
        self._b = backend
        self._ctx = ctx
        self._kernel = kernel

    def _resolve(self, address: int, nbytes: int) -> tuple[Allocation, int]:
        a, off = self._b.memory.resolve(int(address), int(nbytes), f"kernel {self._kernel}")
        if a.store is not None and a.device != self._ctx.device and a.device not in self._ctx.peers:
            raise DeviceFault(ILLEGAL_ADDRESS, f"kernel {self._kernel} on device {self._ctx.device} "
                                               f"accessed {a.describe()} without peer access enabled")
        return a, off

    def read(self, address: int, nbytes: int) -> np.ndarray:
        a, off = self._resolve(address, nbytes)
        return self._b.memory.read(a, off, int(nbytes))

    def host_pointer(self, address: int, nbytes: int) -> tuple[int, Any]:
        """Where ``[address, address+nbytes)`` lives on the host, checked like read/write.

        Returns the host address and the object that owns those bytes (keep it
        alive while using the address): a device allocation's store, or the
        allocation of mapped/managed host memory, whose device address is
        its host address.  For host-built kernels (``_hostrt.py``).
        """
        a, off = self._resolve(address, nbytes)
        if a.store is not None:
            return a.store.ctypes.data + off, a.store
        return a.base + off, a

    @property
    def memcheck(self) -> str:
        """What an access into an allocation's mapped slack is: ``report`` or ``strict`` (``_memcheck.py``)."""
        return self._b.memcheck

    def live_grants(self) -> tuple[list, list[int], list]:
        """Grants for every live allocation this launch may touch, in address order.

        The device memory of the launch's device and of its peers, page-locked
        memory of ``cuMemHostAlloc`` (all of it: unified addressing), mapped
        registered memory and managed memory.  For kernels whose accesses
        are known only when they run (PTX): each access is checked against
        these.  Returns the grants, each one's mapped slack (bytes past its
        end that its host memory also holds: ``Allocation.slack``) and the
        buffers to keep alive.
        """
        from ._hostrt import Grant

        grants: list[Any] = []
        slack: list[int] = []
        keep: list[Any] = []
        ctx = self._ctx
        for a in self._b.memory.allocations():
            if not a.alive or a.unmapped:
                continue
            if a.store is not None:
                if a.device != ctx.device and a.device not in ctx.peers:
                    continue
                host = a.store.ctypes.data
                keep.append(a.store)
            elif a.kind in ("managed", "pinned") or a.mapped:
                # cuda.h (unified addressing): memory of cuMemAllocHost/cuMemHostAlloc "is always
                # directly accessible from all contexts on all devices", DEVICEMAP or not
                host = a.base
                keep.append(a)
            else:
                continue
            grants.append(Grant(a.base, a.size, host, 1))
            slack.append(a.slack)
        return grants, slack, keep

    def write(self, address: int, data: Any) -> None:
        data = np.ascontiguousarray(np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8))
        a, off = self._resolve(address, data.size)
        self._b.memory.write(a, off, data)


class SimModuleCalls(SimCore):
    """Module, kernel-launch and IPC calls of the simulator."""

    # --------------------------------------------------- modules, launches
    @_locked
    def module_load_data(self, image: bytes, call: str = "cuModuleLoadData",
                         placeholder_ok: bool = True) -> int:
        """``cuModuleLoadData``: load ``image`` (checked as a driver would: ``_images.py``).

        ``call`` names the driver call for errors (the stand-in's
        ``cuLibraryLoadData`` and ``cuLinkAddData`` use it too);
        ``placeholder_ok``: whether gpuarray's simulator placeholder is accepted
        (the ``sim`` backend's loader; never behind the stand-in driver).
        """
        ctx = self._current(call)
        self._fault("module", call)
        image = bytes(image)
        major, minor = self.compute_capability[ctx.device]
        try:
            kind = _images.validate(image, placeholder_ok, cc=10 * major + minor)
            if kind == "fatbin":  # a driver loads one member: the one chosen for the device
                image = _images.fatbin_member(image, 10 * major + minor)
                kind = "elf" if image.startswith(b"\x7fELF") else "ptx"
        except _images.ImageError as e:
            raise CudaError(_images.code_for(call, e.kind), call, f"({e.reason})") from None
        # PTX, or the PTX inputs the stand-in linker kept in its output, linked as one program;
        # a cubin without PTX: the PTX its compile made, where known (_images.recorded_ptx)
        texts = [image] if kind == "ptx" else _images.ptx_texts(image)
        recorded = _images.recorded_ptx(image) if kind == "elf" and not texts else None
        programs = []
        unrunnable = ""
        if texts or recorded:
            from . import ptx

            try:
                if recorded:
                    programs.append(ptx.load(recorded))
                else:
                    programs.append(ptx.load(texts[0]) if len(texts) == 1 else ptx.link(list[bytes | str](texts)))
            except ptx.PtxError as e:
                if recorded:  # the cubin loads, as on a GPU; its kernels fail at launch, saying why
                    unrunnable = f"its PTX (from the compile that made the cubin): {e.message}"
                else:
                    code = e.code
                    if code != 222 or call not in _VERSION_CALLS:
                        code = _images.code_for(call, "ptx")
                    raise CudaError(code, call, f"({e.message})") from None
        if kind == "ptx" and programs and programs[0].unresolved:
            # PTX loaded alone is compiled as a whole program: a call of a function it only
            # declares fails to compile (a link, cuLinkComplete, resolves it across inputs)
            names = ", ".join(repr(n) for n in programs[0].unresolved)
            raise CudaError(_images.UNRESOLVED_CODE, call,
                            f"(ptxas fatal: Unresolved extern function {names}: the PTX uses "
                            "it and does not define it; link the PTX that defines it with "
                            "cuLinkCreate/cuLinkAddData/cuLinkComplete)")
        h = self._handle()
        self._modules[h] = (ctx, image)
        if programs:
            self._ptx_programs()[h] = programs
        if unrunnable:
            self._unrunnable()[h] = unrunnable
        return h

    def _unrunnable(self) -> dict[int, str]:
        """Loaded module handle -> why its recorded PTX cannot run on the PTX executor."""
        got = self.__dict__.get("_unrunnable_modules")
        if got is None:
            got = self.__dict__.setdefault("_unrunnable_modules", {})
        return got

    def _ptx_program(self, module: int, entry: str | None = None,
                     variable: str | None = None) -> Any:
        """The PTX program of ``module`` that defines kernel ``entry`` (or variable ``variable``)."""
        for program in self._ptx_programs().get(module, ()):
            if (entry in program.module.entries if entry is not None
                    else variable in program.module.globals):
                return program
        return None

    def _ptx_programs(self) -> dict[int, list[Any]]:
        """Loaded module handle -> its PTX programs (``ptx.PtxProgram``)."""
        progs = self.__dict__.get("_ptx_loaded")
        if progs is None:
            progs = self.__dict__.setdefault("_ptx_loaded", {})
        return progs

    @_locked
    def module_unload(self, module: int) -> None:
        entry = self._modules.get(module)
        if entry is None:
            raise CudaError(INVALID_VALUE, "cuModuleUnload", f"module 0x{int(module):x} is not loaded")
        _sticky.check(entry[0], "cuModuleUnload")
        del self._modules[module]
        self._ptx_programs().pop(module, None)
        self._unrunnable().pop(module, None)
        for h in [h for h, f in self._functions.items() if f[3] == module]:
            del self._functions[h]
            self._smem_optin.pop(h, None)

    @_locked
    def module_get_function(self, module: int, name: str) -> int:
        call = "cuModuleGetFunction"
        entry = self._modules.get(module)
        if entry is None:
            raise CudaError(INVALID_VALUE, call, f"module 0x{int(module):x} is not loaded")
        _sticky.check(entry[0], call)
        if name not in _images.entries(entry[1]):  # .entry functions only
            raise CudaError(NOT_FOUND, call, f"the module has no kernel (.entry function) {name!r}")
        impl = sim_kernels.lookup(name)
        program = self._ptx_program(module, entry=name)
        if (impl is None and program is None and self._ptx_programs().get(module)
                and _images.ptx_of(entry[1], name) is not None):
            # named in the PTX but no .entry of that name with a body (a declaration)
            raise CudaError(NOT_FOUND, call, f"the module has no kernel {name!r} (no .entry "
                                             "of that name with a body)")
        if impl is None and program is not None:
            impl = program.kernel(name)  # runs on the PTX executor
        if impl is None:  # found, but not one of gpuarray's kernels: fails at launch
            impl = _images.ForeignKernel(name, _images.ptx_of(entry[1], name) is not None,
                                         self._unrunnable().get(module, ""))
        h = self._handle()
        self._functions[h] = (entry[0], name, impl, module)
        return h

    @_locked
    def module_get_global(self, module: int, name: str) -> tuple[int, int]:
        """``cuModuleGetGlobal``: ``(address, size)`` of the image's ``.global`` variable ``name``.

        Allocated in the module's device on first use, with the PTX
        initialiser (or zeros); freed with the module's context.
        """
        call = "cuModuleGetGlobal"
        entry = self._modules.get(module)
        if entry is None:
            raise CudaError(INVALID_VALUE, call, f"module 0x{int(module):x} is not loaded")
        _sticky.check(entry[0], call)
        key = (module, name)
        hit = self._globals.get(key)
        if hit is not None:
            return hit
        program = self._ptx_program(module, variable=name)
        if program is not None:
            g = program.module.globals.get(name)
            if g is None or g.space not in ("global", "const"):
                raise CudaError(NOT_FOUND, call, f"the module has no device variable {name!r}")
            self._place_globals(module, entry[0], program, call)
            return self._globals[key]
        var = _images.global_variable(entry[1], name)
        if var is None:
            raise CudaError(NOT_FOUND, call, f"the module has no device variable {name!r}")
        a = self.memory.alloc_device(entry[0].device, max(var[0], 1), call=call, owner=entry[0])
        self.memory.write(a, 0, var[1])
        self._globals[key] = (a.base, var[0])
        return self._globals[key]

    def _place_globals(self, module: int, ctx: SimContext, program: Any, call: str) -> dict[str, int]:
        """Allocate (once) every ``.global``/``.const`` variable of a PTX module; name -> address.

        Initial bytes from the PTX; address initialisers (``= generic(x)``)
        are filled in once every variable has its address.
        """
        out: dict[str, int] = {}
        fresh = []
        for name in program.globals_needed:
            hit = self._globals.get((module, name))
            if hit is None:
                g = program.module.globals[name]
                a = self.memory.alloc_device(ctx.device, max(g.size, 1), call=call, owner=ctx)
                if g.init:
                    self.memory.write(a, 0, g.init)
                hit = self._globals[(module, name)] = (a.base, g.size)
                fresh.append((g, a))
            out[name] = hit[0]
        for g, a in fresh:
            for off, sym, add in g.relocs:
                if sym in program.module.functions and sym not in out:  # a function's address
                    from .ptx._info import function_addresses

                    out_fn = function_addresses(program.module)[sym]
                    self.memory.write(a, off, int(out_fn + add).to_bytes(8, "little"))
                    continue
                if sym not in out:
                    raise CudaError(NOT_FOUND, call, f"the initialiser of {g.name} names "
                                                     f"{sym!r}, which is not a module variable")
                self.memory.write(a, off, int(out[sym] + add).to_bytes(8, "little"))
        return out

    @_locked
    def function_kernel(self, func: int) -> Any:
        """Simulator only: the ``SimKernel`` behind function handle ``func`` (the stand-in
        driver reads its ``param_types`` to decode ``cuLaunchKernel``'s parameters)."""
        entry = self._functions.get(func)
        if entry is None:
            raise CudaError(INVALID_HANDLE, "cuLaunchKernel", f"function 0x{int(func):x}")
        return entry[2]

    @_locked
    def function_info(self, func: int) -> tuple[str, int, int, dict[str, int]]:
        """Simulator only: ``(name, module, device, static sizes)`` of function handle ``func``.

        The static sizes are the kernel's shared, const and local memory: for
        a kernel of a PTX program, the executor's facts of the entry
        (``ptx.EntryInfo``: functions it calls included), with ``max_threads``
        (``.maxntid``/``.reqntid`` product, or None) and ``ptx_version`` (the
        target's virtual architecture, e.g. 90); else read from the image
        (``_images.static_sizes``), ``max_threads`` None.
        """
        entry = self._functions.get(func)
        if entry is None:
            raise CudaError(INVALID_HANDLE, "cuFuncGetAttribute", f"function 0x{int(func):x}")
        program = self._ptx_program(entry[3], entry=entry[1])
        if program is not None:  # the executor's facts of the entry
            info = program.module.entries[entry[1]]
            sizes = {"shared": info.static_shared_bytes, "const": info.const_bytes,
                     "local": info.local_bytes, "max_threads": info.max_threads,
                     "ptx_version": info.ptx_version}
        else:
            module = self._modules.get(entry[3])
            sizes = {**_images.static_sizes(module[1] if module else b"", entry[1]),
                     "max_threads": None}
        return entry[1], entry[3], entry[0].device, sizes

    @_locked
    def function_params(self, func: int, call: str = "cuFuncGetParamInfo") -> list[tuple[int, int]]:
        """``(offset, size)`` of each parameter of function handle ``func`` in the device-side
        parameter layout (``cuFuncGetParamInfo``, ``cuKernelGetParamCount``...).

        From the PTX signature of a PTX kernel (each ``.param`` at its alignment),
        from the argument types of one of gpuarray's kernels; a kernel of a cubin
        without PTX has no signature the simulator reads (``CUDA_ERROR_NOT_SUPPORTED``).
        """
        self._current(call, work=False)  # the kernel is looked up in the current context
        entry = self._functions.get(func)
        if entry is None:
            raise CudaError(INVALID_VALUE, call, f"0x{int(func):x} is not a function or kernel")
        program = self._ptx_program(entry[3], entry=entry[1])
        if program is not None:
            return [(off, size) for _name, size, _align, off in program.module.entries[entry[1]].params]
        impl = entry[2]
        if getattr(impl, "foreign", False):
            raise CudaError(NOT_SUPPORTED, call, f"kernel {entry[1]!r} comes from a cubin without "
                                                 "PTX: the simulator reads parameters from PTX")
        out, off = [], 0
        for t in impl.param_types:
            size = ctypes.sizeof(t)
            align = ctypes.alignment(t)
            off = -(-off // align) * align
            out.append((off, size))
            off += size
        return out

    @_locked
    def function_ptx_arch(self, func: int) -> int:
        """The ``sm_XY`` of the ``.target`` of the PTX that defines ``func``, as ``XY`` (0: no PTX)."""
        name, module, _dev, _sizes = self.function_info(func)
        ptx = _images.ptx_of(self._modules[module][1], name)
        return _images.ptx_target(ptx) if ptx is not None else 0

    @_locked
    def function_max_dynamic_shared(self, func: int) -> int:
        """``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``: the opt-in, else 48 KiB less the static size."""
        static = self.function_info(func)[3]["shared"]
        return self._smem_optin.get(func, max(0, (48 << 10) - static))

    @_locked
    def function_set_max_dynamic_shared(self, func: int, nbytes: int,
                                        call: str = "cuFuncSetAttribute") -> None:
        """Opt function ``func`` in to ``nbytes`` of dynamic shared memory per block.

        cuda.h: the value plus the kernel's static shared memory cannot exceed
        ``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`` (``INVALID_VALUE``).
        """
        name, _module, dev, sizes = self.function_info(func)
        optin = _profile.value("max_shared_memory_per_block_optin", self.compute_capability[dev],
                               self.physical[dev])
        if not 0 <= nbytes <= optin - sizes["shared"]:
            raise CudaError(INVALID_VALUE, call,
                            f"{name}: {nbytes} bytes of dynamic shared memory; with its "
                            f"{sizes['shared']} static bytes the block may have {optin} "
                            f"(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)")
        self._smem_optin[func] = int(nbytes)

    def _check_shared(self, func: int, shared_mem: int, call: str, threads: int = 1) -> None:
        """A launch's dynamic shared memory and block fit what the function may use (else INVALID_VALUE)."""
        name, _m, _d, sizes = self.function_info(func)
        if threads > (sizes["max_threads"] or 1024):
            raise CudaError(INVALID_VALUE, call, f"{name}: a block of {threads} threads; the kernel "
                                                 f"allows {sizes['max_threads']} (.maxntid/.reqntid)")
        limit = self.function_max_dynamic_shared(func)
        if not 0 <= shared_mem <= limit:
            name, _m, _d, sizes = self.function_info(func)
            raise CudaError(INVALID_VALUE, call,
                            f"{name}: {shared_mem} bytes of dynamic shared memory; with its "
                            f"{sizes['shared']} static bytes it may use {limit} (48 KiB in all "
                            "unless cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) opted in)")

    @_locked
    def resident_blocks(self, func: int, threads: int, shared_mem: int) -> int:
        """Blocks of ``threads`` threads of ``func`` the device holds at once (all its SMs).

        As the occupancy calculator: per SM, the least of the block limit,
        the threads, the registers (32 per thread) and the shared memory
        (static and ``shared_mem`` dynamic bytes, plus the reserved 1 KiB per
        block), times the SMs.
        """
        _name, _m, dev, sizes = self.function_info(func)

        def attr(a: str) -> int:
            return _profile.value(a, self.compute_capability[dev], self.physical[dev])

        warps = -(-threads // 32)
        smem = sizes["shared"] + shared_mem + attr("reserved_shared_memory_per_block")
        per_sm = min(attr("max_blocks_per_multiprocessor"),
                     attr("max_threads_per_multiprocessor") // (32 * warps),
                     attr("max_registers_per_multiprocessor") // (32 * 32 * warps),
                     attr("max_shared_memory_per_multiprocessor") // smem)
        return max(0, per_sm) * attr("multiprocessor_count")

    @_locked
    def launch_kernel(self, func: int, grid: tuple[int, int, int], block: tuple[int, int, int],
                      shared_mem: int, stream: int, params: Sequence[Any],
                      cooperative: bool = False) -> None:
        """Launch ``func``; ``cooperative``: every block resident at once (``grid.sync``).

        Raises
        ------
        CudaError
            ``CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`` (720): a cooperative
            grid of more blocks than the device holds at once
            (:meth:`resident_blocks`); and what any launch raises.
        """
        call = "cuLaunchCooperativeKernel" if cooperative else "cuLaunchKernel"
        entry = self._functions.get(func)
        if entry is None:
            raise CudaError(INVALID_HANDLE, call, f"function 0x{int(func):x}")
        ctx, name, impl, _module = entry
        s = self._stream(stream, call)
        self._fault("launch", call)
        if s.ctx is not ctx:
            raise CudaError(INVALID_HANDLE, call, f"{name}: stream of device {s.ctx.device}, "
                                                  f"module of device {ctx.device}")
        g = tuple(int(x) for x in grid)
        b = tuple(int(x) for x in block)
        if (len(g) != 3 or len(b) != 3 or min(g + b) < 1 or g[0] > 2**31 - 1
                or max(g[1:]) > 65535 or b[0] * b[1] * b[2] > 1024 or b[2] > 64):
            raise CudaError(INVALID_VALUE, call, f"{name}: grid {g} block {b}")
        self._check_shared(func, shared_mem, call, b[0] * b[1] * b[2])
        nblocks = g[0] * g[1] * g[2]
        resident = self.resident_blocks(func, b[0] * b[1] * b[2], shared_mem)
        if cooperative and not hasattr(impl, "program"):
            raise CudaError(NOT_SUPPORTED, call, f"{name}: the simulator runs cooperative "
                                                 "launches of kernels from PTX only")
        if cooperative and nblocks > resident:
            raise CudaError(COOPERATIVE_LAUNCH_TOO_LARGE, call,
                            f"{name}: a cooperative grid of {nblocks} blocks; the device holds "
                            f"{resident} blocks of {b[0] * b[1] * b[2]} threads with "
                            f"{shared_mem} bytes of dynamic shared memory at once")
        if getattr(impl, "foreign", False) and s.capture is None:
            raise impl.error(call)  # after the checks a driver makes of any launch
        # (captured, the launch is a graph node: it fails when the graph runs it)
        run = impl.run
        if hasattr(impl, "program"):  # a kernel of a PTX image
            run = self._ptx_launch(impl, name, _module, ctx, b, shared_mem, call,
                                   _slots(nblocks, resident, b[0] * b[1] * b[2], cooperative),
                                   cooperative)
        try:
            snap = [type(p).from_buffer_copy(p) for p in params]  # CUDA copies parameters at launch
        except TypeError:
            raise TypeError(f"{name}: kernel parameters must be ctypes objects, got "
                            f"{[type(p).__name__ for p in params]}") from None
        if hasattr(impl, "pack"):  # a PTX kernel: the parameters match its signature
            impl.pack(snap)
        acc = impl.accesses(snap)
        mem = _KernelMemory(self, ctx, name)
        work: Any = lambda: run(mem, g, b, shared_mem, snap)  # noqa: E731
        if hasattr(impl, "program"):  # reports the ranges it touched when it has run
            work = Reports(work)
        op = self.sched.enqueue(s, work, f"kernel {name}", acc)
        if op.captured:  # a kernel node (_capture.Node): what cuGraphKernelNodeGetParams reports
            node: Any = op
            node.params = ("launch", func, grid, block, shared_mem, list(params))

    def _ptx_launch(self, impl: Any, name: str, module: int, ctx: SimContext,
                    block: tuple[int, ...], shared_mem: int, call: str, slots: int = 1,
                    cooperative: bool = False) -> Any:
        """Check a PTX kernel's launch as a driver does; the function the stream runs."""
        from . import ptx

        try:
            impl.check()  # builds the module (or loads it from the cache)
        except ptx.PtxError as e:
            raise CudaError(INVALID_IMAGE, call, f"({e.message})") from None
        except RuntimeError as e:  # the kernels layer's HostCompileError
            raise CudaError(INVALID_IMAGE, call, f"(the translated PTX failed to build: {e})"
                            ) from None
        info = impl.info
        threads = block[0] * block[1] * block[2]
        if info.max_threads is not None and threads > info.max_threads:
            raise CudaError(INVALID_VALUE, call, f"{name}: {threads} threads per block, the "
                                                 f"kernel allows {info.max_threads} (.maxntid)")
        addresses = self._place_globals(module, ctx, impl.program, call)
        return lambda mem, g, b, smem, snap: impl.run(mem, g, b, smem, snap, globals=addresses,
                                                      slots=slots, cooperative=cooperative)

    # ----------------------------------------------------------------- IPC
    # Across processes through shared memory: see _ipc.py.
    @_locked
    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        return self._ipc.get_handle(int(ptr))

    @_locked
    def ipc_open_mem_handle(self, handle: bytes) -> int:
        return self._ipc.open(bytes(handle))

    @_locked
    def ipc_close_mem_handle(self, ptr: int) -> None:
        self._ipc.close(int(ptr))


#: Threads a non-cooperative launch keeps resident at most (fibers; a GPU
#: promises such a launch no co-residency at all, so this is the simulator's choice).
SPIN_RESIDENT_THREADS = 16384
#: Blocks a non-cooperative launch keeps resident at most (their state is allocated per launch).
SPIN_RESIDENT_BLOCKS = 64


def _slots(nblocks: int, resident: int, threads: int, cooperative: bool) -> int:
    """Blocks a launch may hold resident at once in the fiber runtime.

    A cooperative launch: all (the caller checked that the device holds
    them).  Otherwise the device's residency, at most
    :data:`SPIN_RESIDENT_BLOCKS` blocks and :data:`SPIN_RESIDENT_THREADS`
    threads: the runtime admits blocks beyond the first only while the
    resident ones spin (a flag another block sets).
    """
    if cooperative:
        return nblocks
    return max(1, min(nblocks, resident, SPIN_RESIDENT_BLOCKS,
                      SPIN_RESIDENT_THREADS // max(1, threads)))
