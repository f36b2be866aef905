"""Shape and layout ops that compute new data: cat/stack, flip/roll, padding (+ backward),
tril/triu, repeat/repeat_interleave, and the `*_copy` forms of view ops.

A `*_copy` op (what compile graphs and functionalization use) is its view op made dense: the
view's geometry is computed by PyTorch on a meta tensor and read out of the input's row-major
elements (`view_geometry` + `read_view`); the `*_scatter` ops in indexing.py write through the
same geometry. All shapes are static.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from . import check, lowering
from ._common import fail_unless, wrap_dim
from ._dtypes import cast, jax_dtype, promote, torch_dtype
from .geometry import Geometry, read, write

aten = torch.ops.aten


# ---- views made dense -------------------------------------------------------------------


def view_geometry(view: Any, shape: Sequence[int], *args: Any) -> Geometry | list[Geometry]:
    """Where `view(x, *args)` sits in a contiguous `x` of `shape` (one Geometry per output)."""
    params = view._schema.arguments[1:]
    positional = [v for p, v in zip(params, args) if not p.kwarg_only]
    keywords = {p.name: v for p, v in zip(params, args) if p.kwarg_only}
    result = view(torch.empty(tuple(shape), device="meta"), *positional, **keywords)
    if isinstance(result, torch.Tensor):
        return Geometry(tuple(result.shape), tuple(result.stride()), result.storage_offset())
    return [Geometry(tuple(r.shape), tuple(r.stride()), r.storage_offset()) for r in result]


def check_in_bounds(geometry: Geometry, x: Any) -> None:
    """A view must lie within the elements of the contiguous `x` it is read from or written to:
    only as_strided's can fall outside, where PyTorch refuses the geometry (setStorage)."""
    if 0 in geometry.shape:
        return
    itemsize = jnp.dtype(x.dtype).itemsize
    last = geometry.offset + sum((n - 1) * stride for n, stride in zip(geometry.shape, geometry.strides))
    needed, available = (last + 1) * itemsize, x.size * itemsize
    if needed > available:
        raise RuntimeError(
            f"setStorage: sizes {list(geometry.shape)}, strides {list(geometry.strides)}, storage offset "
            f"{geometry.offset}, and itemsize {itemsize} requiring a storage size of {needed} are out of bounds for "
            f"storage of size {available}"
        )


def read_view(x: Any, geometry: Geometry) -> Any:
    return read(x.reshape(-1), geometry)


def write_view(x: Any, geometry: Geometry, value: Any) -> Any:
    return write(x.reshape(-1), geometry, value).reshape(x.shape)


def _copy_of(view: Any) -> Callable[..., Any]:
    def lowered(self: Any, *args: Any) -> Any:
        geometry = view_geometry(view, self.shape, *args)
        if isinstance(geometry, list):
            return [read_view(self, g) for g in geometry]
        check_in_bounds(geometry, self)
        return read_view(self, geometry)

    return lowered


_COPIES = (
    "alias",
    "as_strided",
    "detach",
    "diagonal",
    "expand",
    "narrow",
    "permute",
    "select",
    "slice",
    "split",
    "split_with_sizes",
    "squeeze",
    "t",
    "transpose",
    "unbind",
    "unfold",
    "unsqueeze",
    "view",
    "_reshape_alias",
)
for _name in _COPIES:
    _packet = getattr(aten, f"{_name}_copy", None)
    if _packet is None:
        continue
    for _overload in _packet.overloads():
        _view = getattr(getattr(aten, _name), _overload, None)
        _copy = getattr(_packet, _overload)
        if _view is not None and not any(a.is_out for a in _copy._schema.arguments):
            lowering(_copy)(_copy_of(_view))


@lowering(aten.narrow_copy.default)
def narrow_copy(self: Any, dim: int, start: int, length: int) -> Any:
    """narrow's copy, with the checks of CPU's own kernel (narrow_copy_dense_cpu_out), which
    differ from narrow's: a dim past the end fails a bare TORCH_CHECK, and `start + length` is
    checked after wrapping `start`."""
    if self.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if dim < 0:
        dim = wrap_dim(dim, self.ndim)
    elif dim >= self.ndim:
        raise RuntimeError(
            "Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.  (Could this error "
            "message be improved?  If so, please report an enhancement request to PyTorch.)"
        )
    size = self.shape[dim]
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
    start = start + size if start < 0 else start
    if length < 0 or start > size - length:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return _copy_of(aten.narrow.default)(self, dim, start, length)


