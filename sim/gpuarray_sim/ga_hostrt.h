// The fiber runtime's launch record: what _hostrt.cpp runs a launch with.
//
// The generic half of the host build: the runtime (_hostrt.cpp) that runs a
// block's threads as cooperative fibers over granted extents of simulated
// device memory, and the two kinds of code it runs -- gpuarray's kernels/
// built for the host (kernels/ga_host.cuh maps CUDA's built-ins onto this
// record) and kernels translated from PTX (ptx/ptxrt.h) -- share this
// header and nothing of each other.
#pragma once

struct ga_uint3 { unsigned int x, y, z; };

// One extent of device memory the launch may touch.
struct ga_host_grant {
    unsigned long long base;  // simulated device address
    unsigned long long size;  // bytes
    char* host;               // where those bytes are on the host
    int writable;
};

// The launch record: filled by the runtime, read by the kernels' built-ins
// (kernels/ga_host.cuh) and the PTX executor's runtime (ptx/ptxrt.h).  Its
// layout changes with GA_HOST_ABI (_hostrt.py checks it).
#define GA_HOST_ABI 4
struct ga_host_rt {
    ga_uint3 thread_idx, block_idx, block_dim, grid_dim;
    const ga_host_grant* grants;
    int ngrants;
    void (*sync)(ga_host_rt*);
    // Records a fault and ends the launch (never returns to the kernel).
    void (*fault)(ga_host_rt*, int code, unsigned long long addr, unsigned long long size,
                  int write);
    // The same for a __shared__ array: byte offset `off` of an array of
    // `extent` bytes.
    void (*shared_fault)(ga_host_rt*, int code, long long off, unsigned long long size,
                         int write, unsigned long long extent);
    alignas(16) char scratch[64];
    // For kernels translated from PTX (sim/gpuarray_sim/ptx/): the PTX
    // line a fault or a wait names; `progress`, bumped whenever a thread
    // passes a barrier or warp collective; yield() waits for other threads
    // (the runtime resumes the caller in the next round; a round in which
    // every waiting thread yields again and nothing progressed is a
    // deadlock: the launch ends with CUDA_ERROR_LAUNCH_FAILED naming the
    // line and thread).
    unsigned int line;
    unsigned int nthreads;  // threads per block
    unsigned long long progress;
    void (*yield)(ga_host_rt*);
    // The residency slot of this block (0 .. slots-1 of the launch): blocks
    // resident at the same time have different slots, so per-block state
    // (the PTX executor's shared window and barrier record) is indexed by it.
    // Each resident block has a record of its own.
    unsigned int slot;
};

// Host builds use -fvisibility=hidden (each library's template instances and
// __shared__ statics stay its own): only the entries are exported.
#define GA_HOST_EXPORT extern "C" __attribute__((visibility("default")))
