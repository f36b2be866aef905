"""Matrix products and linear algebra: mm/bmm/addmm family, dot/vdot, trace, cross,
diag_embed, and the factorizations behind torch.linalg (cholesky, LU, QR, eigh, SVD, solves).

Products follow PyTorch CPU numerics: float32 at full precision (`Precision.HIGHEST`, so no
reduced-precision passes on accelerators), float16/bfloat16 accumulate in float32 and round
once. Factorizations use `jax.lax.linalg` (LAPACK on CPU) and return PyTorch's layouts: LU
pivots are 1-based int32, `info` is int32, skipped outputs (`compute_uv=False`) are empty.
Errors that PyTorch reports through `info` stay in `info`; the composite callers
(`linalg.inv`, `linalg.cholesky`, ...) turn them into exceptions on the host.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from jax._src.lax import linalg as jax_linalg  # geqrf: JAX's LAPACK-form QR has no public name
from jax.lax import linalg as lax_linalg

from . import check, lowering
from ._common import accumulate, broadcast_shape, scalar_type_name, step_rounding, upcast, wrap_dim
from ._dtypes import cast, promote, torch_dtype
from .reduction import integral_to_long

aten = torch.ops.aten
HIGHEST = lax.Precision.HIGHEST


# ---- products -----------------------------------------------------------------------------


def _same_dtype(name: str, *xs: Any) -> torch.dtype:
    dtypes = [torch_dtype(x) for x in xs]
    if any(d != dtypes[0] for d in dtypes):
        raise RuntimeError(f"neuron: {name}: expected all operands to have the same dtype, but got {dtypes}")
    return dtypes[0]


def matmul(a: Any, b: Any) -> Any:
    """`a @ b` (jnp.matmul broadcasting) with PyTorch CPU's accumulation, in a's dtype."""
    dtype = torch_dtype(a)
    if dtype == torch.bool:
        return jnp.matmul(a.astype(jnp.int32), b.astype(jnp.int32)) != 0
    if dtype in (torch.float16, torch.bfloat16):
        return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(a.dtype)
    return jnp.matmul(a, b, precision=HIGHEST)


def _accumulated(a: Any, b: Any) -> Any:
    """`a @ b` kept in the accumulation dtype, for ops that add to it before rounding."""
    dtype = torch_dtype(a)
    if dtype in (torch.float16, torch.bfloat16):
        return jnp.matmul(a, b, preferred_element_type=jnp.float32)
    return matmul(a, b)


def _rank(name: str, x: Any, ndim: int, what: str) -> None:
    if x.ndim != ndim:
        raise RuntimeError(f"neuron: {name}: {what} must be a {ndim}D tensor, but got a {x.ndim}D tensor")


def _shapes(a: Any, b: Any) -> str:
    return f"{'x'.join(map(str, a.shape))} and {'x'.join(map(str, b.shape))}"


def _check_mm(name: str, a: Any, b: Any) -> None:
    _rank(name, a, 2, "self")
    _rank(name, b, 2, "mat2")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"neuron: {name}: mat1 and mat2 shapes cannot be multiplied ({_shapes(a, b)})")
    _same_dtype(name, a, b)


def _check_bmm(name: str, a: Any, b: Any) -> None:
    _rank(name, a, 3, "batch1")
    _rank(name, b, 3, "batch2")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(f"neuron: {name}: batch1 and batch2 shapes cannot be multiplied ({_shapes(a, b)})")
    _same_dtype(name, a, b)


def _scale_add(x: Any, product: Any, beta: Any, alpha: Any) -> Any:
    """`beta * x + alpha * product` in the product's (accumulation) dtype, cast to x's dtype.
    With beta == 0, `x` is ignored: its NaN/inf do not propagate (PyTorch semantics)."""
    out_dtype = x.dtype
    if not jnp.issubdtype(out_dtype, jnp.inexact):  # PyTorch converts the scalars to the tensor type
        alpha, beta = _truncate(alpha), _truncate(beta)
    if alpha is not True and not (isinstance(alpha, int) and alpha == 1):
        product = product * alpha
    if isinstance(beta, (bool, int)) and beta == 0:
        return jnp.broadcast_to(product, jnp.broadcast_shapes(x.shape, product.shape)).astype(out_dtype)
    scaled = x.astype(product.dtype)
    if not (isinstance(beta, int) and beta == 1):
        scaled = jnp.where(beta == 0, jnp.zeros((), product.dtype), scaled * beta)
    if out_dtype == jnp.bool_:
        return (scaled != 0) | (product != 0)
    return (scaled + product).astype(out_dtype)


def _truncate(scalar: Any) -> Any:
    if isinstance(scalar, (bool, int)):
        return scalar
    return jnp.trunc(scalar).astype(jnp.int64)


@lowering(aten.mm.default)
def mm(a: Any, b: Any) -> Any:
    _check_mm("mm", a, b)
    return matmul(a, b)


@lowering(aten.bmm.default)
def bmm(a: Any, b: Any) -> Any:
    _check_bmm("bmm", a, b)
    return matmul(a, b)


@lowering(aten.addmm.default)
def addmm(x: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    _check_mm("addmm", a, b)
    _same_dtype("addmm", x, a)
    return _scale_add(x, _accumulated(a, b), beta, alpha)


@lowering(aten._addmm_activation.default)
def addmm_activation(x: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1, use_gelu: bool = False) -> Any:
    out = addmm(x, a, b, beta, alpha)
    compute = cast(out, accumulate(torch_dtype(out)))
    act = jax.nn.gelu(compute, approximate=True) if use_gelu else jnp.maximum(compute, 0)
    return act.astype(out.dtype)


@lowering(aten.baddbmm.default)
def baddbmm(x: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    _check_bmm("baddbmm", a, b)
    _same_dtype("baddbmm", x, a)
    return _scale_add(x, _accumulated(a, b), beta, alpha)


@lowering(aten.addbmm.default)
def addbmm(x: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    _check_bmm("addbmm", a, b)
    _same_dtype("addbmm", x, a)
    if not a.shape[0]:
        return _scale_add(x, jnp.zeros((a.shape[1], b.shape[2]), x.dtype), beta, alpha)
    # PyTorch adds one batch at a time into the output (addmm_ per batch), rounding each step.
    first = _scale_add(x, _accumulated(a[0], b[0]), beta, alpha)

    def step(out: Any, ab: tuple[Any, Any]) -> tuple[Any, None]:
        return _scale_add(out, _accumulated(*ab), 1, alpha), None

    return lax.scan(step, first, (a[1:], b[1:]))[0]


def _expand_to(x: Any, shape: tuple[int, ...]) -> Any:
    """`x` expanded to `shape` (`expand_size`), with PyTorch's errors for sizes that do not fit."""
    if x.ndim > len(shape):
        raise RuntimeError(
            f"expand(torch.{scalar_type_name(torch_dtype(x))}Tensor{{{list(x.shape)}}}, size={list(shape)}): the "
            f"number of sizes provided ({len(shape)}) must be greater or equal to the number of dimensions in the "
            f"tensor ({x.ndim})"
        )
    for dim, (have, want) in enumerate(zip((1,) * (len(shape) - x.ndim) + tuple(x.shape), shape)):
        if have not in (1, want):
            raise RuntimeError(
                f"The expanded size of the tensor ({want}) must match the existing size ({have}) at non-singleton "
                f"dimension {dim}.  Target sizes: {list(shape)}.  Tensor sizes: {list(x.shape)}"
            )
    return jnp.broadcast_to(x, shape)


