"""PTX's types and the C++ types they are held and computed in.

One concern: the tables the checker (``_check.py``) and the translation
(``_context.py``, ``_ops*.py``) both read, so the checker needs nothing of
the translation.
"""

from __future__ import annotations

__all__ = ["STORAGE", "CTYPE", "SIZE", "FLOATS", "U128"]

#: The C++ type of PTX's ``.b128`` (PTX ISA 8.3): ``unsigned __int128`` (ptxrt.h), 16-byte
#: aligned; its low 64 bits are the first element of ``mov.b128``'s ``{lo, hi}``.
U128 = "ptx::u128"

#: Storage C++ type of each register type.
STORAGE = {"pred": "bool", "b8": "uint8_t", "u8": "uint8_t", "s8": "uint8_t",
           "b16": "uint16_t", "u16": "uint16_t", "s16": "uint16_t", "f16": "uint16_t",
           "bf16": "uint16_t", "b32": "uint32_t", "u32": "uint32_t", "s32": "uint32_t",
           "f32": "float", "f16x2": "uint32_t", "bf16x2": "uint32_t", "b64": "uint64_t",
           "u64": "uint64_t", "s64": "uint64_t", "f64": "double", "s16x2": "uint32_t",
           "u16x2": "uint32_t", "e4m3x2": "uint16_t", "e5m2x2": "uint16_t",
           "b128": "ptx::u128"}
#: C++ type an instruction of each PTX type computes in.
CTYPE = {"pred": "bool", "b8": "uint8_t", "u8": "uint8_t", "s8": "int8_t", "b16": "uint16_t",
         "u16": "uint16_t", "s16": "int16_t", "f16": "uint16_t", "bf16": "uint16_t",
         "b32": "uint32_t", "u32": "uint32_t", "s32": "int32_t", "f32": "float",
         "f16x2": "uint32_t", "bf16x2": "uint32_t", "b64": "uint64_t", "u64": "uint64_t",
         "s64": "int64_t", "f64": "double", "s16x2": "uint32_t", "u16x2": "uint32_t",
         "e4m3x2": "uint16_t", "e5m2x2": "uint16_t", "b128": "ptx::u128"}
SIZE = {"bool": 1, "uint8_t": 1, "int8_t": 1, "uint16_t": 2, "int16_t": 2, "uint32_t": 4,
        "int32_t": 4, "float": 4, "uint64_t": 8, "int64_t": 8, "double": 8,
        "ptx::u128": 16}
FLOATS = ("float", "double")
