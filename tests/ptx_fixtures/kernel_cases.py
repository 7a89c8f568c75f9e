"""The kernels/ cases of tests/test_ptx_run.py and the generator of nvrtc_kernels.ptx.

Each case is a copy or fill planned by gpuarray's kernels layer; the
fixture holds NVRTC's PTX (CUDA 13, compute_90, the options a GPU build
uses) of exactly the specialisations they plan.  Regenerate with
``python tests/ptx_fixtures/kernel_cases.py`` (needs NVRTC).
"""

from __future__ import annotations

import numpy as np

BASE = 0x0010_0000_0000_0000  # any device address: planning looks at strides only

#: name -> (kind, dst dtype, dst shape, dst strides, src dtype, src strides or fill value)
CASES = {
    "copy_f4_f8_2d": ("copy", np.float32, (3, 5), (20, 4), np.float64, (8, 24)),
    "copy_f2_f4_1d": ("copy", np.float16, (1000,), (2,), np.float32, (4,)),
    "fill_u8_1d": ("fill", np.uint64, (100,), (8,), None, 0x0102030405060708),
    "fill_f8_2d": ("fill", np.float64, (4, 6), (96, 16), None, -1.25),
    "transpose_f4": ("copy", np.float32, (64, 48), (192, 4), np.float32, (4, 256)),
    "copy_f2_c8_3d": ("copy", np.float16, (2, 3, 4), (24, 8, 2), np.complex64, (8, 48, 96)),
    "copy_u1_b1": ("copy", np.uint8, (50,), (1,), np.bool_, (2,)),
}


def plan(case):
    from gpuarray._kernels import _plan

    kind, dt, shape, dst_strides, st, src = case
    if kind == "fill":
        return _plan.plan_fill(BASE, dst_strides, dt, shape, src)
    return _plan.plan_copy(BASE, dst_strides, dt, BASE + (1 << 30), src, st, shape)


def specs():
    out = {}
    for case in CASES.values():
        for op in plan(case):
            if hasattr(op, "spec"):
                out[op.spec.symbol] = op.spec
    return list(out.values())


if __name__ == "__main__":
    from pathlib import Path

    from gpuarray._kernels import _nvrtc, _source, _specs
    from gpuarray._kernels._nvrtc import Target

    ss = specs()
    opts = _nvrtc.compile_options(Target("ptx", "compute_90"))
    text = _nvrtc.compile_program(_specs.program_source(ss), _source.kernel_headers(), opts, "ptx")
    Path(__file__).with_name("nvrtc_kernels.ptx").write_bytes(text.rstrip(b"\0"))
    print("\n".join(s.symbol for s in ss))