@lowering(aten.addr.default)
def addr(x: Any, v1: Any, v2: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    """`beta * x + alpha * v1 * v2` (outer), elementwise in the common dtype as CPU's addr kernel:
    the scalars are converted to it and float16/bfloat16 round after every operation."""
    for v, arg in ((v1, "vec1"), (v2, "vec2")):
        if v.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {arg}, but got {v.ndim}-D")
    x = _expand_to(x, (v1.shape[0], v2.shape[0]))
    dtype = promote(x, v1, v2)[1]
    for scalar, arg in ((beta, "beta"), (alpha, "alpha")):
        if isinstance(scalar, bool) and dtype != torch.bool:
            raise RuntimeError(f"Boolean {arg} only supported for Boolean results.")
        if not (dtype.is_floating_point or dtype.is_complex or isinstance(scalar, (bool, int))):
            raise RuntimeError(f"For integral input tensors, argument {arg} must not be a floating point number.")
    x, v1, v2 = (cast(t, dtype) for t in (x, v1[:, None], v2))
    if dtype == torch.bool:
        return (bool(beta) & x) | (bool(alpha) & v1 & v2)
    beta, alpha = cast(beta, dtype), cast(alpha, dtype)
    r, result = step_rounding(x.dtype), x.dtype
    x, v1, v2, beta, alpha = (upcast(t) for t in (x, v1, v2, beta, alpha))
    product = r(r(alpha * v1) * v2)
    return jnp.where(beta == 0, product, r(r(beta * x) + product)).astype(result)


@lowering(aten.addmv.default)
def addmv(x: Any, a: Any, v: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    _rank("addmv", a, 2, "mat")
    _rank("addmv", v, 1, "vec")
    if a.shape[1] != v.shape[0]:
        raise RuntimeError(f"neuron: addmv: size mismatch, got input ({a.shape[0]}), mat ({_shapes(a, v)})")
    _same_dtype("addmv", x, a, v)
    return _scale_add(x, _accumulated(a, v), beta, alpha)


def _check_dot(name: str, a: Any, b: Any) -> None:
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"neuron: {name}: 1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"neuron: dot : expected both vectors to have same dtype, but found {torch_dtype(a)} and {torch_dtype(b)}"
        )
    if a.shape != b.shape:
        raise RuntimeError(
            f"neuron: {name}: inconsistent tensor size, expected tensor [{a.shape[0]}] and src [{b.shape[0]}] "
            "to have the same number of elements, but got different sizes"
        )
    _same_dtype(name, a, b)


@lowering(aten.dot.default)
def dot(a: Any, b: Any) -> Any:
    _check_dot("dot", a, b)
    return matmul(a, b)


@lowering(aten.vdot.default)
def vdot(a: Any, b: Any) -> Any:
    _check_dot("vdot", a, b)
    return matmul(jnp.conj(a), b)


@lowering(aten.trace.default)
def trace(x: Any) -> Any:
    if x.ndim != 2:
        raise RuntimeError(f"neuron: trace: expected a matrix, but got tensor with dim {x.ndim}")
    result = integral_to_long(x, None)
    return cast(jnp.trace(cast(x, accumulate(result))), result)


@lowering(aten.linalg_cross.default)
def cross(a: Any, b: Any, dim: int = -1) -> Any:
    if a.ndim != b.ndim:
        raise RuntimeError(
            f"neuron: linalg.cross: inputs must have the same number of dimensions, got {a.ndim} and {b.ndim}"
        )
    axis = wrap_dim(dim, a.ndim, "linalg.cross")
    if a.shape[axis] != 3 or b.shape[axis] != 3:
        raise RuntimeError(
            f"neuron: linalg.cross: inputs dimension {dim} must have length 3. Got {a.shape[axis]} and {b.shape[axis]}"
        )
    shape = broadcast_shape(a.shape, b.shape)
    _same_dtype("linalg.cross", a, b)
    return jnp.cross(jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape), axis=axis)


@lowering(aten.diag_embed.default)
def diag_embed(x: Any, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Any:
    ndim = x.ndim + 1
    d1, d2 = wrap_dim(dim1, ndim, "diag_embed"), wrap_dim(dim2, ndim, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"neuron: diag_embed: diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = x.shape[-1] + abs(offset)
    eye = jnp.eye(n, n, k=offset, dtype=bool)
    row = jnp.arange(n) if offset >= 0 else jnp.arange(n) + offset  # diagonal element index per row
    values = (
        jnp.take(x, jnp.clip(row, 0, x.shape[-1] - 1), axis=-1)
        if x.shape[-1]
        else jnp.zeros((*x.shape[:-1], n), x.dtype)
    )
    square = jnp.where(eye, values[..., :, None], jnp.zeros((), x.dtype))
    # `square` has the two new dims last (rows, cols); move them to dim1, dim2.
    order = [i for i in range(ndim) if i not in (d1, d2)]
    perm = np.argsort([*order, d1, d2])
    return jnp.transpose(square, perm)


def _sumproduct(a: Any, b: Any, dims: tuple[int, ...], r: Any) -> Any:
    """`(a * b).sum(dims, keepdim=True)` as CPU's sumproduct_pair (a bmm): accumulated in opmath,
    rounded once (`r`) to the dtype."""
    product = a * b
    return r(jnp.sum(product, axis=dims, keepdims=True) if dims else product)


@lowering(aten._trilinear.default)
def trilinear(
    i1: Any, i2: Any, i3: Any, expand1: list, expand2: list, expand3: list, sumdim: list, unroll_dim: int = 1
) -> Any:
    """`nn.functional.bilinear`'s kernel, staged as CPU's: unsqueeze each input at its expand
    dims; sum i1 * i2 over the summed dims i3 lacks, then that times i3 over the rest, each
    stage rounded to the dtype; a summed `unroll_dim` is added up slice by slice."""

    def grown(x: Any, dims: list) -> Any:
        for d in sorted(dims):
            x = jnp.expand_dims(x, d)
        return upcast(x)

    ndim, dtype, r = i1.ndim + len(expand1), i1.dtype, step_rounding(i1.dtype)
    a, b, c = grown(i1, expand1), grown(i2, expand2), grown(i3, expand3)
    summed = [d for d in range(ndim) if d in sumdim and d != unroll_dim]
    out = _sumproduct(a, b, tuple(d for d in summed if d in expand3), r)
    out = _sumproduct(out, c, tuple(d for d in summed if d not in expand3), r)
    if unroll_dim in sumdim:  # output.add_(slice) for each slice in turn, each sum rounded
        slices = jnp.moveaxis(out, unroll_dim, 0)[:, None]
        out = jnp.moveaxis(lax.scan(lambda acc, s: (r(acc + s), None), slices[0], slices[1:])[0], 0, unroll_dim)
    return (jnp.squeeze(out, axis=tuple(sumdim)) if sumdim else out).astype(dtype)


# ---- distances ----------------------------------------------------------------------------


def _differences(x1: Any, x2: Any) -> Any:
    """(..., P, M) and (..., R, M) -> (..., P, R, M), batch dims broadcast."""
    return x1[..., :, None, :] - x2[..., None, :, :]


@lowering(aten._cdist_forward.default, static=("p",))
def cdist(x1: Any, x2: Any, p: float, compute_mode: Any = None) -> Any:
    d = jnp.abs(_differences(x1, x2))
    if p == 0:
        return jnp.sum(d != 0, axis=-1).astype(x1.dtype)
    if p == float("inf"):
        return jnp.max(d, axis=-1, initial=0)
    if p == 1:
        return jnp.sum(d, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(d * d, axis=-1))
    return jnp.sum(d**p, axis=-1) ** (1 / p)


@lowering(aten._cdist_backward.default, static=("p",))
def cdist_backward(grad: Any, x1: Any, x2: Any, p: float, dist: Any) -> Any:
    """d dist / d x1 summed over x2's rows; zero where the distance is zero (PyTorch's convention)."""
    diff = _differences(x1, x2)
    g, r = grad[..., None], dist[..., None]
    zero = jnp.zeros((), x1.dtype)
    if p == 0:
        term = jnp.zeros_like(diff)
    elif p == 1:
        term = jnp.sign(diff) * g
    elif p == float("inf"):
        term = jnp.sign(diff) * g * (jnp.abs(diff) == r)
    elif p < 2:
        ratio = jnp.sign(diff) * jnp.abs(diff) ** (p - 1) / jnp.where(r == 0, 1, r) ** (p - 1)
        term = jnp.where((r == 0) | (diff == 0), zero, ratio * g)
    else:
        term = jnp.where(r == 0, zero, diff * jnp.abs(diff) ** (p - 2) / jnp.where(r == 0, 1, r) ** (p - 1) * g)
    return jnp.sum(term, axis=-2).reshape(x1.shape)


def _pairs(n: int) -> tuple[Any, Any]:
    return np.triu_indices(n, k=1)


@lowering(aten._pdist_forward.default, static=("p",))
def pdist(x: Any, p: float = 2) -> Any:
    """Distances between the rows of (N, M) `x`, pairs i < j in row-major order."""
    return cdist(x, x, p)[_pairs(x.shape[0])]


@lowering(aten._pdist_backward.default, static=("p",))
def pdist_backward(grad: Any, x: Any, p: float, dist: Any) -> Any:
    """Each pair's gradient reaches both its rows: cdist's backward with the symmetric grad."""

    def symmetric(pairs: Any) -> Any:
        upper = jnp.zeros((x.shape[0], x.shape[0]), pairs.dtype).at[_pairs(x.shape[0])].set(pairs)
        return upper + upper.T

    return cdist_backward(symmetric(grad), x, x, p, symmetric(dist))


# ---- factorizations -----------------------------------------------------------------------


def _linalg_input(name: str, a: Any, square: bool = True) -> None:
    """LAPACK-backed ops take float32/float64/complex batches of (square) matrices."""
    dtype = torch_dtype(a)
    if dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"neuron: {name}: Low precision dtypes not supported. Got {dtype}")
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(f"neuron: {name}: Expected a floating point or complex tensor as input. Got {dtype}")
    if a.ndim < 2:
        raise RuntimeError(f"neuron: {name}: The input tensor A must have at least 2 dimensions.")
    if square and a.shape[-1] != a.shape[-2]:
        raise RuntimeError(
            f"neuron: {name}: A must be batches of square matrices, "
            f"but they are {a.shape[-2]} by {a.shape[-1]} matrices"
        )


def _square_input(name: str, a: Any) -> None:
    """PyTorch's squareCheckInputs then checkFloatingOrComplex, in that order and with their
    messages; float16/bfloat16 pass (ops whose CPU kernel lacks them reject them later)."""
    if a.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise RuntimeError(
            f"{name}: A must be batches of square matrices, but they are {a.shape[-2]} by {a.shape[-1]} matrices"
        )
    dtype = torch_dtype(a)
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. Got {scalar_type_name(dtype)}"
        )