@lowering(aten.view_copy.dtype)
def view_copy_dtype(self: Any, dtype: torch.dtype) -> Any:
    target = jax_dtype(dtype)
    source = self.astype(jnp.uint8) if self.dtype == jnp.bool_ else self
    wide, narrow = source.dtype.itemsize, jnp.dtype(target).itemsize
    if target == jnp.bool_:
        return view_copy_dtype(self, torch.uint8) != 0
    if wide == narrow:
        return lax.bitcast_convert_type(source, target)
    if wide > narrow:
        out = lax.bitcast_convert_type(source, target)
        return out.reshape(*self.shape[:-1], -1)
    if self.ndim == 0 or self.shape[-1] % (narrow // wide):
        raise RuntimeError(
            f"self.size(-1) must be divisible by {narrow // wide} to view {torch_dtype(self)} as {dtype} "
            "(different element sizes)"
        )
    return lax.bitcast_convert_type(source.reshape(*self.shape[:-1], -1, narrow // wide), target)


# ---- joining ----------------------------------------------------------------------------


def _joined(name: str, tensors: Sequence[Any]) -> tuple[list, Any]:
    if not tensors:
        raise RuntimeError(f"torch.{name}(): expected a non-empty list of Tensors")
    return list(tensors), jax_dtype(promote(*tensors)[1])


@lowering(aten.cat.default)
def cat(tensors: list, dim: int = 0) -> Any:
    tensors, dtype = _joined("cat", tensors)
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]  # legacy: skipped like PyTorch
    if not kept:
        return jnp.zeros((0,), dtype)
    dim = wrap_dim(dim, kept[0].ndim)
    first = kept[0]
    for i, t in enumerate(kept):
        if t.ndim != first.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {first.ndim} and {t.ndim}")
        for d in range(t.ndim):
            if d != dim and t.shape[d] != first.shape[d]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {dim}. Expected size {first.shape[d]} but "
                    f"got size {t.shape[d]} for tensor number {i} in the list."
                )
    return jnp.concatenate([t.astype(dtype) for t in kept], axis=dim)


@lowering(aten._chunk_cat.default)
def chunk_cat(tensors: list, dim: int, num_chunks: int) -> Any:
    """Each tensor zero-padded along `dim` to a multiple of `num_chunks`, viewed as (its leading
    sizes, num_chunks, -1) and joined along dim + 1: FSDP2's reduce-scatter input, one copy."""

    def need(ok: bool, what: str) -> None:
        fail_unless(ok, "_chunk_cat", f"_chunk_cat expects {what}")

    need(num_chunks >= 1, "positive num_chunks")
    need(len(tensors) > 0, "a non-empty input tensor list")
    for t in tensors:
        need(t.size > 0, "non-empty tensor")
        need(t.dtype == tensors[0].dtype, "all input tensors with the same dtype")
    if len({t.ndim for t in tensors}) == 1:
        dim = wrap_dim(dim, tensors[0].ndim, "_chunk_cat")
    else:
        need(dim >= 0, "non-negative dim when input tensors have different ndims")
        need(all(dim < t.ndim for t in tensors), "dim < ndim for all input tensors")
    need(
        all(t.shape[:dim] == tensors[0].shape[:dim] for t in tensors),
        "same sizes of 0,...,dim-1 dimensions for all tensors",
    )
    chunks = []
    for t in tensors:
        pad = -t.shape[dim] % num_chunks
        if pad:
            t = jnp.pad(t, [(0, pad if d == dim else 0) for d in range(t.ndim)])
        chunks.append(t.reshape(*t.shape[:dim], num_chunks, -1))
    return jnp.concatenate(chunks, axis=dim + 1)


@lowering(aten.stack.default)
def stack(tensors: list, dim: int = 0) -> Any:
    tensors, dtype = _joined("stack", tensors)
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at entry 0 and "
                f"{list(t.shape)} at entry {i}"
            )
    return jnp.stack([t.astype(dtype) for t in tensors], axis=wrap_dim(dim, tensors[0].ndim + 1))


@lowering(aten.block_diag.default)
def block_diag(tensors: list) -> Any:
    tensors, dtype = _joined("block_diag", tensors)
    blocks = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(
                f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has {t.ndim} dimensions"
            )
        blocks.append(t.reshape((1, -1) if t.ndim < 2 else t.shape).astype(dtype))
    rows, cols = sum(b.shape[0] for b in blocks), sum(b.shape[1] for b in blocks)
    out = jnp.zeros((rows, cols), dtype)
    r = c = 0
    for b in blocks:
        out = lax.dynamic_update_slice(out, b, (r, c)) if b.size else out
        r, c = r + b.shape[0], c + b.shape[1]
    return out


# ---- reordering -------------------------------------------------------------------------


