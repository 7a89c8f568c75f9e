/* The stand-in CUDA driver: libcuda.so.1 over gpuarray's simulator.
 *
 * One concern: the C side of the driver entry points that gpuarray's cuda
 * backend (gpuarray/_driver/cuda/) reaches through cuda.bindings.  Each
 * entry point has cuda.h's signature; it takes the GIL, hands its arguments
 * (integers: pointers as addresses) to the Python serving function
 * gpuarray_sim.standin._serve.serve(name, args), and returns the CUresult
 * that function returns.  Outputs are written through the pointers by the
 * Python side (ctypes), so this file knows nothing of their layouts.  The
 * bridge to Python (call()) is in _libcuda_bridge.h, included below.
 *
 * Resolution: cuda.bindings dlsym()s only cuGetProcAddress_v2 and asks for
 * every function by base name and the CUDA version that introduced the form
 * it expects (("cuMemAlloc", 3020) is cuMemAlloc_v2).  The table below lists
 * each (name, version) served; a request gets the newest form not newer than
 * the version asked.  CUDA 13 changed signatures under the same name
 * (cuCtxSynchronize, cuCtxGetDevice at 13000): each form has its own wrapper.
 * With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the stream-ordered calls
 * resolve to their _ptsz forms (a NULL stream means the per-thread stream).
 * A name cuda.h declares that the table does not serve resolves to a
 * function answering CUDA_ERROR_NOT_SUPPORTED (the generated _cuda_h.c, the
 * library's second translation unit, lists every form of cuda.h 13.x); a
 * name cuda.h does not have is not resolved (CUDA_ERROR_NOT_FOUND).
 *
 * Exports: every wrapper here is defined under its ABI name (cuMemAlloc_v2,
 * cuMemcpyAsync_ptsz...) with default visibility, as the real library
 * exports them, for loaders that dlsym() them (CuPy, PyCUDA, ctypes users);
 * _cuda_h.c defines every other symbol of cuda.h as a weak alias of the
 * NOT_SUPPORTED function, which these strong definitions replace.
 *
 * No Python headers and no libpython link: the few C-API functions used (all
 * in the stable ABI) are looked up at run time in the running interpreter.
 * Outside a Python process every call returns CUDA_ERROR_NOT_INITIALIZED
 * (cuda.h: "the CUDA driver has not been initialized with cuInit() or ...
 * initialization has failed").
 * cuGetExportTable (called by NVRTC when it finds a libcuda) is answered
 * CUDA_ERROR_NOT_SUPPORTED without Python.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef unsigned long long cuuint64_t;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { char reserved[64]; } CUipcEventHandle;
/* cuda.h's CUmemLocation: a type and a 4-byte union (id; localized device and domain), passed by
 * value by cuMemAdvise_v2 and cuMemPrefetchAsync_v2 (the Python side reads both as ints) */
typedef int CUmemLocationType;
typedef struct { CUmemLocationType type; int id; } CUmemLocation;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_UNKNOWN 999
#define SERVE_INTERRUPTED (-2) /* _serve.INTERRUPTED: a signal handler raised while it was served */
#define PER_THREAD_FLAG 2ULL /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */

#define EXPORT __attribute__((visibility("default")))

#include "_libcuda_bridge.h" /* call(): serves each entry point in Python */

/* ------------------------------------------------------------- wrappers */
#define U(x) ((unsigned long long)(x))
#define P(x) ((unsigned long long)(uintptr_t)(x))