def mh(x: Any) -> Any:
    """Conjugate transpose of the last two dims."""
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _int32(x: Any) -> Any:
    return x.astype(jnp.int32)


def _info_from_diagonal(d: Any) -> Any:
    """LAPACK's info: 1 + index of the first zero (or NaN) on the diagonal, 0 if none."""
    bad = (d == 0) | jnp.isnan(d)
    if d.shape[-1] == 0:
        return jnp.zeros(d.shape[:-1], jnp.int32)
    first = jnp.argmax(bad, axis=-1)
    return _int32(jnp.where(jnp.any(bad, axis=-1), first + 1, 0))


def _diagonal(x: Any) -> Any:
    return jnp.diagonal(x, axis1=-2, axis2=-1)


@lowering(aten.linalg_cholesky_ex.default)
def cholesky_ex(a: Any, upper: bool = False, check_errors: bool = False) -> tuple[Any, Any]:
    _linalg_input("linalg.cholesky", a)
    lower = lax_linalg.cholesky(a, symmetrize_input=False)
    info = _info_from_diagonal(_diagonal(lower))
    lower = jnp.tril(lower)
    return (mh(lower) if upper else lower), info


@lowering(aten.cholesky.default)
def cholesky(a: Any, upper: bool = False) -> Any:
    return cholesky_ex(a, upper)[0]


def _lu(a: Any) -> tuple[Any, Any, Any]:
    """(packed LU, 0-based pivots, permutation) with partial pivoting, any m x n."""
    if a.size == 0:
        k = min(a.shape[-2], a.shape[-1])
        perm = jnp.broadcast_to(jnp.arange(a.shape[-2], dtype=jnp.int32), (*a.shape[:-1],))
        return a, jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (*a.shape[:-2], k)), perm
    return lax_linalg.lu(a)


def _lu_solve(lu: Any, perm: Any, b: Any, adjoint: bool = False) -> Any:
    """Solve A X = B (or A^H X = B) from A's packed LU and row permutation (A[perm] = L U)."""
    batch = jnp.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    lu = jnp.broadcast_to(lu, (*batch, *lu.shape[-2:]))
    b = jnp.broadcast_to(b, (*batch, *b.shape[-2:]))
    perm = jnp.broadcast_to(perm, (*batch, perm.shape[-1]))
    if not adjoint:
        x = jnp.take_along_axis(b, perm[..., :, None], axis=-2)
        x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
        return lax_linalg.triangular_solve(lu, x, left_side=True, lower=False)
    x = lax_linalg.triangular_solve(lu, b, left_side=True, lower=False, transpose_a=True, conjugate_a=True)
    x = lax_linalg.triangular_solve(
        lu, x, left_side=True, lower=True, unit_diagonal=True, transpose_a=True, conjugate_a=True
    )
    inverse = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(x, inverse[..., :, None], axis=-2)


@lowering(aten.linalg_lu_factor_ex.default)
def lu_factor_ex(a: Any, pivot: bool = True, check_errors: bool = False) -> tuple[Any, Any, Any]:
    _linalg_input("linalg.lu_factor", a, square=False)
    if not pivot:
        raise RuntimeError("neuron: linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    lu, pivots, _ = _lu(a)
    return lu, _int32(pivots + 1), _info_from_diagonal(_diagonal(lu))


def _permutation_matrix(perm: Any, dtype: Any) -> Any:
    """P with A = P L U for A[perm] = L U: P[perm[i], i] = 1."""
    m = perm.shape[-1]
    return (perm[..., None, :] == jnp.arange(m)[:, None]).astype(dtype)


def _unpack(lu: Any) -> tuple[Any, Any]:
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    return lower, jnp.triu(lu[..., :k, :])


@lowering(aten.linalg_lu.default)
def linalg_lu(a: Any, pivot: bool = True) -> tuple[Any, Any, Any]:
    _linalg_input("linalg.lu", a, square=False)
    if not pivot:
        raise RuntimeError("neuron: linalg.lu: LU without pivoting is not implemented on the CPU")
    lu, _, perm = _lu(a)
    return (_permutation_matrix(perm, a.dtype), *_unpack(lu))


@lowering(aten.lu_unpack.default)
def lu_unpack(lu: Any, pivots: Any, unpack_data: bool = True, unpack_pivots: bool = True) -> tuple[Any, Any, Any]:
    empty = jnp.zeros((0,), lu.dtype)
    lower, upper = _unpack(lu) if unpack_data else (empty, empty)
    if not unpack_pivots:
        return empty, lower, upper
    return _permutation_matrix(_permutation(pivots, lu.shape[-2]), lu.dtype), lower, upper


def _permutation(pivots: Any, m: int) -> Any:
    if pivots.size == 0:
        return jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (*pivots.shape[:-1], m))
    return lax_linalg.lu_pivots_to_permutation(_int32(pivots) - 1, m)


