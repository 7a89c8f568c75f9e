"""``python -m gpuarray_sim``: the simulator's command line.

``standin -- COMMAND [ARGS...]`` runs a command on gpuarray's ``cuda``
backend over the stand-in driver (the simulator behind a stand-in
``libcuda.so.1``); ``python -m gpuarray standin`` hands over to it.
"""

from __future__ import annotations

import argparse
import sys

from . import standin


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m gpuarray_sim``."""
    parser = argparse.ArgumentParser(prog="python -m gpuarray_sim",
                                     description="CUDA without a GPU: gpuarray's simulator.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("standin", help="run a command on the cuda backend over the stand-in "
                         "driver (the simulator behind libcuda.so.1)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    return standin.main(args.cmd)


if __name__ == "__main__":
    sys.exit(main())
