"""How a ``DeviceNDArray`` meets NumPy and Python's number protocols.

One concern: what NumPy users reach for first -- ``repr``, ``np.sum(a)``,
``a + 1``, ``float(a)`` -- behaves as they expect from NumPy, CuPy and
PyTorch, without gpuarray growing arithmetic.  :class:`ArrayProtocolsMixin`
holds it; ``DeviceNDArray`` inherits it and provides ``shape``, ``dtype``,
``size``, ``ndim``, ``device`` and ``copy_to_host``.

Conventions:

- gpuarray has no arithmetic.  NumPy functions and ufuncs refuse a device
  array with a ``TypeError`` that says what to do instead (``__array_function__``
  and ``__array_ufunc__``), and so do Python's arithmetic and ordering
  operators (``==``/``!=`` stay identity, as for any object); only
  metadata queries (``np.shape``, ``np.ndim``, ``np.size``) and
  ``np.transpose`` (a view) answer.  Explicit
  host conversion stays: ``np.asarray(a)`` (``__array__``), ``a.get()``,
  ``a.copy_to_host()``.  ``__array_ufunc__`` is a method that raises rather
  than ``None``: both make NumPy refuse (and make ``ndarray + a`` reach the
  array), but ``None`` gets NumPy's generic message, which says nothing about
  what to do instead.
- ``repr``/``str`` print the values as NumPy does, with NumPy's print options.
  Only what is printed leaves the device: when NumPy would summarise (size
  above ``threshold``), only the ``edgeitems`` corners are copied.
- ``float``, ``int``, ``complex``, ``operator.index`` and ``bool`` follow
  NumPy: NumPy first converts a host stand-in of the same shape and dtype
  that holds no data; where it refuses (its own error: in NumPy 2.x only 0-d
  arrays convert to ``float``/``int``/``complex``), nothing is copied; else
  the one element is copied and converted.
"""

from __future__ import annotations

import itertools
import operator
import re
from typing import TYPE_CHECKING, Any

import numpy as np

__all__ = ["ArrayProtocolsMixin", "no_arithmetic_message"]

_REPR_PREFIX = "DeviceNDArray("
# Where the extras of NumPy's repr begin (", shape=..." / ", dtype=...", or
# on a new line), and the shape among them.
_EXTRAS = re.compile(r",\s+(?=(?:shape|dtype)=)")
_SHAPE = re.compile(r"shape=\([^)]*\)")

# Metadata queries answer without touching the data.
#: NumPy functions that answer for a device array: metadata queries, and
#: ``np.transpose`` (a view, as ``a.transpose()``; Numba's device arrays
#: answer it too).  NumPy's own implementation calls the array's attribute.
_METADATA_FUNCTIONS = frozenset(("shape", "ndim", "size", "transpose"))


def no_arithmetic_message(what: str) -> str:
    """The message of every refused NumPy function, ufunc and operator.

    Parameters
    ----------
    what : str
        The refused operation, e.g. ``"numpy.sum()"`` or ``"the + operator"``.

    Returns
    -------
    str
    """
    return (f"{what} is not supported on a gpuarray.DeviceNDArray: gpuarray moves and "
            "copies device arrays but has no arithmetic. Copy the data to the host "
            "explicitly and compute there (a.get(), a.copy_to_host() or np.asarray(a)), or "
            "hand the array zero-copy to a GPU library that computes (cupy.asarray(a), "
            "torch.from_dlpack(a), numba.cuda.as_cuda_array(a)).")