@lowering(aten.linalg_lu_solve.default)
def lu_solve(lu: Any, pivots: Any, b: Any, left: bool = True, adjoint: bool = False) -> Any:
    perm = _permutation(pivots, lu.shape[-1])
    if left:
        return _lu_solve(lu, perm, b, adjoint)
    # X A = B  <=>  A^H X^H = B^H ; X A^H = B  <=>  A X^H = B^H
    return mh(_lu_solve(lu, perm, mh(b), not adjoint))


def _parity(pivots0: Any, dtype: Any) -> Any:
    """+1 or -1: the sign of the row permutation given by 0-based LAPACK pivots."""
    swaps = jnp.sum(pivots0 != jnp.arange(pivots0.shape[-1]), axis=-1)
    return jnp.where(swaps % 2 == 0, 1, -1).astype(dtype)


def _det_lu(a: Any, contiguous: tuple[bool, ...]) -> tuple[Any, Any, Any]:
    """PyTorch factorizes A^T when A is contiguous and real (det(A^T) = det(A)); the backward
    of det/slogdet expects exactly that LU, so follow the same rule."""
    transposed = contiguous[0] and not jnp.iscomplexobj(a)
    return _lu(jnp.swapaxes(a, -1, -2) if transposed else a)


@lowering(aten._linalg_det.default, layout=True)
def det(a: Any, contiguous: tuple[bool, ...] = (True,)) -> tuple[Any, Any, Any]:
    _linalg_input("linalg.det", a)
    lu, pivots, _ = _det_lu(a, contiguous)
    return _parity(pivots, a.dtype) * jnp.prod(_diagonal(lu), axis=-1), lu, _int32(pivots + 1)


@lowering(aten._linalg_slogdet.default, layout=True)
def slogdet(a: Any, contiguous: tuple[bool, ...] = (True,)) -> tuple[Any, Any, Any, Any]:
    _linalg_input("linalg.slogdet", a)
    lu, pivots, _ = _det_lu(a, contiguous)
    diagonal = _diagonal(lu)
    magnitude = jnp.abs(diagonal)
    sign = _parity(pivots, a.dtype) * jnp.prod(diagonal / magnitude.astype(a.dtype), axis=-1)
    return sign, jnp.sum(jnp.log(magnitude), axis=-1), lu, _int32(pivots + 1)


def _is_vector_rhs(a: Any, b: Any) -> bool:
    """PyTorch's rule: B is a (batch of) vector(s) if 1-D or exactly A's batch + one dim."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])


@lowering(aten._linalg_solve_ex.default)
def solve_ex(a: Any, b: Any, left: bool = True, check_errors: bool = False) -> tuple[Any, Any, Any, Any]:
    _linalg_input("linalg.solve", a)
    vector = _is_vector_rhs(a, b)
    rhs = b[..., None] if vector else b
    if rhs.shape[-2 if left else -1] != a.shape[-1]:
        raise RuntimeError(f"neuron: linalg.solve: Incompatible shapes of A and B for the equation: {_shapes(a, b)}")
    lu, pivots, perm = _lu(a)
    if left:
        x = _lu_solve(lu, perm, rhs)
    else:
        x = mh(_lu_solve(lu, perm, mh(rhs), adjoint=True))
    x = x[..., 0] if vector else x
    return x, lu, _int32(pivots + 1), _info_from_diagonal(_diagonal(lu))


@lowering(aten.linalg_inv_ex.default)
def inv_ex(a: Any, check_errors: bool = False) -> tuple[Any, Any]:
    _linalg_input("linalg.inv", a)
    lu, _, perm = _lu(a)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return _lu_solve(lu, perm, eye), _info_from_diagonal(_diagonal(lu))


@lowering(aten.linalg_qr.default)
def qr(a: Any, mode: str = "reduced") -> tuple[Any, Any]:
    _linalg_input("linalg.qr", a, square=False)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(
            f"neuron: linalg.qr: qr received unrecognized mode '{mode}' but expected one of 'reduced', 'complete', 'r'"
        )
    q, r = lax_linalg.qr(a, full_matrices=mode == "complete")
    if mode == "r":
        return jnp.zeros((0,), a.dtype), r
    return q, r


@lowering(aten._linalg_eigh.default)
def eigh(a: Any, uplo: str = "L", compute_v: bool = True) -> tuple[Any, Any]:
    _linalg_input("linalg.eigh", a)
    if uplo not in ("L", "U"):
        raise RuntimeError(f"neuron: linalg.eigh: Expected UPLO argument to be 'L' or 'U', but got {uplo}")
    vectors, values = lax_linalg.eigh(a, lower=uplo == "L", symmetrize_input=False)
    return values, (vectors if compute_v else jnp.zeros((0,), a.dtype))


@lowering(aten._linalg_svd.default)
def svd(
    a: Any, full_matrices: bool = False, compute_uv: bool = True, driver: str | None = None
) -> tuple[Any, Any, Any]:
    _linalg_input("linalg.svd", a, square=False)
    if not compute_uv:
        s = lax_linalg.svd(a, full_matrices=False, compute_uv=False)
        empty = jnp.zeros((0,), a.dtype)
        return empty, s, empty
    u, s, vh = lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=True)
    return u, s, vh


@lowering(aten.linalg_eig.default)
def eig(a: Any) -> tuple[Any, Any]:
    """LAPACK's geev, as PyTorch CPU calls it (XLA has it on the CPU platform only)."""
    _linalg_input("linalg.eig", a)
    values, vectors = jnp.linalg.eig(a)
    return values, vectors


@lowering(aten._linalg_eigvals.default)
def eigvals(a: Any) -> Any:
    _linalg_input("linalg.eigvals", a)
    return jnp.linalg.eigvals(a)


@lowering(aten.linalg_matrix_exp.default)
def matrix_exp(a: Any) -> Any:
    """XLA's Pade expm; half types computed in float32 (PyTorch CPU takes them too)."""
    if a.dtype in (jnp.float16, jnp.bfloat16):
        return matrix_exp(a.astype(jnp.float32)).astype(a.dtype)
    _linalg_input("linalg.matrix_exp", a)
    return jax.scipy.linalg.expm(a)


# ---- Householder form: geqrf, householder_product (orgqr), ormqr ---------------------------


@lowering(aten.geqrf.default)
def geqrf(a: Any) -> tuple[Any, Any]:
    """QR in LAPACK's compact form: R above the diagonal, the reflectors below, and their scales."""
    _linalg_input("geqrf", a, square=False)
    return jax_linalg.geqrf(a)


