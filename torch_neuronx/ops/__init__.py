"""The lowering registry: ATen overload -> pure JAX function, written once, used by eager and
compile alike.

A lowering takes the op's arguments in schema order: tensors arrive as jax arrays, float
scalars as (weakly typed) jax scalars, everything else (ints, bools, int lists, dtypes) as
static Python values. It returns the op's outputs as jax arrays (a pytree matching the
schema's returns). A lowering registered on a mutating overload (`copy_`, `_foreach_add_`)
returns the new values of its mutated arguments instead, in schema order. In-place and `out=`
variants of a functional op are derived from its lowering; they need no lowering of their own.

Four options cover what a plain lowering cannot say:
- `random=True`: the lowering receives `key=`, a jax PRNG key derived from the device RNG state.
- `static=("start", ...)`: these Scalar arguments shape the output (arange's ends), so they
  arrive as Python values and are part of the executable's cache key.
- `validate=fn`: checks float arguments on the host before launch (a random op's bounds), so a
  bad value raises before the op writes anything.
- `size=fn`: the output shape depends on the data (nonzero, masked_select). `fn` takes the same
  arguments and returns a pytree of int scalars (or None when this call's shapes are static);
  it runs first as its own executable, its values come to the host (a sync, as on CUDA) and
  the lowering receives them as the static keyword `size=`.
Data-dependent errors (an index out of range) are raised with `check` from inside a lowering.

Family modules (elementwise, reduction, ...) register with the `lowering` decorator and are
imported together by `load()` on first device use. A family derived from the others (the
`_foreach_*` ops map single-tensor lowerings over lists) registers a `derived` hook instead,
which `load()` runs once every module is imported, whatever their import order.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

OpOverload = torch._ops.OpOverload


@dataclass(frozen=True)
class Lowering:
    fn: Callable[..., Any]
    random: bool = False  # receives a `key=` jax PRNG key derived from the device RNG state
    # Arguments the op writes although its schema does not say so (native_batch_norm's running
    # stats); the lowering returns their new values like an annotated mutation.
    mutates: tuple[str, ...] = ()
    static: tuple[str, ...] = ()  # Scalar arguments that are compile-time values
    size: Callable[..., Any] | None = None  # computes data-dependent output sizes first
    # receives `contiguous=`: per tensor argument (schema order), whether it is contiguous in
    # PyTorch's sense; for ops whose outputs depend on the input layout (`_linalg_det` returns
    # the LU of A^T for a contiguous A, and its backward relies on that)
    layout: bool = False
    # whether the executable store may keep its executables across processes: only where this
    # package's sources (part of the store's fingerprint) fix the function, not for custom ops
    storable: bool = True
    # Checks the op's arguments on the host before anything runs, raising PyTorch's error: takes
    # the arguments as the lowering does, float scalars as Python numbers (in eager and in a
    # compiled graph alike), and checks only those; a check on tensor values uses `check`. Every
    # call runs it, so the op stays off the native hit path (which runs no Python): keep it to
    # ops off the hot path.
    validate: Callable[..., None] | None = None
    # Handles complex32 (a storage-only dtype, `_dtypes.BITS`): receives it as complex64 values
    # and its values may be written into complex32 arguments (rounded on the way). A call with
    # complex32 tensors or a complex32 dtype argument runs on the lowering only with this set and
    # only where it writes arguments and makes no fresh tensor (in-place, `copy_`); otherwise
    # eager runs the op's complex32 kernel (`eager.storage_kernels.COMPLEX32_KERNELS`: a new
    # tensor written in place) or PyTorch's CPU kernel, so the op computes as CPU does or raises
    # CPU's "not implemented for 'ComplexHalf'" (`eager.kernel.Kernel`). Compiled graphs run
    # every complex32 node eagerly.
    complex32: bool = False


LOWERINGS: dict[OpOverload, Lowering] = {}


_known_ops: frozenset[str] = frozenset()


def _is_dispatcher_op(name: str) -> bool:
    """Whether the dispatcher knows `name`; re-read on a miss, so ops defined later (custom ops)
    are seen."""
    global _known_ops
    if name not in _known_ops:
        _known_ops = frozenset(torch._C._dispatch_get_all_op_names())
    return name in _known_ops


def _overloads(op: Any) -> list[OpOverload]:
    """The overload, or a packet's overloads, that the dispatcher knows (TorchScript-only ones
    such as `eq.Tensor_list` never reach a backend)."""
    overloads = [op] if isinstance(op, OpOverload) else [getattr(op, name) for name in op.overloads()]
    return [o for o in overloads if _is_dispatcher_op(o.name())]


def lowering(
    *ops: Any,
    random: bool = False,
    mutates: tuple[str, ...] = (),
    static: tuple[str, ...] = (),
    size: Callable[..., Any] | None = None,
    layout: bool = False,
    validate: Callable[..., None] | None = None,
    complex32: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as the lowering of each given overload (a packet means all its overloads
    that neither mutate nor write `out=`; those are derived)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op in ops:
            for overload in _overloads(op):
                if isinstance(op, OpOverload) or not is_mutating(overload):
                    LOWERINGS[overload] = Lowering(
                        fn, random, mutates, tuple(static), size, layout, validate=validate, complex32=complex32
                    )
        return fn

    return register


def is_mutating(op: OpOverload) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)


_DERIVED: list[Callable[[], None]] = []


def derived(fn: Callable[[], None]) -> Callable[[], None]:
    """Run `fn` once `load()` has imported every family module: it adds lowerings built from
    the ones already registered, so it sees them all regardless of module order."""
    _DERIVED.append(fn)
    return fn


_checks = threading.local()


def check(ok: Any, error: type[Exception], message: str, value: Any = None) -> None:
    """Require a data-dependent condition from inside a lowering: where `ok` (a traced bool
    array) is False, the op fails with `error(message)`, `{}` in the message standing for the
    first offending element of `value`. Like a CUDA device-side assert, the failure is reported
    at the next host sync (a copy to the host, `.item()`, `torch.neuron.synchronize()`); the
    executable itself never reads out of bounds. Outside a kernel's trace it does nothing."""
    pending = getattr(_checks, "pending", None)
    if pending is None:
        return
    import jax.numpy as jnp

    ok = jnp.asarray(ok, dtype=bool).reshape(-1)
    first = jnp.argmin(ok) if ok.size else 0
    bad = jnp.asarray(value).reshape(-1)[first].astype(jnp.int64) if value is not None and ok.size else 0
    pending.append((jnp.stack([jnp.all(ok).astype(jnp.int64), jnp.asarray(bad, jnp.int64)]), error, message))


@contextmanager
def collecting_checks() -> Iterator[list]:
    """Collect the `check`s a lowering makes while it is traced: [(flag+value, error, message)]."""
    outer = getattr(_checks, "pending", None)
    _checks.pending = collected = []
    try:
        yield collected
    finally:
        _checks.pending = outer


_loaded = False
_load_lock = threading.Lock()


def load() -> dict[OpOverload, Lowering]:
    """Import every family module once, then run the `derived` hooks, filling LOWERINGS. Threads
    whose first device ops come at once wait for one load: a second one would run the hooks again
    while the first thread is already iterating the registry."""
    global _loaded
    if not _loaded:
        with _load_lock:
            if not _loaded:
                for info in pkgutil.iter_modules(__path__):
                    if not info.name.startswith("_"):
                        importlib.import_module(f"{__name__}.{info.name}")
                for derive in _DERIVED:
                    derive()
                _loaded = True
    return LOWERINGS