def _host_stand_in(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A read-only host array of ``shape`` and ``dtype`` that owns one element of memory."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def _operator(symbol: str, reflected: bool = False) -> Any:
    def refuse(self: Any, other: Any = None) -> Any:
        raise TypeError(no_arithmetic_message(f"the {symbol} operator"))

    refuse.__doc__ = (f"``{symbol}``: refused with a ``TypeError`` (gpuarray has no arithmetic).")
    return refuse


def _unary(symbol: str) -> Any:
    def refuse(self: Any) -> Any:
        raise TypeError(no_arithmetic_message(f"the unary {symbol} operator"))

    refuse.__doc__ = f"``{symbol}a``: refused with a ``TypeError`` (gpuarray has no arithmetic)."
    return refuse


class ArrayProtocolsMixin:
    """NumPy's protocols, ``repr``/``str`` with values, and scalar conversions."""

    __slots__ = ()

    # Provided by DeviceNDArray.
    shape: tuple[int, ...]
    dtype: np.dtype
    device: Any

    if TYPE_CHECKING:
        @property
        def size(self) -> int: ...

        @property
        def ndim(self) -> int: ...

        def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = None) -> np.ndarray: ...

        def __getitem__(self, key: Any) -> Any: ...

    # ------------------------------------------------------------- NumPy
    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """Refuse NumPy functions (``np.sum(a)``) with a ``TypeError``; answer metadata queries.

        ``np.shape``, ``np.ndim`` and ``np.size`` answer from the array's
        metadata, and ``np.transpose`` returns the view ``a.transpose()``
        does.  Any other NumPy function raises: gpuarray has no
        arithmetic, and a silent copy to the host is what users of device
        arrays do not expect.  Convert explicitly with ``np.asarray(a)`` or
        ``a.get()``.

        Raises
        ------
        TypeError
            For every NumPy function but the metadata queries and ``np.transpose``.
        """
        name = getattr(func, "__name__", repr(func))
        impl = getattr(func, "_implementation", None)
        if name in _METADATA_FUNCTIONS and impl is not None and getattr(np, name, None) is func:
            return impl(*args, **kwargs)
        module = getattr(func, "__module__", None) or "numpy"
        module = "numpy" if module.startswith("numpy") else module
        raise TypeError(no_arithmetic_message(f"{module}.{name}()"))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """Refuse NumPy ufuncs (``np.add(a, 1)``, ``np.sqrt(a)``) with a ``TypeError``.

        Raises
        ------
        TypeError
            Always, with a message that says what to do instead.
        """
        what = f"numpy.{ufunc.__name__}" + ("()" if method == "__call__" else f".{method}()")
        raise TypeError(no_arithmetic_message(what))

    # Arithmetic operators (and their reflected forms): Python's in-place
    # operators fall back on these, so ``a += 1`` gets the same message.
    __add__ = __radd__ = _operator("+")
    __sub__ = __rsub__ = _operator("-")
    __mul__ = __rmul__ = _operator("*")
    __matmul__ = __rmatmul__ = _operator("@")
    __truediv__ = __rtruediv__ = _operator("/")
    __floordiv__ = __rfloordiv__ = _operator("//")
    __mod__ = __rmod__ = _operator("%")
    __divmod__ = __rdivmod__ = _operator("divmod()")
    __lshift__ = __rlshift__ = _operator("<<")
    __rshift__ = __rrshift__ = _operator(">>")
    __and__ = __rand__ = _operator("&")
    __or__ = __ror__ = _operator("|")
    __xor__ = __rxor__ = _operator("^")
    # Ordering too (reflected by Python itself: a < b tries b > a). == and !=
    # stay identity, as for any Python object: an elementwise __eq__ would
    # make arrays unhashable and break `x in list`.
    __lt__ = _operator("<")
    __le__ = _operator("<=")
    __gt__ = _operator(">")
    __ge__ = _operator(">=")
    __neg__ = _unary("-")
    __pos__ = _unary("+")
    __invert__ = _unary("~")

    def __pow__(self, other: Any, mod: Any = None) -> Any:
        """``a ** b``: refused with a ``TypeError`` (gpuarray has no arithmetic)."""
        raise TypeError(no_arithmetic_message("the ** operator"))

    def __rpow__(self, other: Any, mod: Any = None) -> Any:
        """``b ** a``: refused with a ``TypeError`` (gpuarray has no arithmetic)."""
        raise TypeError(no_arithmetic_message("the ** operator"))

    def __abs__(self) -> Any:
        """``abs(a)``: refused with a ``TypeError`` (gpuarray has no arithmetic)."""
        raise TypeError(no_arithmetic_message("abs()"))

    # --------------------------------------------------- scalar conversions
    def _convert(self, fn: Any) -> Any:
        """``fn`` (float, int, ...) of this array as NumPy would convert its host copy.

        NumPy decides first, on a data-less stand-in of the same shape and
        dtype: when it refuses (NumPy's own error), nothing is copied; else
        the element is copied and converted.
        """
        fn(_host_stand_in(self.shape, self.dtype))
        return fn(self.copy_to_host())

    def __bool__(self) -> bool:
        """Truth value as NumPy's: the element of a size-1 array; ``ValueError`` otherwise.

        Raises
        ------
        ValueError
            For more than one element (and, as NumPy 2.2+, for none).
        """
        return self._convert(bool)

    def __float__(self) -> float:
        """``float(a)`` as NumPy converts the same host array (a 0-d array, in NumPy 2.x).

        Raises
        ------
        TypeError
            Where NumPy refuses (NumPy's message); nothing is copied then.
        """
        return self._convert(float)

    def __int__(self) -> int:
        """``int(a)`` as NumPy converts the same host array (a 0-d array, in NumPy 2.x).

        Raises
        ------
        TypeError
            Where NumPy refuses (NumPy's message); nothing is copied then.
        """
        return self._convert(int)

    def __complex__(self) -> complex:
        """``complex(a)`` as NumPy converts the same host array (a 0-d array, in NumPy 2.x).

        Raises
        ------
        TypeError
            Where NumPy refuses (NumPy's message); nothing is copied then.
        """
        return self._convert(complex)

    def __index__(self) -> int:
        """``operator.index(a)`` for a 0-d integer array, as NumPy.

        Raises
        ------
        TypeError
            For other shapes and dtypes (NumPy's message).
        """
        return self._convert(operator.index)

    # ------------------------------------------------------------ printing
    def _printable(self) -> tuple[np.ndarray, dict[str, Any]]:
        """A host array NumPy prints exactly as it would print this array, and the options.

        Small arrays are copied whole.  Above NumPy's ``threshold`` NumPy
        prints, along each axis longer than ``2 * edgeitems``, the first and
        last ``edgeitems`` entries and ``...`` between them.  Only those
        corners are copied, into a host array whose long axes have
        ``2 * edgeitems + 1`` entries: the middle entry is never printed
        (NumPy summarises it away and builds its number format from the
        corners alone), so printing that array with ``threshold=0`` gives
        NumPy's text for the whole array.
        """
        opts = np.get_printoptions()
        if self.size <= opts["threshold"]:
            return self.copy_to_host(), {}
        e = int(opts["edgeitems"])
        long_axes = [i for i, n in enumerate(self.shape) if n > 2 * e]
        shape = tuple(2 * e + 1 if i in long_axes else n for i, n in enumerate(self.shape))
        host = np.zeros(shape, self.dtype)
        full = [slice(None)] * self.ndim
        for ends in itertools.product((False, True), repeat=len(long_axes)):
            src, dst = list(full), list(full)
            for axis, trailing in zip(long_axes, ends, strict=True):
                n = self.shape[axis]
                src[axis] = slice(n - e, n) if trailing else slice(0, e)
                dst[axis] = slice(e + 1, 2 * e + 1) if trailing else slice(0, e)
            corner = self[tuple(src)]
            if corner.size:
                corner.copy_to_host(host[tuple(dst)])
        return host, {"threshold": 0, "edgeitems": e}

    def __repr__(self) -> str:
        """The values as NumPy prints them: ``DeviceNDArray([1.5, 2.5], dtype=float32)``.

        The shape and dtype appear where NumPy's repr shows them; ``device=N``
        is added for devices other than 0.  Only the printed elements are
        copied to the host (see NumPy's ``threshold`` and ``edgeitems`` print
        options).
        """
        extras = _repr_extras(self.shape, self.dtype)
        device = getattr(self.device, "id", 0)
        if device:
            extras.append(f"device={device}")
        host, opts = self._printable()
        body = np.array2string(host, separator=", ", prefix=_REPR_PREFIX, suffix=")", **opts)
        if not extras:
            return f"{_REPR_PREFIX}{body})"
        text = f"{_REPR_PREFIX}{body},"
        tail = ", ".join(extras) + ")"
        last_line = len(text) - (text.rfind("\n") + 1)
        linewidth = int(np.get_printoptions()["linewidth"])
        spacer = "\n" + " " * len(_REPR_PREFIX) if last_line + len(tail) + 1 > linewidth else " "
        return text + spacer + tail

    def __str__(self) -> str:
        """The values as ``str()`` of the NumPy array (``[1.5 2.5]``), copying only what is printed."""
        if self.ndim == 0:
            return str(self.copy_to_host()[()])
        host, opts = self._printable()
        return np.array2string(host, separator=" ", **opts)


def _repr_extras(shape: tuple[int, ...], dtype: np.dtype) -> list[str]:
    """What NumPy's repr of an array of ``shape`` and ``dtype`` adds after the values.

    ``["dtype=float32"]``, ``["shape=(0, 3)", "dtype=float64"]`` or ``[]``:
    asked of NumPy itself on a data-less stand-in, so that the rules of the
    installed NumPy version (and its ``legacy`` print option) apply.
    """
    text = np.array_repr(_host_stand_in(shape, dtype))
    found = _EXTRAS.search(text)
    if found is None:
        return []
    extras = []
    rest = text[found.end():-1]  # without the closing parenthesis
    shape_part = _SHAPE.match(rest)
    if shape_part:
        extras.append(shape_part.group(0))
        rest = rest[shape_part.end():].lstrip(", \n")
    if rest:
        extras.append(rest.strip())
    return extras