@lowering(aten.linalg_householder_product.default, aten.orgqr.default)
def householder_product(a: Any, tau: Any) -> Any:
    _linalg_input("torch.linalg.householder_product", a, square=False)
    if a.shape[-2] < a.shape[-1]:
        raise RuntimeError(
            "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to input.shape[-1]"
        )
    if tau.shape[-1] > a.shape[-1]:
        raise RuntimeError(
            "torch.linalg.householder_product: input.shape[-1] must be greater than or equal to tau.shape[-1]"
        )
    return lax_linalg.householder_product(a, tau)


@lowering(aten.ormqr.default)
def ormqr(a: Any, tau: Any, other: Any, left: bool = True, transpose: bool = False) -> Any:
    if a.ndim < 2 or other.ndim < 2:
        raise RuntimeError(f"torch.ormqr: {'input' if a.ndim < 2 else 'other'} must have at least 2 dimensions.")
    side = -2 if left else -1
    if other.shape[side] != a.shape[-2]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.shape[-1] != min(other.shape[-2], a.shape[-1]):
        raise RuntimeError("torch.ormqr: tau.shape[-1] must be equal to min(other.shape[-2], input.shape[-1])")
    return lax_linalg.ormqr(a, tau, other, left=left, transpose=transpose)


def _triangular(a: Any, b: Any, *, upper: bool, left: bool, unit: bool, transpose: bool = False) -> Any:
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = jnp.broadcast_to(a, (*batch, *a.shape[-2:]))
    b = jnp.broadcast_to(b, (*batch, *b.shape[-2:]))
    return lax_linalg.triangular_solve(a, b, left_side=left, lower=not upper, transpose_a=transpose, unit_diagonal=unit)


@lowering(aten.linalg_solve_triangular.default)
def solve_triangular(a: Any, b: Any, upper: bool, left: bool = True, unitriangular: bool = False) -> Any:
    _linalg_input("linalg.solve_triangular", a)
    return _triangular(a, b, upper=upper, left=left, unit=unitriangular)


@lowering(aten.triangular_solve.default)
def triangular_solve(
    b: Any, a: Any, upper: bool = True, transpose: bool = False, unitriangular: bool = False
) -> tuple[Any, Any]:
    _linalg_input("triangular_solve", a)
    x = _triangular(a, b, upper=upper, left=True, unit=unitriangular, transpose=transpose)
    return x, jnp.broadcast_to(a, (*x.shape[:-2], *a.shape[-2:]))


@lowering(aten._cholesky_solve_helper.default)
def cholesky_solve_helper(b: Any, factor: Any, upper: bool) -> Any:
    _linalg_input("cholesky_solve", factor)
    lower = mh(factor) if upper else factor
    y = _triangular(lower, b, upper=False, left=True, unit=False)
    return _triangular(mh(lower), y, upper=True, left=True, unit=False)


@lowering(aten.cholesky_inverse.default)
def cholesky_inverse(factor: Any, upper: bool = False) -> Any:
    _linalg_input("cholesky_inverse", factor)
    eye = jnp.broadcast_to(jnp.eye(factor.shape[-1], dtype=factor.dtype), factor.shape)
    return cholesky_solve_helper(eye, factor, upper)


def _pinv(a: Any, atol: Any, rtol: Any, hermitian: bool) -> Any:
    m, n = a.shape[-2:]
    if atol is None and rtol is None:
        rtol = jnp.asarray(np.finfo(np.dtype(a.dtype)).eps * max(m, n))
    if hermitian:
        s, u = lax_linalg.eigh(a, symmetrize_input=False)[::-1]
        magnitude = jnp.abs(s)
        vh = mh(u) * jnp.where(s < 0, -1, 1).astype(a.dtype)[..., :, None]
        s = magnitude
    else:
        u, s, vh = lax_linalg.svd(a, full_matrices=False, compute_uv=True)
    largest = jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    tol = jnp.zeros_like(largest)
    if atol is not None:
        tol = jnp.maximum(tol, jnp.asarray(atol)[..., None])
    if rtol is not None:
        tol = jnp.maximum(tol, jnp.asarray(rtol)[..., None] * largest)
    inverse = jnp.where(s > tol, 1 / jnp.where(s > tol, s, 1), 0).astype(a.dtype)
    return jnp.matmul(mh(vh) * inverse[..., None, :], mh(u), precision=HIGHEST)


