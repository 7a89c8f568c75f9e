"""Package discovery for setuptools; all other metadata is in pyproject.toml.

``find_packages`` picks up ``gpuarray`` and every subpackage (any folder with
an ``__init__.py``) automatically. The CUDA C sources in the top-level
``kernels/`` folder are added as the package ``gpuarray._kernel_sources``,
which static ``pyproject.toml`` configuration cannot express together with
automatic discovery.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["gpuarray", "gpuarray.*"]), "gpuarray._kernel_sources"],
    package_dir={"gpuarray._kernel_sources": "kernels"},
)
