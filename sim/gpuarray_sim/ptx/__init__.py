"""The simulator's PTX executor: PTX text, translated to C++, run on the host build's fibers.

A module of PTX (what NVRTC, numba-cuda or cuda.core hand to
``cuModuleLoadData``) runs here as a GPU would run it, with every memory
access checked.  Its own room beneath the simulator, in four layers:

``_lex.py`` / ``_parse.py`` / ``_ast.py`` / ``_info.py``  -- syntax
    PTX text -> :class:`PtxModule` (directives, module variables with
    their initial bytes, functions with parameters, declarations and
    instructions, each with its PTX line), and what a driver reports of
    each entry (:class:`EntryInfo`).  Syntax errors are 218
    (``CUDA_ERROR_INVALID_PTX``), a ``.version`` newer than
    :data:`SUPPORTED_VERSION` is 222 (``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``).
``_check.py`` / ``_forms.py`` -- what a driver's JIT refuses
    Between parsing and translation (in :func:`load`), every instruction
    a GPU driver's PTX JIT (``ptxas``) refuses is refused with 218 naming
    its line: a modifier, rounding mode or type its opcode does not take
    (``_forms.LEGAL``), an operand count it does not take (``_forms.ARITY``),
    an ld/st/ldu state space, vector width or type (``_forms.LDST``), a
    ``.version`` older than the ``.target`` needs (``_forms.MINVER``) --
    tables generated from ptxas's verdicts by ``sim/tools/ptx_forms/gen.py``
    -- and, by rules that table's probes check, a register operand of a type
    or width the ISA's type-checking rules do not allow (ld/st too), a guard
    that is not a predicate, a predicate or float register as an address,
    ``bfe``/``bfi``/``bar`` immediates out of range, a barrier thread count
    not a multiple of 32, a non-positive ``.maxntid``/``.reqntid``, an
    integer literal as a float operand, ``.reg .bf16``.  The simulator may be stricter than a driver,
    never more lenient (``sim/tests/ptx/test_ptx_check.py`` checks every form of
    the table against ptxas's verdict).
``_context.py`` / ``_emit.py`` / ``_ops*.py`` -- translation
    One C++ function per PTX function: registers become typed locals
    (uninitialised, as PTX leaves them: zeroing hundreds per thread cost
    half the run time),
    labels ``goto`` targets, predicates ``if``; ``.local`` variables are
    frames of the thread's local arena; call-site ``.param`` variables byte
    arrays; every load and store goes through a checked helper of
    ``ptxrt.h``; one exported wrapper per ``.entry`` has the runtime's entry
    signature.  Function addresses (``mov.u64 %rd, f;``, ``.global``
    initialisers naming functions) are ``kFunc + 16 * (i + 1)`` for the
    module's i-th function (``_info.function_addresses``: unique, never
    null, in a window no data access reaches, so a load or store there is
    700); an indirect ``call (r), %rd, (a), proto;`` (``.callprototype``
    or ``.calltargets`` declared under a label in the body) switches on
    the register among the module's functions of the prototype's signature
    (return and parameter sizes); any other address -- a data pointer,
    null, a function of another signature -- faults
    ``CUDA_ERROR_INVALID_PC`` (718, sticky) naming the call's line, as a
    GPU's jump to no such code would.  The interpreter tier does the same
    lookup in its ``ICALL`` step.  ``malloc``/``free`` (CUDA's device
    heap, which numba-cuda's runtime allocates arrays from) are the
    executor's own: a bump allocator (``ptxrt.h`` ``dev_malloc``) on a
    hidden 8 MiB module variable (``_ast.HEAP_VAR``, CUDA's default heap
    limit) of every module that declares them -- 16-byte aligned blocks,
    NULL once exhausted, freed blocks not reused, ``free`` of a pointer it
    did not return a trap (719) naming the line.  An instruction, modifier or type the translator does not
    know makes every entry that reaches it unlaunchable: the launch fails
    with ``CUDA_ERROR_INVALID_IMAGE`` (200, not sticky) naming the
    instruction and its PTX line -- never a silently different program.
``ptxrt.h`` -- runtime support (C++)
    Address windows, checked accesses, barriers and warp collectives,
    atomics, rounding, conversions, printf.  It sits on the SAME fiber
    runtime as the host build of ``kernels/`` (``sim/_hostrt.cpp``, which
    gained ``yield`` and deadlock detection for this: a round in which every
    waiting thread waits again and nothing progressed ends the launch with
    719 naming the thread and the PTX line).
``_build.py`` / ``_run.py`` -- build, cache and launch
    The unit is built with the host build's compiler and flags
    (``sim/gpuarray_sim/kernels/_host.py``, reached through
    ``_hostrt.toolchain()``, which the kernels layer registers) into the
    kernel disk cache (same folder and trust rules), keyed by the hash of
    the PTX, the hash of every source file of this package and of the
    fiber runtime's header, the compiler's identity and the flags; writes are
    atomic and a corrupt entry is a miss.  :class:`PtxKernel` is the ``SimKernel`` the simulator's launch
    dispatch (``sim/_module_calls.py``) runs for a kernel of a PTX image.

Contract for other layers (``sim/_module_calls.py``, the stand-in, tools)
--------------------------------------------------------------------------
``parse(text) -> PtxModule``
    ``text`` is ``str`` (bytes: :func:`load` decodes up to the first NUL).
    Raises :class:`PtxError` (``.code`` 218 or 222, ``.message`` naming the
    line, ``.line``).
``PtxModule``: ``.version`` ``(major, minor)``, ``.target`` (``"sm_90"``),
    ``.arch`` (90), ``.address_size`` (64; 32-bit PTX is refused with 218),
    ``.entries`` ``{name: EntryInfo}`` (``.entry`` with a body only),
    ``.functions`` ``{name: Function}`` (``.entry`` and ``.func``, declarations
    too), ``.globals`` ``{name: GlobalVar}``.
``EntryInfo``: ``params`` ``[(name, size, align, offset)]``, ``param_size``,
    ``static_shared_bytes``, ``const_bytes``, ``local_bytes``, ``max_threads``
    (``.maxntid``/``.reqntid`` product, else None), ``ptx_version`` (the
    target's number, ``sm_90`` -> 90: the virtual architecture
    ``CU_FUNC_ATTRIBUTE_PTX_VERSION`` reports), ``uses_dynamic_shared``.
``GlobalVar``: ``name``, ``space`` (``"global"``, ``"const"``, ``"shared"``),
    ``size``, ``align``, ``init`` (initial bytes; address initialisers are
    zeros there and listed in ``relocs`` ``[(offset, symbol, addend)]``),
    ``extern``.
``link(images) -> PtxProgram``: several PTX modules as one (``cuLinkAddData``
    inputs): declarations resolve to other modules' definitions, ``.weak``
    yields to strong, ``.common`` merges.
``load(image) -> PtxProgram``: parse (cached per text), check (``_check.py``: 218) and translate; the
    C++ is built on the first launch.  ``PtxProgram.module``,
    ``.kernel(name) -> PtxKernel``, ``.globals_needed`` (module variables in
    the order of the launch's address table).
``PtxKernel`` (a ``SimKernel``): ``param_types`` (one ctypes array type per
    PTX parameter, of its size and alignment, so the stand-in can decode
    ``kernelParams``), ``info`` (:class:`EntryInfo`), ``foreign = False``,
    ``accesses(params) -> []``, ``check()`` (builds; raises
    :class:`UnsupportedPtx`, code 200, for an unlaunchable entry),
    ``pack(params)`` (the parameter block; TypeError for a wrong count or
    size), and ``run(mem, grid, block, shared_mem, params, globals=...)``
    (returns the ``(address, nbytes, is_write)`` intervals it touched).
    ``globals`` maps each module variable to its device address; the
    dispatch allocates them once per loaded module, so that
    ``cuModuleGetGlobal`` and the kernel see the same bytes.

Execution model
---------------
Blocks run on the stream's OS thread, one at a time while they progress
and several resident together when they must be (``_hostrt.cpp``: a
cooperative launch's whole grid; another launch's next block whenever the
resident ones only spin); the threads of a block are fibers switched only where a thread must wait (``bar.sync``,
``bar.red``, warp collectives, an incomplete ``mbarrier.try_wait``).  Warps are 32 consecutive linear thread
ids; ``shfl.sync``/``vote.sync``/``match.sync``/``redux.sync``/
``bar.warp.sync`` wait, as the ISA says, for the non-exited lanes of their
own member mask to execute a collective of the same kind with the same mask
(at any instruction): lanes in other branches with other masks, disjoint or
not, go on meanwhile, each group completing at its own instruction
(``sim/tests/ptx/test_ptx_warp.py``, the disjoint and overlapping cases).
Lanes a partial last warp lacks are not members; exited lanes are not
waited for.  Faults, each 719 naming the line, only where the ISA leaves the
behaviour or a result undefined: a lane outside its own mask; a lane of the
mask that never comes to a matching collective (it exited at another, or
waits at another kind or with another mask: the deadlock fault); and a
``shfl.sync`` lane whose computed source lane is in range (``p`` true) but
not a non-exited member of its mask -- the ISA makes that result undefined
(a GPU returns some register's value), and the executor refuses to invent
one rather than hand back a plausible number.  No fault: a source lane out
of range (``p`` false: the lane's own value, as the ISA defines), a source
lane that is a member (whatever other lanes of the warp are doing), and a
member that exited before a ``vote``/``match``/``redux``/``bar.warp.sync``
(it is left out, as the ISA's "non-exited threads" says).
``activemask`` is the lanes converged at it: a lane waits until every lane
of its warp that has not exited is at an ``activemask`` or blocked at a
barrier or collective, and gets the lanes at the same ``activemask``
instruction (the same PTX line).  ``bar.sync``
without a thread count waits for every thread that has not exited.
Atomics are compare-and-swap loops on the host memory (atomic against
other launches running on other streams).  ``%clock``/``%clock64`` count
reads (monotonic, not time).  Loops: every 1024th backward branch a thread
takes yields to the other resident threads (``ptx::spin``), so a
spin-wait on a flag or a spin-lock that another thread releases, with no
barrier between, works as on a GPU; when only spinning threads are left,
one more block is made resident (up to the launch's slots: the device's
residency, and for a launch that is not cooperative at most 64 blocks and
16384 threads), so a flag a later block sets is seen.  Rounds in which
threads only spun are no deadlock; after ``GPUARRAY_SIM_LAUNCH_TIMEOUT``
seconds (default 30) of them with no thread finishing or passing a barrier
and no block left to admit, the launch ends with
``CUDA_ERROR_LAUNCH_TIMEOUT`` (702, sticky as on a GPU) naming the loop's
branch and thread.  Cooperative launches have the whole grid resident
(``COOPERATIVE_LAUNCH_TOO_LARGE`` beyond the device's residency): their
blocks start one at a time too, and the first round with no progress
admits all the rest at once;
``grid.sync`` is numba-cuda's ``cudaCGGetIntrinsicHandle``/
``cudaCGSynchronize`` (libcudadevrt's, provided by the executor: a
barrier of every thread of the grid, a trap outside a cooperative
launch); CUDA C++'s own ``grid.sync`` (which reads the grid workspace
from ``%envreg``) is not.  ``mbarrier`` objects (``cuda::barrier``,
``cuda::ptx::mbarrier_*``; ``ptx_sync.h``'s ``mb_*``) are 8 shared bytes
in the executor's own encoding of the ISA's opaque state (pending and
expected counts, tx-count, phase parity, a tag that tells an initialised
object from unwritten shared memory); a token is the object as it was
before its arrive.  ``try_wait`` on an incomplete phase yields once, as a
loop's spin does (a wait that never completes is the 702 timeout naming
it); ``test_wait`` never yields.  A non-shared generic address faults 700,
a misaligned object 716; what the ISA leaves undefined (no ``init``,
counts outside [1, 2^20 - 1], an arrival beyond the pending count, a
``.noComplete`` arrival that completes, ``pending_count`` of a token not
from ``.noComplete``) traps (719) naming the line.  The race
detector sees what a PTX kernel touched: ``accesses`` is empty (the ranges
are known only while it runs), the checked global accesses of ``ptxrt.h``
widen per allocation the interval read and the interval written (atomics
write), ``run`` returns them, and the launch, queued as ``_sched.Reports``
work, is judged when it has run on its enqueue-time clock.

Numerics
--------
Integers exact (division and remainder by zero give all ones, as an H200
does; no trap); packed 16-bit lanes (``.s16x2``/``.u16x2``), ``dp4a``/``dp2a``,
the SIMD video instructions without lane selectors, and ``fns`` as the
ISA's pseudo-code.  fp8 (``cvt`` to ``.e4m3x2``/``.e5m2x2``, always
``.satfinite``): rounded to nearest even, past the largest finite (and
infinities) the largest finite, NaN ``0x7f``; back to ``.f16x2`` exact
(an e4m3 NaN the canonical ``0x7fff``).  Atomics on f16/bf16 (and pairs)
and vector atomics (``.v2``/``.v4``/``.v8``) are an atomic read-modify-write
per element.
Float ``add/sub/mul/div/fma/sqrt/rcp`` with ``.rn`` are IEEE, correctly
rounded (C++ without contraction, see ``ptxrt.h``; ``fma`` is libm's
``fmaf``/``fma``); ``.rz/.rm/.rp`` run under ``fesetround`` with volatile
operands.  ``.ftz`` flushes subnormal inputs and results of ``.f32`` to
sign-preserving zero; ``.sat`` clamps to [+0, 1] (NaN and -0 -> +0).
Float-to-int ``cvt`` saturates; NaN gives the destination's top bit alone
(``0x80000000``, ``0x8000000000000000``) from an f64 source or into a 64-bit
destination, else 0.  NaN results of f32 operations and conversions are the
canonical ``0x7fffffff`` (``copysign`` and ``cvt.f32.bf16``, bit operations
on a GPU, keep the payload); of f16/bf16 ones ``0x7fff``.  ``testp.normal``
holds for zero.  These rules are what an H200 answered (the ``ptx-vs-gpu``
step of the GPU runs of 2026-11-28, docs/validation.md), where the ISA says
less or otherwise.  f16/bf16 conversions are
exact software roundings (all four modes); f16/bf16 arithmetic (scalar and
``x2`` pairs: add, sub, mul, fma, min, max, neg, abs, setp) is correctly
rounded by construction: the operands widen exactly to double, a product is
exact there, a sum (add, sub, fma's product plus addend) is rounded to odd
(TwoSum: truncated, the last bit set when bits were lost), and that rounds
once to the format -- a 53-bit value rounded to odd rounds to a format of
p <= 51 bits as the exact value would (``sim/tests/ptx/test_ptx_exact.py``
checks it on random samples against Fractions, and every conversion of all
65,536 f16/bf16 values).  ``.approx`` functions use the
C library (glibc: ``exp2f``, ``log2f``, ``sinf``, ``cosf``, ``tanhf`` within
1-2 ulp; ``rsqrt`` as ``1/sqrt`` in double; ``rcp/sqrt/div.approx``
correctly rounded), all inside the PTX ISA's stated bounds, and their
special ranges as the ISA states them: ``div.approx.f32`` is ``a * (1/b)``,
a signed zero for 2^126 < |b| < 2^128 (NaN for an infinite ``a``).  Unknown
until a GPU run: bit-equality of ``.approx`` results (a GPU's are
coarser: ``ex2``, ``lg2``, ``rsqrt`` within 1-2 ulp of these, ``tanh`` about
100 ulp, ``rcp.approx.ftz.f64`` a 20-bit result in the high word), of
``add``/``mul`` without a rounding modifier (ptxas may fuse them into an
``fma``; here they are never fused), and f64 NaN payloads (an H200 returned
the second operand's NaN, quieted, when both were NaN; here the C++
operation's, the first).
"""

from __future__ import annotations

from ._ast import EntryInfo, Function, GlobalVar, PtxModule
from ._build import PtxProgram, link, load
from ._errors import PtxError, UnsupportedPtx
from ._parse import SUPPORTED_VERSION, parse
from ._run import PtxKernel

__all__ = ["parse", "load", "link", "PtxError", "UnsupportedPtx", "PtxModule", "EntryInfo", "GlobalVar",
           "Function", "PtxProgram", "PtxKernel", "SUPPORTED_VERSION"]