@lowering(aten.linalg_pinv.atol_rtol_tensor)
def pinv(a: Any, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> Any:
    _linalg_input("linalg.pinv", a, square=hermitian)
    return _pinv(a, atol, rtol, hermitian)


# ---- least squares ------------------------------------------------------------------------

_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")
_NOT_FULL_RANK = (
    "The least squares solution could not be computed because the input matrix does not have full rank "
    "(error code: {})."
)


def _lstsq_checks(a: Any, b: Any, driver: str | None) -> tuple[bool, str]:
    """PyTorch CPU's argument checks, in its order and with its messages; (vector case, driver)."""
    if a.ndim < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if b.ndim < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if a.dtype != b.dtype:
        raise RuntimeError(
            "torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's dtype "
            f"{scalar_type_name(torch_dtype(a))} and other's dtype {scalar_type_name(torch_dtype(b))}"
        )
    if not 0 <= a.ndim - b.ndim <= 1:
        raise RuntimeError(
            "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
            "(input.dim() - other.dim()) <= 1"
        )
    vector = _is_vector_rhs(a, b)
    if b.shape[-1 if vector else -2] != a.shape[-2]:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size({-1 if vector else -2})")
    rhs_shape = (*b.shape, 1) if vector else b.shape
    broadcast_shape(a.shape[:-2], rhs_shape[: a.ndim - 2])  # CPU's batch broadcast, quirk included
    driver = "gelsy" if driver is None else driver
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    dtype = torch_dtype(a)
    if dtype not in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        raise RuntimeError("This function doesn't handle types other than float and double")
    return vector, driver


def _lstsq_svd(a: Any, rcond: Any, driver: str) -> tuple[Any, Any, Any, Any]:
    """(u, s, vh, rank) of A with LAPACK's rank rule: singular values at or below rcond * s_max are
    zero; rcond defaults to eps * max(m, n), and a negative one means eps (gelsd/gelss) or no
    cut-off but zero (gelsy)."""
    m, n = a.shape[-2:]
    eps = float(np.finfo(np.dtype(a.dtype)).eps)
    u, s, vh = lax_linalg.svd(a, full_matrices=False, compute_uv=True)
    largest = jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    if rcond is None:
        rcond = eps * max(m, n)
    else:
        rcond = jnp.asarray(rcond, s.dtype)
        rcond = jnp.where(rcond < 0, 0.0 if driver == "gelsy" else eps, rcond)
    kept = s > rcond * largest
    return u, s, vh, jnp.sum(kept, axis=-1).astype(jnp.int64)


def _lstsq_size(a: Any, b: Any, rcond: Any = None, driver: str | None = None) -> Any:
    """gelsd/gelss return residuals only where every matrix of the batch has full column rank
    (m > n): 1 if so, 0 if not (the output's shape depends on the data, as on CPU)."""
    _, driver = _lstsq_checks(a, b, driver)
    m, n = a.shape[-2:]
    if driver not in ("gelsd", "gelss") or m <= n or a.size == 0:
        return None
    rank = _lstsq_svd(a, rcond, driver)[3]
    return jnp.all(rank == n).astype(jnp.int64)


def _gels_info_check(r: Any) -> None:
    """LAPACK gels fails (info = 1 + index of the first exactly zero diagonal element of the
    triangular factor) where A is exactly rank deficient; CPU raises it as linalg.lstsq's error.
    One check per possible code, so the message carries both the batch element and the code."""
    d = _diagonal(r)
    zero = d == 0
    info = jnp.where(jnp.any(zero, axis=-1), jnp.argmax(zero, axis=-1) + 1, 0).reshape(-1)
    if info.size == 0:
        return
    prefix = "torch.linalg.lstsq: (Batch element {}): " if info.size > 1 else "torch.linalg.lstsq: "
    index = jnp.arange(info.size)
    first = jnp.argmax(info != 0)
    for code in range(1, d.shape[-1] + 1):
        check(~((index == first) & (info == code)), RuntimeError, prefix + _NOT_FULL_RANK.format(code), index)


def _gelsy(a: Any, rhs: Any, rcond: Any) -> tuple[Any, Any]:
    """LAPACK gelsy: QR with column pivoting (geqp3, the LAPACK call PyTorch CPU makes too), the
    rank as the largest r whose leading r x r block R11 has smin >= rcond * smax (LAPACK estimates
    these incrementally; here they are the blocks' exact singular values), then the minimum-norm
    solution of [R11 R12] P^T x = (Q^H B)[:r] (LAPACK's complete orthogonal factorization)."""
    m, n = a.shape[-2:]
    kmin = min(m, n)
    eps = float(np.finfo(np.dtype(a.dtype)).eps)
    q, r, perm = lax_linalg.qr(a, pivoting=True, full_matrices=False)
    real = jnp.finfo(a.dtype).dtype
    rcond = eps * max(m, n) if rcond is None else jnp.maximum(jnp.asarray(rcond, real), 0.0)
    ok = []
    for size in range(1, kmin + 1):
        block = lax_linalg.svd(r[..., :size, :size], full_matrices=False, compute_uv=False)
        ok.append(block[..., -1] >= rcond * block[..., 0])
    ok = jnp.stack(ok, axis=-1) & (jnp.abs(r[..., :1, 0]) > 0)
    rank = jnp.sum(jnp.cumprod(ok, axis=-1), axis=-1).astype(jnp.int64)
    rows = jnp.arange(kmin)[:, None] < rank[..., None, None]
    trapezoid = jnp.where(rows, r, 0)
    u, s, vh = lax_linalg.svd(trapezoid, full_matrices=False, compute_uv=True)
    kept = jnp.arange(kmin) < rank[..., None]
    inverse = jnp.where(kept, 1 / jnp.where(kept, s, 1), 0).astype(a.dtype)
    c = jnp.where(rows, jnp.matmul(mh(q), rhs, precision=HIGHEST), 0)
    y = jnp.matmul(mh(vh), jnp.matmul(mh(u), c, precision=HIGHEST) * inverse[..., :, None], precision=HIGHEST)
    inverse_perm = jnp.argsort(perm, axis=-1)
    y = jnp.broadcast_to(y, (*jnp.broadcast_shapes(y.shape[:-2], inverse_perm.shape[:-1]), *y.shape[-2:]))
    inverse_perm = jnp.broadcast_to(inverse_perm, (*y.shape[:-2], n))
    return jnp.take_along_axis(y, inverse_perm[..., :, None], axis=-2), rank


@lowering(aten.linalg_lstsq.default, size=_lstsq_size)
def lstsq(a: Any, b: Any, rcond: Any = None, driver: str | None = None, size: Any = None) -> tuple[Any, ...]:
    """torch.linalg.lstsq, PyTorch CPU's outputs for each LAPACK driver:

    * gels (QR, or LQ for m < n; assumes full rank): Householder QR from XLA. An exactly zero
      diagonal element of R raises CPU's error; residuals (sum of squares of rows n: of Q^H B, as
      LAPACK leaves them) for m > n; rank and singular values empty.
    * gelsy (QR with column pivoting, as on CPU): the rank from the leading blocks of the pivoted
      R (exact singular values where LAPACK estimates them incrementally), then the minimum-norm
      solution of the rank-truncated problem. Agrees with CPU within float tolerance where the
      rank is clear; near the cut-off the two rules can count a different rank. No residuals or
      singular values.
    * gelsd/gelss (SVD): truncated-SVD minimum-norm solution, rank and singular values; residuals
      (|B - A X|^2 summed over rows) for m > n only when every matrix of the batch has rank n.

    Rank and singular values have the input's batch shape, the solution and residuals the
    broadcast batch shape, as on CPU."""
    vector, driver = _lstsq_checks(a, b, driver)
    m, n = a.shape[-2:]
    rhs = b[..., None] if vector else b
    k = rhs.shape[-1]
    batch = broadcast_shape(a.shape[:-2], rhs.shape[:-2])
    real = jnp.finfo(a.dtype).dtype
    empty_real = jnp.zeros((0,), real)
    empty_rank = jnp.zeros((0,), jnp.int64)
    a_full = jnp.broadcast_to(a, (*batch, m, n))
    rhs = jnp.broadcast_to(rhs, (*batch, m, k))
    residuals = empty_real
    if driver == "gels":
        if min(m, n) == 0:
            x = jnp.zeros((*batch, n, k), a.dtype)
            if m > n:
                residuals = jnp.zeros((*batch, k), real)
        elif m >= n:
            q, r = lax_linalg.qr(a_full, full_matrices=True)
            _gels_info_check(r[..., :n, :])
            c = jnp.matmul(mh(q), rhs, precision=HIGHEST)
            x = lax_linalg.triangular_solve(r[..., :n, :], c[..., :n, :], left_side=True, lower=False)
            if m > n:
                residuals = jnp.sum(jnp.abs(c[..., n:, :]) ** 2, axis=-2)
        else:  # A = L Q^H from A^H = Q R: the minimum-norm solution Q L^{-1} B
            q, r = lax_linalg.qr(mh(a_full), full_matrices=False)
            _gels_info_check(r)
            y = lax_linalg.triangular_solve(r, rhs, left_side=True, lower=False, transpose_a=True, conjugate_a=True)
            x = jnp.matmul(q, y, precision=HIGHEST)
        rank, singular = empty_rank, empty_real
    else:
        if min(m, n) == 0:
            rank = jnp.zeros(a.shape[:-2], jnp.int64)
            s = jnp.zeros((*a.shape[:-2], 0), real)
            x = jnp.zeros((*batch, n, k), a.dtype)
            if m > n and driver != "gelsy":
                residuals = jnp.sum(jnp.abs(rhs) ** 2, axis=-2)
        elif driver == "gelsy":
            x, rank = _gelsy(a, rhs, rcond)
            s = empty_real
        else:
            u, s, vh, rank = _lstsq_svd(a, rcond, driver)
            cut = jnp.take_along_axis(s, jnp.clip(rank - 1, 0)[..., None], axis=-1)
            kept = (s >= cut) & (rank[..., None] > 0)
            inverse = jnp.where(kept, 1 / jnp.where(kept, s, 1), 0).astype(a.dtype)
            c = jnp.matmul(mh(u), rhs, precision=HIGHEST) * inverse[..., :, None]
            x = jnp.matmul(mh(vh), c, precision=HIGHEST)
            if m > n and driver != "gelsy" and size:
                fit = jnp.matmul(a_full, x, precision=HIGHEST)
                residuals = jnp.sum(jnp.abs(rhs - fit) ** 2, axis=-2)
        singular = s if driver != "gelsy" else empty_real
    if vector:
        x = x[..., 0]
    return x, residuals.astype(real), rank, singular.astype(real)


# ---- symmetric indefinite LDL^T: Bunch-Kaufman (LAPACK sytrf/hetrf, sytrs/hetrs) -----------

# LAPACK's alpha for Bunch-Kaufman partial pivoting: the 1x1/2x2 choice that bounds element growth
_BUNCH_KAUFMAN_ALPHA = (1 + 17**0.5) / 8


def _cabs1(x: Any) -> Any:
    """LAPACK's magnitude for pivot search (i?amax, CABS1): |re| + |im| for complex."""
    return jnp.abs(x.real) + jnp.abs(x.imag) if jnp.iscomplexobj(x) else jnp.abs(x)


def _fortran_max(a: Any, b: Any) -> Any:
    """Fortran's MAX(a, b) as LAPACK is compiled (maxsd): `b` unless a > b, so a NaN in `a`
    gives `b`. CPU's info for a NaN pivot (a zero column or not) follows from it."""
    return jnp.where(a > b, a, b)


def _ldl_kernel(kernel: str, a: Any) -> None:
    """LAPACK has no half-precision sytrf/sytrs: CPU's kernel dispatch fails for them (only when
    there is something to compute; empty inputs return before the kernel). `_square_input`
    comes first."""
    dtype = torch_dtype(a)
    if dtype in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_type_name(dtype)}'")


