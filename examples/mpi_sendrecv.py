"""Send gpuarray arrays between MPI ranks with mpi4py and a CUDA-aware MPI.

mpi4py takes any object that exports ``__cuda_array_interface__`` or
``__dlpack__`` as a message buffer, and a CUDA-aware MPI (Open MPI, MPICH,
MVAPICH2 built with CUDA) moves the device memory directly, with no host
copy by gpuarray.  MPI knows nothing of CUDA streams: synchronise the
array's stream before the call, as below.

Run on a machine with GPUs (never on gpuarray's simulator: its device
addresses are not host memory, and MPI would read them as such)::

    mpiexec -n 2 python examples/mpi_sendrecv.py            # rank 0 -> rank 1
    python examples/mpi_sendrecv.py                         # one rank, to itself
    python examples/mpi_sendrecv.py --path dlpack           # DLPack instead of CAI

Each rank uses device ``rank % device_count`` (or pin ranks with
``CUDA_VISIBLE_DEVICES``, as launchers do).  Prints ``ok`` on every rank.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import gpuarray


class CAIOnly:
    """Shows mpi4py the array through the CUDA Array Interface only."""

    def __init__(self, arr: gpuarray.DeviceNDArray) -> None:
        self.__cuda_array_interface__ = arr.__cuda_array_interface__
        self._arr = arr  # keeps the memory alive


class DLPackOnly:
    """Shows mpi4py the array through DLPack only."""

    def __init__(self, arr: gpuarray.DeviceNDArray) -> None:
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("cai", "dlpack"), default="cai")
    parser.add_argument("-n", type=int, default=1 << 20, help="elements to send")
    args = parser.parse_args()
    wrap = CAIOnly if args.path == "cai" else DLPackOnly

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    gpuarray.select_device(rank % gpuarray.device_count())
    want = np.arange(args.n, dtype=np.float64)

    send = gpuarray.to_device(want)
    recv = gpuarray.empty(args.n, dtype=np.float64)
    send.stream.synchronize()  # MPI reads the memory outside CUDA stream order
    recv.stream.synchronize()
    if size == 1:
        comm.Sendrecv(wrap(send), dest=0, sendtag=7, recvbuf=wrap(recv), source=0, recvtag=7)
        got = recv
    elif rank == 0:
        comm.Send(wrap(send), dest=1, tag=7)
        got = send
    elif rank == 1:
        comm.Recv(wrap(recv), source=0, tag=7)
        got = recv
    else:
        got = send
    np.testing.assert_array_equal(got.copy_to_host(), want)

    total = gpuarray.empty(args.n, dtype=np.float64)
    comm.Allreduce(wrap(send), wrap(total), op=MPI.SUM)
    np.testing.assert_array_equal(total.copy_to_host(), want * size)
    print(f"rank {rank}/{size} ({args.path}): ok", flush=True)


if __name__ == "__main__":
    main()
