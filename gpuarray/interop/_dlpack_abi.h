/* dlpack.h 1.3's structs and function table, as the specification lays them
 * out, and what the C units of gpuarray.interop._dlpack_core share
 * (_dlpack_module.c: the module; _dlpack_core.c: exports; _dlpack_consume.c:
 * imports, from a capsule or another producer's exchange table;
 * _dlpack_exchange.c: our exchange table; _cai_fields.c).  Calls between
 * units run one way: the module calls each unit's *_add, the exchange table
 * uses the exports' helpers; nothing calls back.
 * Written for the Limited API of Python 3.10 (abi3). */
#ifndef GPUARRAY_DLPACK_ABI_H
#define GPUARRAY_DLPACK_ABI_H

#include <stdint.h>

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* --- the C exchange table (dlpack.h 1.3, "__dlpack_c_exchange_api__") ---
 * DLDeviceType is a C enum: an int32_t on every ABI the project builds for. */
typedef int (*DLPackManagedTensorAllocator)(
    DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
    void (*SetError)(void *error_ctx, const char *kind, const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object,
                                                     DLManagedTensorVersioned **out);
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(int32_t device_type, int32_t device_id,
                                       void **out_current_stream);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor,
                                                   void **out_py_object);
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct DLPackExchangeAPI {
    DLPackExchangeAPIHeader header;
    DLPackManagedTensorAllocator managed_tensor_allocator;
    DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
    DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
    DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
    DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#define GA_DLPACK_MINOR 3 /* the table's version: 1.3 */
#define GA_FLAG_READ_ONLY 1ULL
#define GA_MAX_NDIM 64
#define GA_NAME_LEGACY "dltensor"
#define GA_NAME_VERSIONED "dltensor_versioned"
#define GA_NAME_API "dlpack_exchange_api"

/* An export's layout, checked (_dlpack_core.c, parse_layout): strides in
 * elements, data NULL for size 0. */
typedef struct {
    unsigned long long data;
    Py_ssize_t ndim;
    long long shape[GA_MAX_NDIM];
    long long strides[GA_MAX_NDIM];
    long long itemsize;
    DLDataType dtype;
    DLDevice device;
} GaLayout;

/* _dlpack_core.c (exports): the helpers the exchange table shares */
int ga_parse_layout(PyObject *const *args, GaLayout *out);
void ga_deleter_versioned(DLManagedTensorVersioned *self);
void ga_count_export(void);
void ga_capsule_destructor(PyObject *capsule);
/* Each unit's functions, registered by _dlpack_module.c */
int ga_export_add(PyObject *module);
int ga_consume_add(PyObject *module);
int ga_exchange_add(PyObject *module);
int ga_cai_add(PyObject *module);

#endif
