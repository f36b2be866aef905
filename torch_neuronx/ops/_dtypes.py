"""torch <-> JAX dtype mapping and PyTorch's type promotion, for use inside lowerings."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

TO_JAX: dict[torch.dtype, Any] = {
    torch.float32: jnp.float32,
    torch.float64: jnp.float64,
    torch.float16: jnp.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.float8_e4m3fn: jnp.float8_e4m3fn,
    torch.float8_e5m2: jnp.float8_e5m2,
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
    torch.int8: jnp.int8,
    torch.int16: jnp.int16,
    torch.int32: jnp.int32,
    torch.int64: jnp.int64,
    torch.uint8: jnp.uint8,
    torch.uint16: jnp.uint16,
    torch.uint32: jnp.uint32,
    torch.uint64: jnp.uint64,
    torch.bool: jnp.bool_,
}
TO_TORCH: dict[Any, torch.dtype] = {np.dtype(v): k for k, v in TO_JAX.items()}

# numpy cannot hold these torch dtypes directly; they travel as same-width integers.
HOST_VIEW: dict[torch.dtype, tuple[torch.dtype, Any]] = {
    torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
    torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
    torch.complex32: (torch.int32, np.uint32),
}

# Storage-only dtypes: JAX has no complex32, so a storage of it holds each element's 4 bytes
# (float16 real part, then float16 imaginary part, as in host memory) as one uint32. Views of
# another dtype over those bytes (`view_as_real`, `.view(torch.float16)`) read them as they are.
# No lowering ever sees the bits: the few marked `Lowering.complex32` receive such tensors
# widened to complex64 (exactly) and write them back rounded (`eager.storage_io`); every other
# op runs eagerly on a new tensor written in place, or PyTorch's CPU kernel, which computes it
# or raises CPU's own error (`eager.kernel.Kernel`).
BITS: dict[torch.dtype, Any] = {torch.complex32: jnp.uint32}

DEFAULT = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
INT_TO_FLOAT = ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
ALWAYS_BOOL = ELEMENTWISE_TYPE_PROMOTION_KIND.ALWAYS_BOOL
COMPLEX_TO_FLOAT = ELEMENTWISE_TYPE_PROMOTION_KIND.COMPLEX_TO_FLOAT
NO_OPMATH = ELEMENTWISE_TYPE_PROMOTION_KIND.NO_OPMATH
BOOL_TO_LONG = ELEMENTWISE_TYPE_PROMOTION_KIND.BOOL_TO_LONG


def jax_dtype(dtype: torch.dtype) -> Any:
    try:
        return TO_JAX[dtype]
    except KeyError:
        raise TypeError(
            f"neuron: dtype {dtype} is not supported on the neuron device; "
            "convert the tensor to a supported dtype (e.g. .float()) first"
        ) from None


class Complex32ResultError(Exception):
    """Raised by a lowering, while traced, for a call whose result would be complex32 (which has
    no JAX type): eager then runs the call as it runs calls naming complex32 (`Lowering.complex32`)."""


def buffer_dtype(dtype: torch.dtype) -> Any:
    """The jax dtype of a storage buffer holding `dtype` elements (their bits for `BITS` dtypes)."""
    bits = BITS.get(dtype)
    return bits if bits is not None else jax_dtype(dtype)


def from_bits(bits: Any) -> Any:
    """complex32 elements held as uint32 bits -> the same values as complex64 (exact)."""
    parts = jax.lax.bitcast_convert_type(bits, jnp.float16).astype(jnp.float32)
    return jax.lax.complex(parts[..., 0], parts[..., 1])


def to_bits(value: Any) -> Any:
    """Values of any dtype -> complex32 bits: each part rounded to float16 straight from its own
    precision, as PyTorch converts to complex32."""
    if jnp.issubdtype(value.dtype, jnp.complexfloating):
        real, imag = jnp.real(value), jnp.imag(value)
    else:
        real, imag = value, jnp.zeros_like(value)
    parts = jnp.stack([real.astype(jnp.float16), imag.astype(jnp.float16)], axis=-1)
    return jax.lax.bitcast_convert_type(parts, jnp.uint32)


def torch_dtype(x: Any) -> torch.dtype:
    """The torch dtype of a jax array, or of a tensor (what a `validate` receives in eager)."""
    return x.dtype if isinstance(x.dtype, torch.dtype) else TO_TORCH[np.dtype(x.dtype)]


def _as_torch_operand(x: Any) -> Any:
    """A stand-in PyTorch's promotion understands: weak (Python) scalars stay numbers,
    arrays become meta tensors of the same dtype and rank class (0-d or not)."""
    if isinstance(x, (bool, int, float, complex)):
        return x
    if getattr(x, "weak_type", False):
        kind = np.dtype(x.dtype).kind
        return {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}[kind]
    return torch.empty((1,) * min(x.ndim, 1), dtype=torch_dtype(x), device="meta")


def promote(*args: Any, kind: ELEMENTWISE_TYPE_PROMOTION_KIND = DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) for an elementwise op, by PyTorch's rules."""
    operands = [_as_torch_operand(a) for a in args if a is not None]
    return elementwise_dtypes(*operands, type_promotion_kind=kind)


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def cast(x: Any, dtype: torch.dtype) -> Any:
    """Cast an array or scalar to a torch dtype (PyTorch's conversion semantics)."""
    target = jax_dtype(dtype)
    if not hasattr(x, "dtype"):
        if type(x) is int and jnp.issubdtype(target, jnp.integer):
            x = np.array(x).astype(target)  # wraps into narrower types, as PyTorch's scalar conversion
        return jnp.asarray(x, dtype=target)
    if dtype == torch.bool:  # a complex value is true where either part is nonzero
        return x != 0
    if jnp.issubdtype(x.dtype, jnp.complexfloating) and not dtype.is_complex:
        x = jnp.real(x)
    return x.astype(target)