@lowering(aten.flip.default)
def flip(self: Any, dims: list) -> Any:
    axes = tuple(wrap_dim(d, self.ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError("flip: dims has duplicates")
    return jnp.flip(self, axes) if self.ndim else self


@lowering(aten.roll.default)
def roll(self: Any, shifts: list, dims: list = ()) -> Any:
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: shifts must be a single value when dims is empty, got {list(shifts)}")
        return jnp.roll(self.reshape(-1), shifts[0]).reshape(self.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if self.ndim == 0:
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    return jnp.roll(self, tuple(shifts), tuple(wrap_dim(d, self.ndim) for d in dims))


@lowering(aten.tril.default)
def tril(self: Any, diagonal: int = 0) -> Any:
    if self.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return jnp.tril(self, diagonal)


@lowering(aten.triu.default)
def triu(self: Any, diagonal: int = 0) -> Any:
    if self.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return jnp.triu(self, diagonal)


# ---- repetition -------------------------------------------------------------------------


@lowering(aten.repeat.default)
def repeat(self: Any, repeats: list) -> Any:
    if len(repeats) < self.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    if any(r < 0 for r in repeats):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(repeats)}")
    x = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    return jnp.tile(x, tuple(repeats))


def _repeat_total(repeats: Any, output_size: int | None = None) -> Any:
    return None if output_size is not None else jnp.sum(repeats)


@lowering(aten.repeat_interleave.Tensor, size=_repeat_total)
def repeat_interleave(repeats: Any, output_size: int | None = None, size: int | None = None) -> Any:
    if repeats.ndim > 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (jnp.int32, jnp.int64):
        raise RuntimeError("repeats has to be Long or Int tensor")
    total = output_size if output_size is not None else size
    repeats = repeats.reshape(-1)
    check(repeats >= 0, RuntimeError, "repeats can not be negative")
    if output_size is not None:
        check(jnp.sum(repeats) == output_size, RuntimeError, "allocated size does not match required size")
    return jnp.repeat(jnp.arange(repeats.shape[0], dtype=repeats.dtype), repeats, total_repeat_length=total)


# ---- padding ----------------------------------------------------------------------------


def _pairs(pad: Sequence[int], ndim: int, name: str) -> list[tuple[int, int]]:
    """PyTorch's pad list (last dim first, (before, after) pairs) as per-dim pairs."""
    if len(pad) % 2:
        raise RuntimeError(f"{name}: Length of pad must be even but instead it equals {len(pad)}")
    if len(pad) // 2 > ndim:
        raise RuntimeError(
            f"{name}: Length of pad should be no more than twice the number of dimensions of the input. "
            f"Pad length is {len(pad)} while the input has {ndim} dimensions."
        )
    pairs = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        pairs[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return pairs


@lowering(aten.constant_pad_nd.default)
def constant_pad_nd(self: Any, pad: list, value: Any = 0) -> Any:
    pairs = _pairs(pad, self.ndim, "constant_pad_nd")
    for d, (lo, hi) in enumerate(pairs):
        if self.shape[d] + lo + hi < 0:
            raise RuntimeError(
                f"The input size {self.shape[d]}, plus negative padding {lo} and {hi} resulted in a negative "
                f"output size, which is invalid. Check dimension {d} of your input."
            )
    return lax.pad(self, cast(value, torch_dtype(self)), [(lo, hi, 0) for lo, hi in pairs])


def _padded(mode: str, spatial: int) -> Callable[..., Any]:
    """reflection/replication padding of the last `spatial` dims: each output position reads a
    statically known input position (negative pads crop)."""

    def lowered(self: Any, padding: list) -> Any:
        name = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{spatial}d"
        if self.ndim not in (spatial + 1, spatial + 2):
            raise RuntimeError(
                f"{name}: Expected {spatial + 1}D or {spatial + 2}D tensor with possibly 0 batch size, got {self.ndim}D"
            )
        if len(padding) != 2 * spatial:
            raise RuntimeError(f"{name}: padding size is expected to be {2 * spatial}, but got: {len(padding)}")
        x = self
        for d, (lo, hi) in enumerate(_pairs(padding, self.ndim, name)):
            if lo == hi == 0:
                continue
            n = x.shape[d]
            if (mode == "reflect" and (lo >= n or hi >= n)) or n + lo + hi < 0 or n == 0:
                raise RuntimeError(
                    f"{name}: Padding size should be less than the corresponding input dimension, but got: "
                    f"padding ({lo}, {hi}) at dimension {d} of input {list(self.shape)}"
                )
            source = np.arange(n + lo + hi) - lo
            if mode == "reflect":
                source = (n - 1) - np.abs((n - 1) - np.abs(source))
            x = jnp.take(x, np.clip(source, 0, n - 1), axis=d)
        return x

    return lowered


def _padded_backward(forward: Callable[..., Any]) -> Callable[..., Any]:
    def lowered(grad_output: Any, self: Any, padding: list) -> Any:
        _, pullback = jax.vjp(lambda x: forward(x, padding), self)
        return pullback(grad_output.astype(self.dtype))[0]

    return lowered


for _spatial in (1, 2, 3):
    for _mode, _kind in (("reflect", "reflection"), ("edge", "replication")):
        _forward = _padded(_mode, _spatial)
        lowering(getattr(aten, f"{_kind}_pad{_spatial}d").default)(_forward)
        lowering(getattr(aten, f"{_kind}_pad{_spatial}d_backward").default)(_padded_backward(_forward))


@lowering(aten.lift_fresh_copy.default)
def lift_fresh_copy(self: Any) -> Any:
    return self
