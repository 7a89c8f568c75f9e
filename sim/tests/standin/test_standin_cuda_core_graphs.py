"""cuda.core's graph definitions over the stand-in: a conditional while-loop built node by node.

cuda.core (``GraphDefinition``, 1.1 and later) builds the graph with the
explicit graph API -- ``cuGraphCreate``, ``cuGraphConditionalHandleCreate``,
``cuGraphAddNode`` with a conditional node whose body graph the driver makes,
kernel and memset nodes -- and instantiates and launches it.  The body's
kernel decrements a counter and sets the loop's handle from device code
(``cudaGraphSetConditional``, which the PTX executor provides), so the loop
runs exactly as many times as the counter says.  Runs where cuda.core is
installed (``make test-numba-driver``'s environment), in a child over the
stand-in.
"""

from __future__ import annotations

import pytest

from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

core = pytest.importorskip("cuda.core", reason="cuda.core is not installed")
if not hasattr(pytest.importorskip("cuda.core.graph"), "GraphDefinition"):
    pytest.skip("this cuda.core has no GraphDefinition (1.1 and later)", allow_module_level=True)


def test_cuda_core_runs_a_while_loop_graph_built_node_by_node(folder):  # noqa: F811
    ok(run(folder, """
        import ctypes
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions
        from cuda.core.graph import GraphDefinition
        from cuda.bindings import driver as drv

        dev = Device(); dev.set_current()
        code = '''
        extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(
            cudaGraphConditionalHandle handle, unsigned int value);
        extern "C" __global__ void step(int *counter, int *trips, cudaGraphConditionalHandle h) {
            *trips += 1;
            *counter -= 1;
            cudaGraphSetConditional(h, *counter > 0 ? 1 : 0);
        }
        extern "C" __global__ void init(int *counter, int n) { *counter = n; }
        '''
        arch = "".join(str(i) for i in dev.compute_capability)
        prog = Program(code, code_type="c++", options=ProgramOptions(std="c++17", arch=f"sm_{arch}"))
        mod = prog.compile("ptx")
        step, init = mod.get_kernel("step"), mod.get_kernel("init")

        g = GraphDefinition()
        cond = g.create_condition(default_value=1)
        mem = g.allocate(8)                        # counter, trips
        zero = mem.memset(mem.dptr, 0, 8)
        start = zero.launch(LaunchConfig(grid=1, block=1), init, mem.dptr, 5)
        loop = start.while_loop(cond)
        loop.body.launch(LaunchConfig(grid=1, block=1), step, mem.dptr,
                         int(mem.dptr) + 4, cond)
        host = (ctypes.c_int * 2)()
        graph = g.instantiate()
        s = dev.create_stream()
        graph.launch(s)
        s.sync()
        assert drv.cuMemcpyDtoH(host, mem.dptr, 8)[0] == 0
        assert list(host) == [0, 5], list(host)   # five trips, counter down to 0
        print("OK")
    """))
