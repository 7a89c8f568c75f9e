"""Package discovery and the one C extension; all other metadata is in pyproject.toml.

``find_packages`` picks up ``gpuarray`` and every subpackage (any folder with
an ``__init__.py``) automatically. The CUDA C sources in the top-level
``kernels/`` folder are added as the package ``gpuarray._kernel_sources``,
which static ``pyproject.toml`` configuration cannot express together with
automatic discovery.

``gpuarray.interop._dlpack_core`` (DLPack capsules, the DLPack C exchange
table and the fast half of the CUDA Array Interface parser, in C) is built against the
Limited API of Python 3.10 (one abi3 build for every later version) with the
system compiler. It is optional: without a compiler the install still
succeeds and gpuarray uses its ctypes implementation of the same functions
(``python -m gpuarray info`` says which one is in use).
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=[*find_packages(include=["gpuarray", "gpuarray.*"]), "gpuarray._kernel_sources"],
    package_dir={"gpuarray._kernel_sources": "kernels"},
    ext_modules=[
        Extension(
            "gpuarray.interop._dlpack_core",
            sources=["gpuarray/interop/_dlpack_module.c", "gpuarray/interop/_dlpack_core.c",
                     "gpuarray/interop/_dlpack_consume.c", "gpuarray/interop/_dlpack_exchange.c",
                     "gpuarray/interop/_cai_fields.c"],
            depends=["gpuarray/interop/_dlpack_abi.h"],
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            py_limited_api=True,
            optional=True,  # a failed build is a warning: the ctypes fallback is used
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
