"""Driver rules the simulator used to bend (issue 29), on the simulator itself.

Images are judged as a driver judges them; a kernel not from ``kernels/``
resolves and fails at launch (``CUDA_ERROR_INVALID_IMAGE``, not sticky);
the per-thread context stack and created contexts follow cuda.h (a
destroyed context is ``CUDA_ERROR_INVALID_CONTEXT``); every
``CUdevice_attribute`` has a value in the device profile, per device and
under ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import ctypes

import pytest
from gpuarray_sim import SimBackend, _cubin, _images, _profile

from gpuarray.errors import CudaError
from sim.tests.backend.test_image_rules import fake_cubin, fatbin

LEGACY = 1
PTX = (b".version 8.0\n.target sm_90\n.address_size 64\n"
       b".visible .entry foreign_k(.param .u64 p)\n{\n .shared .align 8 .b8 tile[256];\n ret;\n}\n")


def _backend(**kw) -> SimBackend:
    b = SimBackend(**kw)
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


@pytest.mark.parametrize("image, code", [
    (b"this is not a module\0", 218),                      # not ELF/fatbin: bad PTX
    (b"", 218),
    (b".version 8.0\n// no target\n", 218),
    (b"\x7fELF" + bytes(60), 209),                         # not a 64-bit CUDA cubin
    (b"\x7fELF\x02\x01" + bytes(12) + b"\x3e\x00" + bytes(44), 209),  # an x86-64 ELF
    (b"\x50\xed\x55\xba\x01\x00", 209),                     # a truncated fatbin
])
def test_an_image_a_driver_refuses_is_refused_with_a_documented_code(image, code):
    b = _backend()
    with pytest.raises(CudaError) as e:
        b.module_load_data(image)
    assert (e.value.code, e.value.call) == (code, "cuModuleLoadData")


def test_valid_images_and_the_placeholder_load():
    b = _backend()
    b.module_load_data(PTX)
    b.module_load_data(_cubin.link_image([], 90))               # an ELF cubin for sm_90
    b.module_load_data(fatbin([("elf", 90, _cubin.link_image([], 90))]))
    b.module_load_data(_images.PLACEHOLDER + b"gpuarray_kernel\0")
    with pytest.raises(CudaError):  # behind the stand-in driver it is not an image
        b.module_load_data(_images.PLACEHOLDER + b"k\0", placeholder_ok=False)


def test_a_kernel_of_a_ptx_image_runs_on_the_ptx_executor():
    import gpuarray  # noqa: F401  (registers the host build's toolchain)

    b = _backend()
    f = b.module_get_function(b.module_load_data(PTX), "foreign_k")
    b.launch_kernel(f, (2, 1, 1), (32, 1, 1), 0, LEGACY, [ctypes.c_uint64(0)])
    b.ctx_synchronize()


def test_a_kernel_without_ptx_resolves_and_fails_at_launch_without_poisoning_the_context():
    b = _backend()
    m = b.module_load_data(fake_cubin(["foreign_k"]))   # a cubin: no PTX to execute
    f = b.module_get_function(m, "foreign_k")
    with pytest.raises(CudaError) as e:
        b.module_get_function(m, "absent")
    assert e.value.name == "CUDA_ERROR_NOT_FOUND"
    with pytest.raises(CudaError) as e:   # the launch's own checks come first
        b.launch_kernel(f, (1, 1, 1), (2048, 1, 1), 0, LEGACY, [ctypes.c_uint64(0)])
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
    with pytest.raises(CudaError) as e:
        b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, LEGACY, [ctypes.c_uint64(0)])
    assert (e.value.name, e.value.call) == ("CUDA_ERROR_INVALID_IMAGE", "cuLaunchKernel")
    assert "no PTX" in str(e.value) and "foreign_k" in str(e.value)
    b.ctx_synchronize()  # not sticky
    b.mem_free(b.mem_alloc(16))
    assert _images.static_sizes(PTX, "foreign_k") == {"shared": 256, "const": 0, "local": 0}


def test_module_globals_hold_their_ptx_initialiser():
    b = _backend()
    m = b.module_load_data(PTX.replace(b".visible .entry", b".global .align 4 .u32 n[2] = {7, 9};\n"
                                                          b".visible .entry"))
    addr, size = b.module_get_global(m, "n")
    out = (ctypes.c_uint32 * 2)()
    b.memcpy_dtoh_async(ctypes.addressof(out), addr, 8, LEGACY)
    assert (size, list(out)) == (8, [7, 9])
    with pytest.raises(CudaError) as e:
        b.module_get_global(m, "absent")
    assert e.value.name == "CUDA_ERROR_NOT_FOUND"


def test_the_context_stack_and_created_contexts_follow_cuda():
    b = SimBackend(devices=2)
    b.init()
    p0 = b.primary_ctx_retain(0)
    with pytest.raises(CudaError) as e:
        b.ctx_pop_current()
    assert e.value.name == "CUDA_ERROR_INVALID_CONTEXT"
    b.ctx_push_current(p0)
    c = b.ctx_create(1)                          # pushed
    assert (b.ctx_get_current(), b.ctx_get_device()) == (c, 1)
    ptr = b.mem_alloc(64)                        # memory of device 1
    assert b.pointer_info(ptr).device_ordinal == 1
    b.ctx_set_current(0)                         # NULL pops
    assert b.ctx_get_current() == p0
    b.ctx_push_current(c)
    b.ctx_destroy(c)                             # current here: popped
    assert b.ctx_get_current() == p0
    for call in (lambda: b.ctx_set_current(c), lambda: b.ctx_push_current(c),
                 lambda: b.ctx_destroy(c), lambda: b.ctx_destroy(p0)):
        with pytest.raises(CudaError) as e:
            call()
        assert e.value.name == "CUDA_ERROR_INVALID_CONTEXT"
    assert b.ctx_pop_current() == p0
    assert b.ctx_get_current() == 0


def test_a_thread_left_with_a_destroyed_context_gets_context_is_destroyed():
    # cuda.h (cuCtxDestroy): "attempting to access ctx from those threads will result in
    # the error CUDA_ERROR_CONTEXT_IS_DESTROYED" (issue 38; INVALID_CONTEXT before)
    import threading

    b = _backend()
    c = b.ctx_create(0)
    got = []

    def other():
        b.ctx_set_current(c)
        ready.set()
        done.wait(10)
        try:
            b.mem_alloc(16)
        except CudaError as e:
            got.append(e.name)

    ready, done = threading.Event(), threading.Event()
    t = threading.Thread(target=other)
    t.start()
    ready.wait(10)
    b.ctx_destroy(c)
    done.set()
    t.join(10)
    assert got == ["CUDA_ERROR_CONTEXT_IS_DESTROYED"]


def test_every_device_attribute_has_a_value_per_device_and_visible_ordinal():
    b = SimBackend(devices=3, compute_capability=[(9, 0), (8, 6)], visible=[2, 0])
    b.init()
    assert len(_profile.ATTRIBUTES) == len({r[0] for r in _profile.ATTRIBUTES}) == 161
    for _code, name, _value, _note in _profile.ATTRIBUTES:
        for d in range(2):
            assert isinstance(b.device_attribute(name, d), int), name
    assert b.device_attribute("pci_bus_id", 0) == 0x12          # machine device 2
    assert b.device_attribute("compute_capability_minor", 0) == 6
    assert b.device_attribute("kernel_exec_timeout", 1) == 0
    assert b.device_attribute("multi_gpu_board_group_id", 1) == 0
    with pytest.raises(ValueError):
        b.device_attribute("no_such_attribute", 0)
    with pytest.raises(CudaError) as e:
        b.device_attribute("warp_size", 2)
    assert e.value.name == "CUDA_ERROR_INVALID_DEVICE"


def test_a_kernel_without_ptx_captured_into_a_graph_fails_when_the_graph_runs():
    # On a GPU the captured launch is only recorded: the capture must end
    # normally (a failed capture would leave the stream capturing).
    b = _backend()
    f = b.module_get_function(b.module_load_data(fake_cubin(["foreign_k"])), "foreign_k")
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s)
    b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, s, [ctypes.c_uint64(0)])
    graph = b.stream_end_capture(s)
    assert b.stream_is_capturing(s) == "none"
    g = b.graph_instantiate(graph)
    b.graph_launch(g, s)
    with pytest.raises(CudaError) as e:
        b.stream_synchronize(s)
    assert e.value.name == "CUDA_ERROR_INVALID_IMAGE" and "no PTX" in str(e.value)
    b.ctx_synchronize()  # not sticky
