"""The inputs of a link, judged, and the references a linked image leaves undefined.

One concern, shared by the two linkers the stand-in serves: the driver's
(``cuLinkAddData``/``cuLinkComplete`` in ``_module_calls.py``) and the
stand-in nvJitLink's (``_nvjitlink_calls.py``).  Each keeps its own states,
codes and log words; what an input is, and which functions the PTX of a
linked image (``sim/_cubin.link_image``) uses that no input defines, are
judged here once.
"""

from __future__ import annotations

import re

from .. import _cubin, _images

__all__ = ["unread_input", "code_input", "undefined", "user_of"]


def unread_input(kind: str, data: bytes) -> bool:
    """Whether ``data``, given as ``kind`` (``"object"``/``"library"``), is a host object or an
    archive: an input whose kernels and symbols the simulator does not read."""
    return (kind == "object" and data.startswith(_cubin.ELF_MAGIC)
            or kind == "library" and data.startswith(b"!<arch>\n"))


def code_input(data: bytes, cc: int) -> tuple[str, bytes]:
    """A PTX, cubin or fatbin input as the link keeps it: ``("ptx", text)`` or ``("cubin", elf)``.

    A fatbin gives the member a load on an ``sm_<cc>`` device takes; PTX is cut
    at its NUL (and given one).

    Raises
    ------
    gpuarray_sim._images.ImageError
        The data is none of those, or not for ``sm_<cc>`` (``kind`` says how).
    """
    found = _images.validate(data, cc=cc)
    if found == "fatbin":  # one member: the one chosen for the device, as a load takes it
        data = _images.fatbin_member(data, cc)
        found = "elf" if data.startswith(_cubin.ELF_MAGIC) else "ptx"
    if found == "ptx":
        return "ptx", data.split(b"\0", 1)[0] + b"\0"
    return "cubin", data


def user_of(inputs: list[tuple[str, bytes]], labels: list[str], name: str) -> str:
    """The label of the first PTX input that uses function ``name`` (``""``: none)."""
    word = re.compile(rb"(?<![\w$%])" + re.escape(name.encode()) + rb"(?![\w$])")
    for (kind, data), label in zip(inputs, labels, strict=True):
        if kind == "ptx" and word.search(data):
            return label
    return ""


def undefined(image: bytes, inputs: list[tuple[str, bytes]]) -> list[str]:
    """The functions the PTX of linked ``image`` uses that no input defines (not a PTX input,
    not a cubin's symbol, not one the simulator provides): what a linker refuses."""
    texts = _images.ptx_texts(image)
    if not texts:
        return []
    from .. import ptx

    try:  # the program the output's load builds (the same texts: parsed once, cached)
        program = ptx.load(texts[0]) if len(texts) == 1 else ptx.link(list[bytes | str](texts))
    except ptx.PtxError:
        return []  # refused when the output is loaded, saying why
    missing = program.unresolved
    for kind, data in inputs:
        if missing and kind == "cubin":
            try:
                missing = [n for n in missing if n not in _cubin.read_elf(data).functions]
            except _cubin.BinaryError:
                return []
    return missing