def _sytf2(a: Any, hermitian: bool) -> tuple[Any, Any, Any]:
    """One matrix's Bunch-Kaufman LDL^T, LAPACK's unblocked ?sytf2/?hetf2 with uplo='L' step by
    step: the same pivot tests (alpha, |re| + |im| magnitudes, the first largest element, NaN
    as MKL's pivot search sees it), the same 1x1/2x2 updates and scalings in the same order, and
    LAPACK's output: L below the diagonal, D on it (a 2x2 block's off-diagonal at [k+1, k]),
    1-based `ipiv` (-p on both rows of a 2x2 block), info = first zero pivot column.

    A `fori_loop` over the n columns (compiles in ~1.5 s whatever n; unrolling the loop took
    10 s at n = 16 and 67 s at n = 64), each step on the whole matrix with masks since the step
    is dynamic: a step that is the second column of a 2x2 block changes nothing. The trailing
    block is kept whole (mirrored from the lower triangle after each update, as LAPACK reads
    only that), so LAPACK's interchange of rows/columns kk and kp in A[k:, k:] is a symmetric
    permutation of it; the finished columns of L are never permuted (L = P1 L1 P2 L2 ...)."""
    n = a.shape[-1]
    complex_ = jnp.iscomplexobj(a)
    hermitian = hermitian and complex_
    index = jnp.arange(n)
    rows, cols = index[:, None], index[None, :]

    def mirrored(x: Any) -> Any:
        upper = jnp.swapaxes(x, -1, -2)
        return jnp.where(rows >= cols, x, jnp.conj(upper) if hermitian else upper)

    def real_diagonal(x: Any) -> Any:  # ?hetf2 keeps D's diagonal (and the trailing one) real
        return jnp.where(rows == cols, x.real.astype(x.dtype), x) if hermitian else x

    def diagonal_magnitude(x: Any) -> Any:
        return jnp.abs(x.real) if hermitian else _cabs1(x)

    def step(k: Any, state: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
        a, ipiv, info, second = state
        below = index > k
        column = jnp.where(below, _cabs1(a[:, k]), -jnp.inf)
        imax = jnp.argmax(column)  # the first largest, or the first NaN (as MKL's i?amax)
        colmax = jnp.where(k < n - 1, column[imax], 0)
        absakk = diagonal_magnitude(a[k, k])
        zero = _fortran_max(absakk, colmax) == 0
        if complex_:  # MKL's complex routines also stop at a NaN pivot (LAPACK's DISNAN), its real ones do not
            zero = zero | jnp.isnan(absakk)
        row = _cabs1(a[imax])
        rowmax = jnp.max(jnp.where((index >= k) & (index < imax), row, -jnp.inf))
        rest = jnp.max(jnp.where(index > imax, row, -jnp.inf))
        rowmax = jnp.where(imax < n - 1, _fortran_max(rowmax, rest), rowmax)
        alpha = _BUNCH_KAUFMAN_ALPHA
        keep = zero | (absakk >= alpha * colmax) | (absakk >= alpha * colmax * (colmax / rowmax))
        two = ~keep & ~(diagonal_magnitude(a[imax, imax]) >= alpha * rowmax)
        kp = jnp.where(keep, k, imax)
        kk = k + two
        swap = index.at[kk].set(kp).at[kp].set(kk)
        a = jnp.where((rows >= k) & (cols >= k), a[swap][:, swap], a)

        # 1x1 pivot: A -= w (1/d) w^T (?syr/?her: x[i] * ((-1/d) * x[j]), columns where x[j] == 0
        # skipped), then L = w / d. Masks, not zeros, keep the rest: 0 * inf would spread NaN
        # where LAPACK never computes.
        w = a[:, k]
        if hermitian:
            r = 1 / a[k, k].real
            one = real_diagonal(a + w[:, None] * ((-r) * jnp.conj(w))[None, :])
        else:
            r = 1 / a[k, k]
            one = a + w[:, None] * ((-r) * w)[None, :]
        one = mirrored(jnp.where(below[:, None] & below[None, :] & (w != 0)[None, :], one, a))
        one = jnp.where((cols == k) & below[:, None], (w * r)[:, None], one)

        # 2x2 pivot: LAPACK's explicit inverse of the block, row by row
        k1 = jnp.minimum(k + 1, n - 1)
        below = index > k + 1
        trailing = below[:, None] & below[None, :]
        wk, wk1 = a[:, k], a[:, k1]
        if hermitian:
            d21 = a[k1, k]
            d = jnp.hypot(d21.real, d21.imag)
            d11, d22 = a[k1, k1].real / d, a[k, k].real / d
            t = 1 / (d11 * d22 - 1)
            d21 = d21 / d
            d = t / d
            lk, lk1 = d * (d11 * wk - d21 * wk1), d * (d22 * wk1 - jnp.conj(d21) * wk)
            block = a - wk[:, None] * jnp.conj(lk)[None, :] - wk1[:, None] * jnp.conj(lk1)[None, :]
            block = real_diagonal(block)
        else:
            d21 = a[k1, k]
            d11, d22 = a[k1, k1] / d21, a[k, k] / d21
            t = 1 / (d11 * d22 - 1)
            d21 = t / d21
            lk, lk1 = d21 * (d11 * wk - wk1), d21 * (d22 * wk1 - wk)
            block = a - wk[:, None] * lk[None, :] - wk1[:, None] * lk1[None, :]
        block = jnp.where(trailing, mirrored(block), a)
        block = jnp.where((cols == k) & below[:, None], lk[:, None], block)
        block = jnp.where((cols == k1) & below[:, None], lk1[:, None], block)

        updated = jnp.where(zero, a, jnp.where(two, block, one))
        code = jnp.where(two, -(kp + 1), kp + 1).astype(jnp.int32)
        pivots = jnp.where((index == k) | ((index == k + 1) & two), code, ipiv)
        info = jnp.where(~second & zero & (info == 0), k + 1, info).astype(jnp.int32)
        return (
            jnp.where(second, state[0], updated),
            jnp.where(second, ipiv, pivots),
            info,
            ~second & two,
        )

    start = (real_diagonal(mirrored(a)), jnp.zeros(n, jnp.int32), jnp.int32(0), jnp.bool_(False))
    a, ipiv, info, _ = lax.fori_loop(0, n, step, start)
    return jnp.tril(a), ipiv, info


def _ldl_blocks(ipiv: Any) -> tuple[Any, Any]:
    """Per row: does a 2x2 block start here, is it a 2x2 block's second row (LAPACK steps over
    `ipiv` from the first row, two rows at a negative entry)."""

    def scan(second: Any, negative: Any) -> tuple[Any, tuple[Any, Any]]:
        first = negative & ~second
        return first, (first, second)

    return lax.scan(scan, jnp.bool_(False), ipiv < 0)[1]


def _sytrs(ld: Any, ipiv: Any, b: Any, hermitian: bool) -> Any:
    """One system's solve from LAPACK's LDL^T, as ?sytrs/?hetrs (uplo='L'): forward over the
    blocks (interchange, eliminate with L's columns, divide by D's block with LAPACK's formulas),
    then backward (subtract L^T's products, interchange back)."""
    n = ld.shape[-1]
    hermitian = hermitian and jnp.iscomplexobj(ld)
    conj = jnp.conj if hermitian else (lambda x: x)
    index = jnp.arange(n)
    ipiv = ipiv.astype(jnp.int64)
    first, second = _ldl_blocks(ipiv)

    def swapped(x: Any, i: Any, j: Any) -> Any:
        return x[index.at[i].set(j).at[j].set(i)]

    def eliminated(y: Any, rows: Any, column: Any, j: Any) -> Any:
        """y[rows] -= column[rows] y[j] as ?ger/?geru: only the rows below, columns where y[j] != 0."""
        return jnp.where(rows[:, None] & (y[j] != 0)[None, :], y - column[:, None] * y[j][None, :], y)

    def dot(column: Any, rows: Any, y: Any) -> Any:
        """column[rows]^T y[rows] (conjugated for hetrs), as ?gemv on the rows below."""
        return jnp.sum(jnp.where(rows[:, None], conj(column)[:, None] * y, 0), axis=0)

    def forward(k: Any, x: Any) -> Any:
        two, k1 = first[k], jnp.minimum(k + 1, n - 1)
        y = swapped(x, k + two, jnp.abs(ipiv[k]) - 1)
        y = eliminated(y, index > k + two, ld[:, k], k)
        y = eliminated(y, two & (index > k + 1), ld[:, k1], k1)
        one = y.at[k].multiply(1 / (ld[k, k].real if hermitian else ld[k, k]))
        akm1k = ld[k1, k]
        akm1, ak = ld[k, k] / conj(akm1k), ld[k1, k1] / akm1k
        denom = akm1 * ak - 1
        bkm1, bk = y[k] / conj(akm1k), y[k1] / akm1k
        block = y.at[k].set((ak * bkm1 - bk) / denom).at[k1].set((akm1 * bk - bkm1) / denom)
        return jnp.where(second[k], x, jnp.where(two, block, one))

    def backward(i: Any, x: Any) -> Any:
        k = n - 1 - i
        km1 = jnp.maximum(k - 1, 0)
        y = x.at[k].add(-dot(ld[:, k], index > k, x))
        y = y.at[km1].add(-dot(ld[:, km1], second[k] & (index > k), x))
        return jnp.where(first[k], x, swapped(y, k, jnp.abs(ipiv[k]) - 1))

    return lax.fori_loop(0, n, backward, lax.fori_loop(0, n, forward, b))


@lowering(aten.linalg_ldl_factor_ex.default)
def ldl_factor_ex(a: Any, hermitian: bool = False, check_errors: bool = False) -> tuple[Any, Any, Any]:
    """torch.linalg.ldl_factor(_ex): LAPACK's sytrf/hetrf result (CPU calls MKL's), computed by
    the unblocked algorithm `_sytf2`. sytrf runs blocks of 64 columns (dlasyf) above n = 64:
    the same pivot rule on the same values up to rounding, so pivots agree there too unless a
    pivot test is within rounding of its threshold (checked against MKL up to n = 200).
    `ldl_factor` is ATen's composite: this, then its info check on the host."""
    _square_input("torch.linalg.ldl_factor_ex", a)
    if a.size == 0:
        return a, jnp.zeros(a.shape[:-1], jnp.int32), jnp.zeros(a.shape[:-2], jnp.int32)
    _ldl_kernel("ldl_factor_kernel_cpu", a)
    n = a.shape[-1]
    ld, ipiv, info = jax.vmap(lambda m: _sytf2(m, hermitian))(a.reshape(-1, n, n))
    info = info.reshape(a.shape[:-2])
    if check_errors:  # ATen's _linalg_check_errors knows no sytrf code: an internal assert on CPU
        check(info == 0, RuntimeError, "torch.linalg.ldl_factor_ex: Unknown error code: {}.", info)
    return ld.reshape(a.shape), ipiv.reshape(a.shape[:-1]), info


@lowering(aten.linalg_ldl_solve.default)
def ldl_solve(ld: Any, pivots: Any, b: Any, hermitian: bool = False) -> Any:
    """torch.linalg.ldl_solve: LAPACK's sytrs/hetrs (`_sytrs`) per matrix, after CPU's checks in
    its order, B's batch broadcast with LD's. CPU's kernel walks B's batch with LD's own batch
    stride, so an LD batch smaller than B's (other than none) reads past LD there; here LD and
    pivots are broadcast."""
    _square_input("torch.linalg.ldl_solve", ld)
    if b.dtype != ld.dtype:
        raise RuntimeError(
            f"Expected b and A to have the same dtype, but found b of type {scalar_type_name(torch_dtype(b))} "
            f"and A of type {scalar_type_name(torch_dtype(ld))} instead."
        )
    n = ld.shape[-1]
    rows = b.shape[wrap_dim(-2, b.ndim)]
    if rows != n:
        raise RuntimeError(
            f"Incompatible matrix sizes for torch.linalg.ldl_solve: each A matrix is {n} by {n} but each b matrix "
            f"is {rows} by {b.shape[-1]}"
        )
    if pivots.shape != ld.shape[:-1]:
        raise RuntimeError(
            "torch.linalg.ldl_solve: Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots with "
            f"shape {list(pivots.shape)} instead"
        )
    pivot_dtype = torch_dtype(pivots)
    if pivot_dtype.is_floating_point or pivot_dtype.is_complex or pivot_dtype == torch.bool:
        raise RuntimeError(
            f"torch.linalg.ldl_solve: Expected pivots to be integers. Got {scalar_type_name(pivot_dtype)}"
        )
    batch = broadcast_shape(b.shape[:-2], ld.shape[:-2])
    b = jnp.broadcast_to(b, (*batch, *b.shape[-2:]))
    if ld.size == 0:
        return b
    _ldl_kernel("ldl_solve_kernel_cpu", ld)
    magnitude = jnp.abs(pivots.astype(jnp.int64))
    hint = "Did you properly pass the result of ldl_factor?"
    check(magnitude >= 1, RuntimeError, f"Pivots given to ldl_solve must all satisfy |pivot| >= 1. {hint}")
    check(magnitude <= n, RuntimeError, f"Pivots given to ldl_solve must all satisfy |pivot| <= LD.size(-2). {hint}")
    count = math.prod(batch)  # not -1: B may have no columns
    ld = jnp.broadcast_to(ld, (*batch, n, n)).reshape(count, n, n)
    pivots = jnp.broadcast_to(pivots, (*batch, n)).reshape(count, n)
    x = jax.vmap(lambda m, p, y: _sytrs(m, p, y, hermitian))(ld, pivots, b.reshape(count, *b.shape[-2:]))
    return x.reshape(b.shape)