#define F0(fn) EXPORT CUresult fn(void) { return call(#fn, 0, NULL); }
#define F1(fn, T1, C1) EXPORT CUresult fn(T1 a1) \
    { unsigned long long a[] = {C1(a1)}; return call(#fn, 1, a); }
#define F2(fn, T1, C1, T2, C2) EXPORT CUresult fn(T1 a1, T2 a2) \
    { unsigned long long a[] = {C1(a1), C2(a2)}; return call(#fn, 2, a); }
#define F3(fn, T1, C1, T2, C2, T3, C3) EXPORT CUresult fn(T1 a1, T2 a2, T3 a3) \
    { unsigned long long a[] = {C1(a1), C2(a2), C3(a3)}; return call(#fn, 3, a); }
#define F4(fn, T1, C1, T2, C2, T3, C3, T4, C4) \
    EXPORT CUresult fn(T1 a1, T2 a2, T3 a3, T4 a4) \
    { unsigned long long a[] = {C1(a1), C2(a2), C3(a3), C4(a4)}; return call(#fn, 4, a); }

#define F5(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5) \
    EXPORT CUresult fn(T1 a1, T2 a2, T3 a3, T4 a4, T5 a5) \
    { unsigned long long a[] = {C1(a1), C2(a2), C3(a3), C4(a4), C5(a5)}; return call(#fn, 5, a); }
#define F6(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6) \
    EXPORT CUresult fn(T1 a1, T2 a2, T3 a3, T4 a4, T5 a5, T6 a6) \
    { unsigned long long a[] = {C1(a1), C2(a2), C3(a3), C4(a4), C5(a5), C6(a6)}; \
      return call(#fn, 6, a); }
#define F7(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6, T7, C7) \
    EXPORT CUresult fn(T1 a1, T2 a2, T3 a3, T4 a4, T5 a5, T6 a6, T7 a7) \
    { unsigned long long a[] = {C1(a1), C2(a2), C3(a3), C4(a4), C5(a5), C6(a6), C7(a7)}; \
      return call(#fn, 7, a); }
#define F8(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6, T7, C7, T8, C8) \
    EXPORT CUresult fn(T1 a1, T2 a2, T3 a3, T4 a4, T5 a5, T6 a6, T7 a7, T8 a8) \
    { unsigned long long a[] = {C1(a1), C2(a2), C3(a3), C4(a4), C5(a5), C6(a6), C7(a7), \
                                C8(a8)}; return call(#fn, 8, a); }

/* Stream-ordered calls: the plain form and the _ptsz form (per-thread default stream). */
#define S1(fn, T1, C1) F1(fn, T1, C1) F1(fn##_ptsz, T1, C1)
#define S2(fn, T1, C1, T2, C2) F2(fn, T1, C1, T2, C2) F2(fn##_ptsz, T1, C1, T2, C2)
#define S3(fn, T1, C1, T2, C2, T3, C3) F3(fn, T1, C1, T2, C2, T3, C3) \
    F3(fn##_ptsz, T1, C1, T2, C2, T3, C3)
#define S4(fn, T1, C1, T2, C2, T3, C3, T4, C4) F4(fn, T1, C1, T2, C2, T3, C3, T4, C4) \
    F4(fn##_ptsz, T1, C1, T2, C2, T3, C3, T4, C4)
#define S5(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5) \
    F5(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5) F5(fn##_ptsz, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5)
#define S6(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6) \
    F6(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6) \
    F6(fn##_ptsz, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6)
#define S8(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6, T7, C7, T8, C8) \
    F8(fn, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6, T7, C7, T8, C8) \
    F8(fn##_ptsz, T1, C1, T2, C2, T3, C3, T4, C4, T5, C5, T6, C6, T7, C7, T8, C8)

typedef void *H; /* any opaque handle or pointer */

F1(cuInit, unsigned int, U)
F1(cuDriverGetVersion, int *, P)
F2(cuDeviceGet, CUdevice *, P, int, U)
F1(cuDeviceGetCount, int *, P)
F3(cuDeviceGetName, char *, P, int, U, CUdevice, U)
F3(cuDeviceGetAttribute, int *, P, int, U, CUdevice, U)
F2(cuDeviceTotalMem_v2, size_t *, P, CUdevice, U)
F2(cuDeviceGetUuid, H, P, CUdevice, U)
F2(cuDeviceGetUuid_v2, H, P, CUdevice, U)
F3(cuDeviceCanAccessPeer, int *, P, CUdevice, U, CUdevice, U)
F2(cuDevicePrimaryCtxRetain, H *, P, CUdevice, U)
F1(cuDevicePrimaryCtxRelease_v2, CUdevice, U)
F1(cuDevicePrimaryCtxReset_v2, CUdevice, U)
F2(cuDeviceGetDefaultMemPool, H *, P, CUdevice, U)
F1(cuCtxSetCurrent, H, P)
F1(cuCtxGetCurrent, H *, P)
F1(cuCtxGetDevice, CUdevice *, P)
F2(cuCtxGetDevice_v2, CUdevice *, P, H, P)
F0(cuCtxSynchronize)
F1(cuCtxSynchronize_v2, H, P)
F2(cuCtxEnablePeerAccess, H, P, unsigned int, U)
F0(cuProfilerStart)
F0(cuProfilerStop)
F2(cuMemAlloc_v2, CUdeviceptr *, P, size_t, U)
F1(cuMemFree_v2, CUdeviceptr, U)
S3(cuMemAllocAsync, CUdeviceptr *, P, size_t, U, H, P)
S2(cuMemFreeAsync, CUdeviceptr, U, H, P)
F3(cuMemPoolSetAttribute, H, P, int, U, H, P)
F2(cuMemGetInfo_v2, size_t *, P, size_t *, P)
F3(cuMemHostAlloc, H *, P, size_t, U, unsigned int, U)
F1(cuMemFreeHost, H, P)
F3(cuMemHostRegister_v2, H, P, size_t, U, unsigned int, U)
F1(cuMemHostUnregister, H, P)
F3(cuMemHostGetDevicePointer_v2, CUdeviceptr *, P, H, P, unsigned int, U)
F4(cuPointerGetAttributes, unsigned int, U, int *, P, H *, P, CUdeviceptr, U)
F3(cuMemAllocManaged, CUdeviceptr *, P, size_t, U, unsigned int, U)
S4(cuMemcpyHtoDAsync_v2, CUdeviceptr, U, const void *, P, size_t, U, H, P)
S4(cuMemcpyDtoHAsync_v2, H, P, CUdeviceptr, U, size_t, U, H, P)
S4(cuMemcpyDtoDAsync_v2, CUdeviceptr, U, CUdeviceptr, U, size_t, U, H, P)
S2(cuMemcpy2DAsync_v2, const void *, P, H, P)
S4(cuMemsetD8Async, CUdeviceptr, U, unsigned char, U, size_t, U, H, P)
S4(cuMemsetD16Async, CUdeviceptr, U, unsigned short, U, size_t, U, H, P)
S4(cuMemsetD32Async, CUdeviceptr, U, unsigned int, U, size_t, U, H, P)
F3(cuStreamCreateWithPriority, H *, P, unsigned int, U, int, U)
F1(cuStreamDestroy_v2, H, P)
S1(cuStreamQuery, H, P)
S1(cuStreamSynchronize, H, P)
S3(cuStreamWaitEvent, H, P, H, P, unsigned int, U)
S2(cuStreamGetCtx, H, P, H *, P)
S3(cuStreamGetCtx_v2, H, P, H *, P, H *, P)
S4(cuStreamAddCallback, H, P, H, P, H, P, unsigned int, U)
S3(cuLaunchHostFunc, H, P, H, P, H, P)
F2(cuEventCreate, H *, P, unsigned int, U)
F1(cuEventDestroy_v2, H, P)
S2(cuEventRecord, H, P, H, P)
F1(cuEventQuery, H, P)
F1(cuEventSynchronize, H, P)
F3(cuEventElapsedTime, float *, P, H, P, H, P)
F3(cuEventElapsedTime_v2, float *, P, H, P, H, P)
F2(cuModuleLoadData, H *, P, const void *, P)
F1(cuModuleUnload, H, P)
F3(cuModuleGetFunction, H *, P, H, P, const char *, P)
F2(cuIpcGetMemHandle, CUipcMemHandle *, P, CUdeviceptr, U)
F1(cuIpcCloseMemHandle, CUdeviceptr, U)
F2(cuIpcGetEventHandle, CUipcEventHandle *, P, H, P)

/* Issue 29: the rest of the host API numba-cuda's and cuda.core's driver layers call. */
F3(cuDeviceGetPCIBusId, char *, P, int, U, CUdevice, U)
F3(cuDevicePrimaryCtxGetState, CUdevice, U, unsigned int *, P, int *, P)
F2(cuDevicePrimaryCtxSetFlags_v2, CUdevice, U, unsigned int, U)
F2(cuDeviceGetMemPool, H *, P, CUdevice, U)
F3(cuMemPoolGetAttribute, H, P, int, U, H, P)
F2(cuGetErrorName, CUresult, U, const char **, P)
F2(cuGetErrorString, CUresult, U, const char **, P)
F1(cuCtxPushCurrent_v2, H, P)
F1(cuCtxPopCurrent_v2, H *, P)
F3(cuCtxCreate_v2, H *, P, unsigned int, U, CUdevice, U)
F5(cuCtxCreate_v3, H *, P, H, P, int, U, unsigned int, U, CUdevice, U)
F4(cuCtxCreate_v4, H *, P, H, P, unsigned int, U, CUdevice, U)
F1(cuCtxDestroy_v2, H, P)
F1(cuCtxGetFlags, unsigned int *, P)
F2(cuCtxGetApiVersion, H, P, unsigned int *, P)
F2(cuCtxGetId, H, P, cuuint64_t *, P)
F2(cuCtxGetStreamPriorityRange, int *, P, int *, P)
F2(cuCtxGetLimit, size_t *, P, int, U)
F1(cuCtxGetCacheConfig, int *, P)
F1(cuCtxSetCacheConfig, int, U)
F2(cuMemAllocHost_v2, H *, P, size_t, U)
F2(cuMemHostGetFlags, unsigned int *, P, H, P)
F3(cuMemGetAddressRange_v2, CUdeviceptr *, P, size_t *, P, CUdeviceptr, U)
F3(cuPointerGetAttribute, H, P, int, U, CUdeviceptr, U)
F3(cuMemcpyHtoD_v2, CUdeviceptr, U, const void *, P, size_t, U)
F3(cuMemcpyDtoH_v2, H, P, CUdeviceptr, U, size_t, U)
F3(cuMemcpyDtoD_v2, CUdeviceptr, U, CUdeviceptr, U, size_t, U)
F3(cuMemcpy, CUdeviceptr, U, CUdeviceptr, U, size_t, U)
S4(cuMemcpyAsync, CUdeviceptr, U, CUdeviceptr, U, size_t, U, H, P)
F1(cuMemcpy2D_v2, const void *, P)
F1(cuMemcpy2DUnaligned_v2, const void *, P)
F3(cuMemsetD8_v2, CUdeviceptr, U, unsigned char, U, size_t, U)
F3(cuMemsetD16_v2, CUdeviceptr, U, unsigned short, U, size_t, U)
F3(cuMemsetD32_v2, CUdeviceptr, U, unsigned int, U, size_t, U)
F2(cuStreamCreate, H *, P, unsigned int, U)
S2(cuStreamGetPriority, H, P, int *, P)
S2(cuStreamGetFlags, H, P, unsigned int *, P)
S2(cuStreamGetId, H, P, cuuint64_t *, P)
S3(cuEventRecordWithFlags, H, P, H, P, unsigned int, U)
F5(cuModuleLoadDataEx, H *, P, const void *, P, unsigned int, U, H, P, H, P)
F4(cuModuleGetGlobal_v2, CUdeviceptr *, P, size_t *, P, H, P, const char *, P)
F8(cuLibraryLoadData, H *, P, const void *, P, H, P, H, P, unsigned int, U, H, P, H, P,
   unsigned int, U)
F1(cuLibraryUnload, H, P)
F8(cuLibraryLoadFromFile, H *, P, const char *, P, H, P, H, P, unsigned int, U, H, P, H, P,
   unsigned int, U)
F2(cuModuleLoad, H *, P, const char *, P)
F2(cuModuleLoadFatBinary, H *, P, const void *, P)
F2(cuLibraryGetModule, H *, P, H, P)
F3(cuLibraryGetKernel, H *, P, H, P, const char *, P)
F4(cuLibraryGetGlobal, CUdeviceptr *, P, size_t *, P, H, P, const char *, P)
F2(cuKernelGetFunction, H *, P, H, P)
F2(cuKernelGetName, const char **, P, H, P)
F2(cuFuncGetName, const char **, P, H, P)
F4(cuKernelGetParamInfo, H, P, size_t, U, size_t *, P, size_t *, P)
F4(cuFuncGetParamInfo, H, P, size_t, U, size_t *, P, size_t *, P)
F2(cuKernelGetParamCount, H, P, size_t *, P)
F2(cuFuncGetParamCount, H, P, size_t *, P)
F2(cuFuncGetModule, H *, P, H, P)
F4(cuLinkCreate_v2, unsigned int, U, H, P, H, P, H *, P)
F8(cuLinkAddData_v2, H, P, int, U, H, P, size_t, U, const char *, P, unsigned int, U, H, P,
   H, P)
F6(cuLinkAddFile_v2, H, P, int, U, const char *, P, unsigned int, U, H, P, H, P)
F3(cuLinkComplete, H, P, H *, P, size_t *, P)
F1(cuLinkDestroy, H, P)
F3(cuFuncGetAttribute, int *, P, int, U, H, P)
F4(cuKernelGetAttribute, int *, P, int, U, H, P, CUdevice, U)
F3(cuFuncSetAttribute, H, P, int, U, int, U)
F4(cuKernelSetAttribute, int, U, int, U, H, P, CUdevice, U)
F2(cuFuncSetCacheConfig, H, P, int, U)
F3(cuKernelSetCacheConfig, H, P, int, U, CUdevice, U)
F4(cuOccupancyMaxActiveBlocksPerMultiprocessor, int *, P, H, P, int, U, size_t, U)
F5(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, int *, P, H, P, int, U, size_t, U,
   unsigned int, U)
F6(cuOccupancyMaxPotentialBlockSize, int *, P, int *, P, H, P, H, P, size_t, U, int, U)
F7(cuOccupancyMaxPotentialBlockSizeWithFlags, int *, P, int *, P, H, P, H, P, size_t, U, int, U,
   unsigned int, U)
F4(cuOccupancyAvailableDynamicSMemPerBlock, size_t *, P, H, P, int, U, int, U)
S4(cuLaunchKernelEx, const void *, P, H, P, void **, P, void **, P)
S4(cuMemAllocFromPoolAsync, CUdeviceptr *, P, size_t, U, H, P, H, P)
/* Issue 38: pitched memory, 2-D memsets, peer copies, limits, peer access, pointer attributes. */
F5(cuMemAllocPitch_v2, CUdeviceptr *, P, size_t *, P, size_t, U, size_t, U, unsigned int, U)
F5(cuMemsetD2D8_v2, CUdeviceptr, U, size_t, U, unsigned char, U, size_t, U, size_t, U)
F5(cuMemsetD2D16_v2, CUdeviceptr, U, size_t, U, unsigned short, U, size_t, U, size_t, U)
F5(cuMemsetD2D32_v2, CUdeviceptr, U, size_t, U, unsigned int, U, size_t, U, size_t, U)
S6(cuMemsetD2D8Async, CUdeviceptr, U, size_t, U, unsigned char, U, size_t, U, size_t, U, H, P)
S6(cuMemsetD2D16Async, CUdeviceptr, U, size_t, U, unsigned short, U, size_t, U, size_t, U, H, P)
S6(cuMemsetD2D32Async, CUdeviceptr, U, size_t, U, unsigned int, U, size_t, U, size_t, U, H, P)
F5(cuMemcpyPeer, CUdeviceptr, U, H, P, CUdeviceptr, U, H, P, size_t, U)
S6(cuMemcpyPeerAsync, CUdeviceptr, U, H, P, CUdeviceptr, U, H, P, size_t, U, H, P)
F2(cuCtxSetLimit, int, U, size_t, U)
F1(cuCtxDisablePeerAccess, H, P)
F3(cuPointerSetAttribute, const void *, P, int, U, CUdeviceptr, U)
/* Stream capture and graphs (issue 28): served by _graph_calls.py. */
S2(cuStreamBeginCapture_v2, H, P, int, U)
S2(cuStreamEndCapture, H, P, H *, P)
S2(cuStreamIsCapturing, H, P, int *, P)
F1(cuThreadExchangeStreamCaptureMode, int *, P)
F3(cuGraphInstantiateWithFlags, H *, P, H, P, unsigned long long, U)
S3(cuGraphInstantiateWithParams, H *, P, H, P, H, P)
S2(cuGraphLaunch, H, P, H, P)
S2(cuGraphUpload, H, P, H, P)
F1(cuGraphExecDestroy, H, P)
F1(cuGraphDestroy, H, P)
F5(cuUserObjectCreate, H *, P, H, P, H, P, unsigned int, U, unsigned int, U)
F2(cuUserObjectRetain, H, P, unsigned int, U)
F2(cuUserObjectRelease, H, P, unsigned int, U)
F4(cuGraphRetainUserObject, H, P, H, P, unsigned int, U, unsigned int, U)
F3(cuGraphReleaseUserObject, H, P, H, P, unsigned int, U)
#define CAPTURE_INFO(fn, n, ...) \
    EXPORT CUresult fn(H s, int *st, cuuint64_t *id, H *g, H *deps, __VA_ARGS__) \
    { unsigned long long a[] = {P(s), P(st), P(id), P(g), P(deps), CAPTURE_INFO_TAIL_##n}; \
      return call(#fn, n, a); }
#define CAPTURE_INFO_TAIL_6 P(count)
#define CAPTURE_INFO_TAIL_7 P(edges), P(count)
CAPTURE_INFO(cuStreamGetCaptureInfo_v2, 6, size_t *count)
CAPTURE_INFO(cuStreamGetCaptureInfo_v2_ptsz, 6, size_t *count)
CAPTURE_INFO(cuStreamGetCaptureInfo_v3, 7, H *edges, size_t *count)
CAPTURE_INFO(cuStreamGetCaptureInfo_v3_ptsz, 7, H *edges, size_t *count)


/* Explicit graphs (issue 45): served by _graph_node_calls.py. */
F2(cuGraphCreate, H *, P, unsigned int, U)
F2(cuGraphClone, H *, P, H, P)
F3(cuGraphNodeFindInClone, H *, P, H, P, H, P)
F3(cuGraphGetNodes, H, P, H *, P, size_t *, P)
F3(cuGraphGetRootNodes, H, P, H *, P, size_t *, P)
F4(cuGraphGetEdges, H, P, H *, P, H *, P, size_t *, P)
F5(cuGraphGetEdges_v2, H, P, H *, P, H *, P, H, P, size_t *, P)
F3(cuGraphNodeGetDependencies, H, P, H *, P, size_t *, P)
F4(cuGraphNodeGetDependencies_v2, H, P, H *, P, H, P, size_t *, P)
F3(cuGraphNodeGetDependentNodes, H, P, H *, P, size_t *, P)
F4(cuGraphNodeGetDependentNodes_v2, H, P, H *, P, H, P, size_t *, P)
F4(cuGraphAddDependencies, H, P, const H *, P, const H *, P, size_t, U)
F5(cuGraphAddDependencies_v2, H, P, const H *, P, const H *, P, const void *, P, size_t, U)
F4(cuGraphRemoveDependencies, H, P, const H *, P, const H *, P, size_t, U)
F5(cuGraphRemoveDependencies_v2, H, P, const H *, P, const H *, P, const void *, P, size_t, U)
F1(cuGraphDestroyNode, H, P)
F2(cuGraphNodeGetType, H, P, int *, P)
/* GPU coredump settings: _coredump_calls.py. */
F3(cuCoredumpGetAttribute, int, U, void *, P, size_t *, P)
F3(cuCoredumpGetAttributeGlobal, int, U, void *, P, size_t *, P)
F3(cuCoredumpSetAttribute, int, U, void *, P, size_t *, P)
F3(cuCoredumpSetAttributeGlobal, int, U, void *, P, size_t *, P)
/* Device (SM) resources and their splits: _resource_calls.py. */
F3(cuDeviceGetDevResource, CUdevice, U, void *, P, int, U)
F3(cuCtxGetDevResource, H, P, void *, P, int, U)
S3(cuStreamGetDevResource, H, P, void *, P, int, U)
F6(cuDevSmResourceSplitByCount, void *, P, unsigned int *, P, const void *, P, void *, P,
   unsigned int, U, unsigned int, U)
F6(cuDevSmResourceSplit, void *, P, unsigned int, U, const void *, P, void *, P, unsigned int, U,
   void *, P)
/* Graph and node ids (CUDA 13.1): _graph_id_calls.py. */
F2(cuGraphGetId, H, P, unsigned int *, P)
F2(cuGraphExecGetId, H, P, unsigned int *, P)
F2(cuGraphNodeGetLocalId, H, P, unsigned int *, P)
F2(cuGraphNodeGetToolsId, H, P, unsigned long long *, P)
F2(cuGraphNodeGetContainingGraph, H, P, H *, P)
F3(cuGraphDebugDotPrint, H, P, const char *, P, unsigned int, U)
F5(cuGraphAddKernelNode, H *, P, H, P, const H *, P, size_t, U, const void *, P)
F5(cuGraphAddKernelNode_v2, H *, P, H, P, const H *, P, size_t, U, const void *, P)
F6(cuGraphAddMemsetNode, H *, P, H, P, const H *, P, size_t, U, const void *, P, H, P)
F6(cuGraphAddMemcpyNode, H *, P, H, P, const H *, P, size_t, U, const void *, P, H, P)
F5(cuGraphAddHostNode, H *, P, H, P, const H *, P, size_t, U, const void *, P)
F4(cuGraphAddEmptyNode, H *, P, H, P, const H *, P, size_t, U)
F5(cuGraphAddChildGraphNode, H *, P, H, P, const H *, P, size_t, U, H, P)
F5(cuGraphAddEventRecordNode, H *, P, H, P, const H *, P, size_t, U, H, P)
F5(cuGraphAddEventWaitNode, H *, P, H, P, const H *, P, size_t, U, H, P)
F5(cuGraphAddMemAllocNode, H *, P, H, P, const H *, P, size_t, U, void *, P)
F5(cuGraphAddMemFreeNode, H *, P, H, P, const H *, P, size_t, U, CUdeviceptr, U)
F5(cuGraphConditionalHandleCreate, cuuint64_t *, P, H, P, H, P, unsigned int, U, unsigned int, U)
F5(cuGraphAddNode, H *, P, H, P, const H *, P, size_t, U, void *, P)
F6(cuGraphAddNode_v2, H *, P, H, P, const H *, P, const void *, P, size_t, U, void *, P)
F2(cuGraphKernelNodeGetParams, H, P, void *, P)
F2(cuGraphKernelNodeGetParams_v2, H, P, void *, P)
F2(cuGraphKernelNodeSetParams, H, P, const void *, P)
F2(cuGraphKernelNodeSetParams_v2, H, P, const void *, P)
F2(cuGraphMemsetNodeGetParams, H, P, void *, P)
F2(cuGraphMemsetNodeSetParams, H, P, const void *, P)
F2(cuGraphMemcpyNodeGetParams, H, P, void *, P)
F2(cuGraphMemcpyNodeSetParams, H, P, const void *, P)
F2(cuGraphHostNodeGetParams, H, P, void *, P)
F2(cuGraphHostNodeSetParams, H, P, const void *, P)
F2(cuGraphMemAllocNodeGetParams, H, P, void *, P)
F2(cuGraphMemFreeNodeGetParams, H, P, CUdeviceptr *, P)
F2(cuGraphChildGraphNodeGetGraph, H, P, H *, P)
F2(cuGraphEventRecordNodeGetEvent, H, P, H *, P)
F2(cuGraphEventWaitNodeGetEvent, H, P, H *, P)
F2(cuGraphEventRecordNodeSetEvent, H, P, H, P)
F2(cuGraphEventWaitNodeSetEvent, H, P, H, P)
F2(cuGraphNodeGetParams, H, P, void *, P)
F2(cuGraphNodeSetParams, H, P, void *, P)
F3(cuGraphExecNodeSetParams, H, P, H, P, void *, P)
F3(cuGraphExecKernelNodeSetParams_v2, H, P, H, P, const void *, P)
F4(cuGraphExecMemsetNodeSetParams, H, P, H, P, const void *, P, H, P)
F4(cuGraphExecMemcpyNodeSetParams, H, P, H, P, const void *, P, H, P)
F3(cuGraphExecEventRecordNodeSetEvent, H, P, H, P, H, P)
F3(cuGraphExecEventWaitNodeSetEvent, H, P, H, P, H, P)
F3(cuGraphExecUpdate_v2, H, P, H, P, void *, P)
S6(cuStreamBeginCaptureToGraph, H, P, H, P, const H *, P, const void *, P, size_t, U, int, U)
S4(cuStreamUpdateCaptureDependencies, H, P, H *, P, size_t, U, unsigned int, U)
F5(cuStreamUpdateCaptureDependencies_v2, H, P, H *, P, const void *, P, size_t, U, unsigned int, U)
F5(cuStreamUpdateCaptureDependencies_v2_ptsz, H, P, H *, P, const void *, P, size_t, U, unsigned int, U)
F3(cuDeviceGetGraphMemAttribute, CUdevice, U, int, U, void *, P)
F3(cuDeviceSetGraphMemAttribute, CUdevice, U, int, U, void *, P)
F1(cuDeviceGraphMemTrim, CUdevice, U)

/* Memory pools and managed memory (issue 45): _pool_calls.py, _managed_calls.py. */
F2(cuDeviceSetMemPool, CUdevice, U, H, P)
F3(cuMemGetDefaultMemPool, H *, P, CUmemLocation *, P, int, U)
F3(cuMemGetMemPool, H *, P, CUmemLocation *, P, int, U)
F3(cuMemSetMemPool, CUmemLocation *, P, int, U, H, P)
F2(cuMemPoolCreate, H *, P, const void *, P)
F1(cuMemPoolDestroy, H, P)
F2(cuMemPoolTrimTo, H, P, size_t, U)
F3(cuMemPoolSetAccess, H, P, const void *, P, size_t, U)
F3(cuMemPoolGetAccess, int *, P, H, P, CUmemLocation *, P)
F4(cuMemPoolExportToShareableHandle, void *, P, H, P, int, U, unsigned long long, U)
F4(cuMemPoolImportFromShareableHandle, H *, P, void *, P, int, U, unsigned long long, U)
F2(cuMemPoolExportPointer, void *, P, CUdeviceptr, U)
F3(cuMemPoolImportPointer, CUdeviceptr *, P, H, P, void *, P)
F5(cuMemRangeGetAttribute, void *, P, size_t, U, int, U, CUdeviceptr, U, size_t, U)
F6(cuMemRangeGetAttributes, void **, P, size_t *, P, int *, P, size_t, U, CUdeviceptr, U,
   size_t, U)
F4(cuMemAdvise, CUdeviceptr, U, size_t, U, int, U, CUdevice, U)
S4(cuMemPrefetchAsync, CUdeviceptr, U, size_t, U, CUdevice, U, H, P)
S8(cuMemPrefetchBatchAsync, CUdeviceptr *, P, size_t *, P, size_t, U, CUmemLocation *, P,
   size_t *, P, size_t, U, unsigned long long, U, H, P)
S8(cuMemDiscardAndPrefetchBatchAsync, CUdeviceptr *, P, size_t *, P, size_t, U,
   CUmemLocation *, P, size_t *, P, size_t, U, unsigned long long, U, H, P)
S5(cuMemDiscardBatchAsync, CUdeviceptr *, P, size_t *, P, size_t, U, unsigned long long, U, H, P)
/* The location is passed by value: its address is this frame's copy, read during the call. */
EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc)
{
    unsigned long long a[] = {U(p), U(n), U(advice), P(&loc)};
    return call("cuMemAdvise_v2", 4, a);
}
#define PREFETCH_V2(fn) \
    EXPORT CUresult fn(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, H s) \
    { unsigned long long a[] = {U(p), U(n), P(&loc), U(flags), P(s)}; return call(#fn, 5, a); }
PREFETCH_V2(cuMemPrefetchAsync_v2)
PREFETCH_V2(cuMemPrefetchAsync_v2_ptsz)

/* The handle is passed by value (64 bytes): its address is this frame's copy,
 * read by the serving function during the call. */
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    unsigned long long a[] = {P(pdptr), P(&handle), U(flags)};
    return call("cuIpcOpenMemHandle_v2", 3, a);
}

/* As cuIpcOpenMemHandle_v2: the 64-byte handle by value, read from this frame's copy. */
EXPORT CUresult cuIpcOpenEventHandle(H *phEvent, CUipcEventHandle handle)
{
    unsigned long long a[] = {P(phEvent), P(&handle)};
    return call("cuIpcOpenEventHandle", 2, a);
}

#define LAUNCH(fn) \
    EXPORT CUresult fn(H f, unsigned int gx, unsigned int gy, unsigned int gz, \
                           unsigned int bx, unsigned int by, unsigned int bz, \
                           unsigned int shared, H stream, void **params, void **extra) \
    { \
        unsigned long long a[] = {P(f), U(gx), U(gy), U(gz), U(bx), U(by), U(bz), \
                                  U(shared), P(stream), P(params), P(extra)}; \
        return call(#fn, 11, a); \
    }
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)

/* Every block resident at once (grid.sync), or COOPERATIVE_LAUNCH_TOO_LARGE. */
#define LAUNCH_COOPERATIVE(fn) \
    EXPORT CUresult fn(H f, unsigned int gx, unsigned int gy, unsigned int gz, \
                           unsigned int bx, unsigned int by, unsigned int bz, \
                           unsigned int shared, H stream, void **params) \
    { \
        unsigned long long a[] = {P(f), U(gx), U(gy), U(gz), U(bx), U(by), U(bz), \
                                  U(shared), P(stream), P(params)}; \
        return call(#fn, 10, a); \
    }
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

EXPORT CUresult cuGetExportTable(const void **table, const void *id)
{
    (void)id;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);

/* _cuda_h.c (generated from cuda.h): the forms of every entry point, and the
 * function that answers those not modelled. */
typedef struct { const char *name; int version; } GaForm;
extern const GaForm ga_cuda_h_forms[];
extern const size_t ga_cuda_h_nforms;
int ga_not_supported(void);
EXPORT CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);

/* ---------------------------------------------------------------- table */
typedef struct {
    const char *name;  /* base name the bindings ask for */
    int version;       /* CUDA version that introduced this form */
    void *fn;          /* the wrapper */
    void *ptsz;        /* its per-thread-default-stream form, or NULL */
} Entry;

#define E(name, ver, w) {name, ver, (void *)w, NULL}
#define ES(name, ver, w) {name, ver, (void *)w, (void *)w##_ptsz}

static const Entry table[] = {
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    {"cuGetExportTable", 3000, (void *)cuGetExportTable, NULL},
    {"cuGetProcAddress", 11030, (void *)cuGetProcAddress, NULL},
    {"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2, NULL},
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    E("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    E("cuProfilerStart", 4000, cuProfilerStart),
    E("cuProfilerStop", 4000, cuProfilerStop),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    ES("cuMemAllocAsync", 11020, cuMemAllocAsync),
    ES("cuMemFreeAsync", 11020, cuMemFreeAsync),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    E("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    ES("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    ES("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
    ES("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
    ES("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2),
    ES("cuMemsetD8Async", 3020, cuMemsetD8Async),
    ES("cuMemsetD16Async", 3020, cuMemsetD16Async),
    ES("cuMemsetD32Async", 3020, cuMemsetD32Async),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    ES("cuStreamQuery", 2000, cuStreamQuery),
    ES("cuStreamSynchronize", 2000, cuStreamSynchronize),
    ES("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    ES("cuStreamGetCtx", 9020, cuStreamGetCtx),
    ES("cuStreamGetCtx", 12050, cuStreamGetCtx_v2),
    ES("cuStreamAddCallback", 5000, cuStreamAddCallback),
    ES("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
    E("cuEventCreate", 2000, cuEventCreate),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    ES("cuEventRecord", 2000, cuEventRecord),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventElapsedTime", 2000, cuEventElapsedTime),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    E("cuModuleLoadData", 2000, cuModuleLoadData),
    E("cuModuleUnload", 2000, cuModuleUnload),
    E("cuModuleGetFunction", 2000, cuModuleGetFunction),
    ES("cuLaunchKernel", 4000, cuLaunchKernel),
    ES("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    E("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    E("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    E("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    E("cuIpcGetEventHandle", 4010, cuIpcGetEventHandle),
    E("cuIpcOpenEventHandle", 4010, cuIpcOpenEventHandle),
    /* Issue 29 */
    E("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxCreate", 11040, cuCtxCreate_v3),
    E("cuCtxCreate", 12050, cuCtxCreate_v4),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxGetFlags", 7000, cuCtxGetFlags),
    E("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    E("cuCtxGetId", 12000, cuCtxGetId),
    E("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    E("cuCtxGetLimit", 3010, cuCtxGetLimit),
    E("cuCtxGetCacheConfig", 3020, cuCtxGetCacheConfig),
    E("cuCtxSetCacheConfig", 3020, cuCtxSetCacheConfig),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    E("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    E("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    E("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    E("cuMemcpy", 4000, cuMemcpy),
    ES("cuMemcpyAsync", 4000, cuMemcpyAsync),
    E("cuMemcpy2D", 3020, cuMemcpy2D_v2),
    E("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2),
    E("cuMemsetD8", 3020, cuMemsetD8_v2),
    E("cuMemsetD16", 3020, cuMemsetD16_v2),
    E("cuMemsetD32", 3020, cuMemsetD32_v2),
    E("cuStreamCreate", 2000, cuStreamCreate),
    ES("cuStreamGetPriority", 5050, cuStreamGetPriority),
    ES("cuStreamGetFlags", 5050, cuStreamGetFlags),
    ES("cuStreamGetId", 12000, cuStreamGetId),
    ES("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
    E("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    E("cuModuleGetGlobal", 3020, cuModuleGetGlobal_v2),
    E("cuLibraryLoadData", 12000, cuLibraryLoadData),
    E("cuLibraryLoadFromFile", 12000, cuLibraryLoadFromFile),
    E("cuModuleLoad", 2000, cuModuleLoad),
    E("cuModuleLoadFatBinary", 2000, cuModuleLoadFatBinary),
    E("cuLibraryUnload", 12000, cuLibraryUnload),
    E("cuLibraryGetModule", 12000, cuLibraryGetModule),
    E("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    E("cuLibraryGetGlobal", 12000, cuLibraryGetGlobal),
    E("cuKernelGetFunction", 12000, cuKernelGetFunction),
    E("cuKernelGetName", 12030, cuKernelGetName),
    E("cuFuncGetName", 12030, cuFuncGetName),
    E("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    E("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    E("cuKernelGetParamCount", 13000, cuKernelGetParamCount),
    E("cuFuncGetParamCount", 13000, cuFuncGetParamCount),
    E("cuFuncGetModule", 11000, cuFuncGetModule),
    E("cuLinkCreate", 6050, cuLinkCreate_v2),
    E("cuLinkAddData", 6050, cuLinkAddData_v2),
    E("cuLinkAddFile", 6050, cuLinkAddFile_v2),
    E("cuLinkComplete", 5050, cuLinkComplete),
    E("cuLinkDestroy", 5050, cuLinkDestroy),
    E("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    E("cuKernelGetAttribute", 12000, cuKernelGetAttribute),
    E("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    E("cuKernelSetAttribute", 12000, cuKernelSetAttribute),
    E("cuFuncSetCacheConfig", 3000, cuFuncSetCacheConfig),
    E("cuKernelSetCacheConfig", 12000, cuKernelSetCacheConfig),
    E("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050,
      cuOccupancyMaxActiveBlocksPerMultiprocessor),
    E("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
      cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    E("cuOccupancyMaxPotentialBlockSize", 6050, cuOccupancyMaxPotentialBlockSize),
    E("cuOccupancyMaxPotentialBlockSizeWithFlags", 7000, cuOccupancyMaxPotentialBlockSizeWithFlags),
    E("cuOccupancyAvailableDynamicSMemPerBlock", 10020, cuOccupancyAvailableDynamicSMemPerBlock),
    ES("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    ES("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    /* Issue 38 */
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemsetD2D8", 3020, cuMemsetD2D8_v2),
    E("cuMemsetD2D16", 3020, cuMemsetD2D16_v2),
    E("cuMemsetD2D32", 3020, cuMemsetD2D32_v2),
    ES("cuMemsetD2D8Async", 3020, cuMemsetD2D8Async),
    ES("cuMemsetD2D16Async", 3020, cuMemsetD2D16Async),
    ES("cuMemsetD2D32Async", 3020, cuMemsetD2D32Async),
    E("cuMemcpyPeer", 4000, cuMemcpyPeer),
    ES("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync),
    E("cuCtxSetLimit", 3010, cuCtxSetLimit),
    E("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    E("cuPointerSetAttribute", 6000, cuPointerSetAttribute),
    /* Stream capture and graphs (issue 28). */
    ES("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    ES("cuStreamEndCapture", 10000, cuStreamEndCapture),
    ES("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    ES("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2),
    ES("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3),
    E("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    ES("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams),
    ES("cuGraphLaunch", 10000, cuGraphLaunch),
    ES("cuGraphUpload", 11010, cuGraphUpload),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    E("cuUserObjectCreate", 11030, cuUserObjectCreate),
    E("cuUserObjectRetain", 11030, cuUserObjectRetain),
    E("cuUserObjectRelease", 11030, cuUserObjectRelease),
    E("cuGraphRetainUserObject", 11030, cuGraphRetainUserObject),
    E("cuGraphReleaseUserObject", 11030, cuGraphReleaseUserObject),
    /* Explicit graphs (issue 45). */
    E("cuGraphCreate", 10000, cuGraphCreate),
    E("cuGraphClone", 10000, cuGraphClone),
    E("cuGraphNodeFindInClone", 10000, cuGraphNodeFindInClone),
    E("cuGraphGetNodes", 10000, cuGraphGetNodes),
    E("cuGraphGetRootNodes", 10000, cuGraphGetRootNodes),
    E("cuGraphGetEdges", 10000, cuGraphGetEdges),
    E("cuGraphGetEdges", 12030, cuGraphGetEdges_v2),
    E("cuGraphNodeGetDependencies", 10000, cuGraphNodeGetDependencies),
    E("cuGraphNodeGetDependencies", 12030, cuGraphNodeGetDependencies_v2),
    E("cuGraphNodeGetDependentNodes", 10000, cuGraphNodeGetDependentNodes),
    E("cuGraphNodeGetDependentNodes", 12030, cuGraphNodeGetDependentNodes_v2),
    E("cuGraphAddDependencies", 10000, cuGraphAddDependencies),
    E("cuGraphAddDependencies", 12030, cuGraphAddDependencies_v2),
    E("cuGraphRemoveDependencies", 10000, cuGraphRemoveDependencies),
    E("cuGraphRemoveDependencies", 12030, cuGraphRemoveDependencies_v2),
    E("cuGraphDestroyNode", 10000, cuGraphDestroyNode),
    E("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    E("cuCoredumpGetAttribute", 12010, cuCoredumpGetAttribute),
    E("cuCoredumpGetAttributeGlobal", 12010, cuCoredumpGetAttributeGlobal),
    E("cuCoredumpSetAttribute", 12010, cuCoredumpSetAttribute),
    E("cuCoredumpSetAttributeGlobal", 12010, cuCoredumpSetAttributeGlobal),
    E("cuDeviceGetDevResource", 12040, cuDeviceGetDevResource),
    E("cuCtxGetDevResource", 12040, cuCtxGetDevResource),
    ES("cuStreamGetDevResource", 13010, cuStreamGetDevResource),
    E("cuDevSmResourceSplitByCount", 12040, cuDevSmResourceSplitByCount),
    E("cuDevSmResourceSplit", 13010, cuDevSmResourceSplit),
    E("cuGraphGetId", 13010, cuGraphGetId),
    E("cuGraphExecGetId", 13010, cuGraphExecGetId),
    E("cuGraphNodeGetLocalId", 13010, cuGraphNodeGetLocalId),
    E("cuGraphNodeGetToolsId", 13010, cuGraphNodeGetToolsId),
    E("cuGraphNodeGetContainingGraph", 13010, cuGraphNodeGetContainingGraph),
    E("cuGraphDebugDotPrint", 11030, cuGraphDebugDotPrint),
    E("cuGraphAddKernelNode", 10000, cuGraphAddKernelNode),
    E("cuGraphAddKernelNode", 12000, cuGraphAddKernelNode_v2),
    E("cuGraphAddMemsetNode", 10000, cuGraphAddMemsetNode),
    E("cuGraphAddMemcpyNode", 10000, cuGraphAddMemcpyNode),
    E("cuGraphAddHostNode", 10000, cuGraphAddHostNode),
    E("cuGraphAddEmptyNode", 10000, cuGraphAddEmptyNode),
    E("cuGraphAddChildGraphNode", 10000, cuGraphAddChildGraphNode),
    E("cuGraphAddEventRecordNode", 11010, cuGraphAddEventRecordNode),
    E("cuGraphAddEventWaitNode", 11010, cuGraphAddEventWaitNode),
    E("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode),
    E("cuGraphAddMemFreeNode", 11040, cuGraphAddMemFreeNode),
    E("cuGraphConditionalHandleCreate", 12030, cuGraphConditionalHandleCreate),
    E("cuGraphAddNode", 12020, cuGraphAddNode),
    E("cuGraphAddNode", 12030, cuGraphAddNode_v2),
    E("cuGraphKernelNodeGetParams", 10000, cuGraphKernelNodeGetParams),
    E("cuGraphKernelNodeGetParams", 12000, cuGraphKernelNodeGetParams_v2),
    E("cuGraphKernelNodeSetParams", 10000, cuGraphKernelNodeSetParams),
    E("cuGraphKernelNodeSetParams", 12000, cuGraphKernelNodeSetParams_v2),
    E("cuGraphMemsetNodeGetParams", 10000, cuGraphMemsetNodeGetParams),
    E("cuGraphMemsetNodeSetParams", 10000, cuGraphMemsetNodeSetParams),
    E("cuGraphMemcpyNodeGetParams", 10000, cuGraphMemcpyNodeGetParams),
    E("cuGraphMemcpyNodeSetParams", 10000, cuGraphMemcpyNodeSetParams),
    E("cuGraphHostNodeGetParams", 10000, cuGraphHostNodeGetParams),
    E("cuGraphHostNodeSetParams", 10000, cuGraphHostNodeSetParams),
    E("cuGraphMemAllocNodeGetParams", 11040, cuGraphMemAllocNodeGetParams),
    E("cuGraphMemFreeNodeGetParams", 11040, cuGraphMemFreeNodeGetParams),
    E("cuGraphChildGraphNodeGetGraph", 10000, cuGraphChildGraphNodeGetGraph),
    E("cuGraphEventRecordNodeGetEvent", 11010, cuGraphEventRecordNodeGetEvent),
    E("cuGraphEventWaitNodeGetEvent", 11010, cuGraphEventWaitNodeGetEvent),
    E("cuGraphEventRecordNodeSetEvent", 11010, cuGraphEventRecordNodeSetEvent),
    E("cuGraphEventWaitNodeSetEvent", 11010, cuGraphEventWaitNodeSetEvent),
    E("cuGraphNodeGetParams", 13020, cuGraphNodeGetParams),
    E("cuGraphNodeSetParams", 12020, cuGraphNodeSetParams),
    E("cuGraphExecNodeSetParams", 12020, cuGraphExecNodeSetParams),
    E("cuGraphExecKernelNodeSetParams", 12000, cuGraphExecKernelNodeSetParams_v2),
    E("cuGraphExecMemsetNodeSetParams", 10020, cuGraphExecMemsetNodeSetParams),
    E("cuGraphExecMemcpyNodeSetParams", 10020, cuGraphExecMemcpyNodeSetParams),
    E("cuGraphExecEventRecordNodeSetEvent", 11010, cuGraphExecEventRecordNodeSetEvent),
    E("cuGraphExecEventWaitNodeSetEvent", 11010, cuGraphExecEventWaitNodeSetEvent),
    E("cuGraphExecUpdate", 12000, cuGraphExecUpdate_v2),
    ES("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph),
    ES("cuStreamUpdateCaptureDependencies", 11030, cuStreamUpdateCaptureDependencies),
    ES("cuStreamUpdateCaptureDependencies", 12030, cuStreamUpdateCaptureDependencies_v2),
    E("cuDeviceGetGraphMemAttribute", 11040, cuDeviceGetGraphMemAttribute),
    E("cuDeviceSetGraphMemAttribute", 11040, cuDeviceSetGraphMemAttribute),
    E("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim),
    /* Memory pools and managed memory (issue 45). */
    E("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    E("cuMemGetDefaultMemPool", 13000, cuMemGetDefaultMemPool),
    E("cuMemGetMemPool", 13000, cuMemGetMemPool),
    E("cuMemSetMemPool", 13000, cuMemSetMemPool),
    E("cuMemPoolCreate", 11020, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    E("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    E("cuMemPoolGetAccess", 11020, cuMemPoolGetAccess),
    E("cuMemPoolExportToShareableHandle", 11020, cuMemPoolExportToShareableHandle),
    E("cuMemPoolImportFromShareableHandle", 11020, cuMemPoolImportFromShareableHandle),
    E("cuMemPoolExportPointer", 11020, cuMemPoolExportPointer),
    E("cuMemPoolImportPointer", 11020, cuMemPoolImportPointer),
    E("cuMemRangeGetAttribute", 8000, cuMemRangeGetAttribute),
    E("cuMemRangeGetAttributes", 8000, cuMemRangeGetAttributes),
    E("cuMemAdvise", 8000, cuMemAdvise),
    E("cuMemAdvise", 12020, cuMemAdvise_v2),
    ES("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync),
    ES("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2),
    ES("cuMemPrefetchBatchAsync", 13000, cuMemPrefetchBatchAsync),
    ES("cuMemDiscardAndPrefetchBatchAsync", 13000, cuMemDiscardAndPrefetchBatchAsync),
    ES("cuMemDiscardBatchAsync", 13000, cuMemDiscardBatchAsync),
};

static int tracing = -1; /* GPUARRAY_STANDIN_TRACE=1: log every request to stderr */

static void *lookup(const char *symbol, int version, cuuint64_t flags)
{
    const Entry *best = NULL;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const Entry *e = &table[i];
        if (e->version <= version && strcmp(e->name, symbol) == 0
            && (best == NULL || e->version > best->version))
            best = e;
    }
    void *fn = NULL;
    const char *what = "not found";
    if (best != NULL) {
        fn = ((flags & PER_THREAD_FLAG) && best->ptsz) ? best->ptsz : best->fn;
        what = "served";
    } else {
        /* A form cuda.h has that the simulator does not model: it is there, and
         * every call answers CUDA_ERROR_NOT_SUPPORTED (_cuda_h.c). */
        for (size_t i = 0; i < ga_cuda_h_nforms; i++) {
            if (ga_cuda_h_forms[i].version <= version
                && strcmp(ga_cuda_h_forms[i].name, symbol) == 0) {
                fn = (void *)ga_not_supported;
                what = "not modelled: CUDA_ERROR_NOT_SUPPORTED";
                break;
            }
        }
    }
    if (tracing < 0) {
        const char *t = getenv("GPUARRAY_STANDIN_TRACE");
        tracing = t != NULL && t[0] != '\0' && strcmp(t, "0") != 0 && strcmp(t, "errors") != 0;
    }
    if (tracing)
        fprintf(stderr, "gpuarray stand-in: cuGetProcAddress(%s, %d, flags=%llu) -> %s\n",
                symbol, version, flags, what);
    return fn;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    cuuint64_t flags, int *status)
{
    if (symbol == NULL || pfn == NULL)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    *pfn = lookup(symbol, version, flags);
    if (status)
        *status = *pfn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

EXPORT CUresult cuGetProcAddress_v2_ptsz(const char *symbol, void **pfn, int version,
                                         cuuint64_t flags, int *status)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, status);
}

