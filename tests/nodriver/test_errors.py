"""gpuarray.errors: structured, picklable exceptions with useful messages."""

from __future__ import annotations

import pickle

import pytest

from gpuarray.errors import (
    CudaError,
    CudaOutOfMemoryError,
    CudaUnavailableError,
    NvrtcError,
    StreamOrderError,
)

ERRORS = [
    CudaError(700, "cuStreamSynchronize", "in kernel ga_copy"),
    CudaError(12345, "cuFoo"),
    CudaOutOfMemoryError(2, "cuMemAlloc", "while allocating 2.0 GiB on device 0"),
    CudaUnavailableError("no driver"),
    NvrtcError("NVRTC_ERROR_COMPILATION", "error: x undefined", ["-arch=sm_90"], "int y = x;\n"),
    StreamOrderError("unordered access"),
]


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_their_fields_and_message(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert back.__dict__ == err.__dict__


def test_cuda_error_message_names_code_call_and_detail():
    e = CudaError(700, "cuStreamSynchronize", "in kernel ga_copy")
    assert (e.code, e.name, e.call) == (700, "CUDA_ERROR_ILLEGAL_ADDRESS", "cuStreamSynchronize")
    assert str(e) == ("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS "
                      "(an illegal memory access was encountered) in kernel ga_copy")
    assert CudaError(12345, "cuFoo").name == "CUDA_ERROR_12345"


def test_out_of_memory_is_a_memory_error_and_a_cuda_error():
    e = ERRORS[2]
    assert isinstance(e, MemoryError) and isinstance(e, CudaError)
    assert "2.0 GiB" in str(e)


def test_nvrtc_error_numbers_the_source_and_keeps_the_log():
    e = ERRORS[4]
    assert "   1 | int y = x;" in str(e) and "error: x undefined" in str(e)
    assert e.options == ["-arch=sm_90"] and "-arch=sm_90" in str(e)
