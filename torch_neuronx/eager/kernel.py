"""The eager kernel: run one ATen overload's lowering as a cached executable.

Per call, each argument contributes to a cache key: tensors their storage slot, dtype and
geometry, and each storage its size and dtype (they fix the shape of the buffer the executable
takes); float scalars, alone or in a Scalar[] list, only their type (their value is an
executable input, so a learning rate that changes every step never recompiles); everything
else its value, and for numbers also their type (4, 4.0 and True are equal dict keys, but
`arange(4)` is int64 and `arange(4.0)` float32). The executable gathers each tensor from its
storage buffer, applies the lowering, and scatters the values of mutated arguments back into
their storages' buffers (DESIGN 3).

An executable comes from the executable store when an earlier process built it, else it is
traced, compiled and stored. Executables are kept per op and in the whole process up to a
bound, the oldest dropped first: each holds compiled code (about three memory mappings and
1.5 MiB on the CPU platform), and a process meeting thousands of shapes (generate's growing
input_ids, a sweep) would otherwise run out of mappings. The store makes loading one again cheap.

A keyed kernel (the one the dispatcher runs for its op, with no random or data-dependent-size
lowering) tells the native module about each executable it runs (`remember`), so the module
serves the next call with the same key without entering Python; dropping an executable from
the cache drops it there too (`forget`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.utils._pytree import tree_map

from ..ops import Lowering, collecting_checks
from ..ops._common import raised_by_jax, torch_error
from ..ops._dtypes import TO_TORCH, Complex32ResultError, jax_dtype
from ..ops.geometry import contiguous_strides, memory_order, numel
from ..runtime import checks as device_checks
from ..runtime import cores, native, profiler
from ..runtime.debug import log, module_name
from ..runtime.platform import spread_until_ready
from . import executable_store, metrics
from .arguments import OPT_TENSOR, SCALAR, SCALAR_LIST, STATIC, TENSOR, TENSOR_LIST, ArgumentPlan
from .storage_io import (
    DYNAMIC_SCALARS,
    CallInputs,
    buffer_positions,
    device_key,
    jitted,
    load_storages,
    names_bits_dtype,
    read_tensor,
    rng_inputs,
    scalar_input,
    with_donated,
    write_tensor,
    written_slots,
)
from .tensor import tensor_on_new_storage, to_device

_hits = metrics.hits
_NATIVE = native.module()
jax.monitoring.register_event_duration_secs_listener(metrics.count_lowering)
MAX_EXECUTABLES_PER_OP = 512
MAX_EXECUTABLES = 2048
_LIVE: OrderedDict[tuple, dict] = OrderedDict()  # (id(cache), key) -> cache, oldest first
_NUMBERS = (bool, int, float)


def is_contiguous(shape: tuple, strides: tuple) -> bool:
    """PyTorch's `is_contiguous()` for (shape, strides): size-1 dims and empty tensors don't count."""
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 0:
            return True
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


class _Described:
    """What `Kernel._name_error` reads of a call: its tensors."""

    def __init__(self, values: list) -> None:
        self.tensors = [t for t in values if isinstance(t, torch.Tensor)]


def _uploaded(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0:
        return to_device(t)
    return t


class CachedExecutable:
    """One signature's compiled executable and what its outputs are."""

    __slots__ = ("checks", "fn", "large", "mutated_slots", "native_returns", "out_meta", "single", "tree")

    def __init__(self) -> None:
        self.fn: Any = None
        self.large = False  # runs with XLA:CPU's threads on every core (runtime/cores.py)
        self.checks: list = []
        self.out_meta: list = []
        self.tree: Any = None
        self.mutated_slots: list = []
        self.single = False
        self.native_returns: list | None = None  # how the native module makes the op's returns


def _out_meta(shape: tuple, dtype: torch.dtype, strides: tuple) -> tuple:
    """`tensor_on_new_storage`'s leading arguments for a dense result, computed once per executable."""
    return shape, dtype, strides, numel(shape) * dtype.itemsize


def _meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.device.type == "neuron":
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device) and x.type == "neuron":
        return torch.device("meta")
    return x


def pytorch_strides(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list | None:
    """The strides PyTorch gives each fresh result of this call (its meta kernel, the rules CPU
    follows: an elementwise result keeps its inputs' memory order, `clone` and `.to` preserve a
    permuted or channels-last layout); None where the meta kernel cannot say."""
    try:
        results = op(*tree_map(_meta, args), **tree_map(_meta, kwargs))
    except Exception:  # no meta kernel, or one that needs values: the results stay contiguous
        return None
    return [r.stride() if isinstance(r, torch.Tensor) else None for r in jax.tree_util.tree_leaves(results)]


def _laid_out(x: Any, strides: tuple | None) -> tuple[Any, tuple]:
    """`x` flattened in the memory order `strides` give (row-major where they are None or not a
    dense layout of `x`'s shape), and the strides its tensor takes."""
    shape = tuple(x.shape)
    order = memory_order(shape, strides) if strides is not None and len(strides) == len(shape) else None
    if order is None or order == tuple(range(len(shape))):
        return x.reshape(-1), contiguous_strides(shape)
    return jnp.transpose(x, order).reshape(-1), tuple(strides)


def _bounded_insert(cache: dict, key: tuple, entry: Any) -> None:
    """Add an executable to an op's cache, dropping the op's oldest, then the process's oldest,
    beyond their bounds."""
    while cache and len(cache) >= MAX_EXECUTABLES_PER_OP:
        oldest = next(iter(cache))
        _forget(cache.pop(oldest))
        _LIVE.pop((id(cache), oldest), None)
    while _LIVE and len(_LIVE) >= MAX_EXECUTABLES:
        (_, oldest), owner = _LIVE.popitem(last=False)
        _forget(owner.pop(oldest, None))
    cache[key] = entry
    _LIVE[(id(cache), key)] = cache


def _forget(entry: Any) -> None:
    if _NATIVE is not None and entry is not None:
        _NATIVE.forget(entry)


def live_executables() -> int:
    """Eager executables held now, across every op (at most MAX_EXECUTABLES)."""
    return len(_LIVE)


def cpp_entry_point(compiled: Any) -> Any:
    """The C++ callable JAX made for a `jax.stages.Compiled` on its first call, which spares
    each later call the Python frame of `Compiled.__call__`; the executable itself where there
    is none."""
    return getattr(compiled, "_call", None) or compiled


def off_fast_path() -> int:
    """Live executables whose calls no longer take JAX's C++ fast path: it keeps one entry per
    executable in a cache of bounded size (shared by all of them), and a call whose entry was
    evicted goes through Python (several times slower) to rebuild it."""
    count = 0
    for (_, key), cache in _LIVE.items():
        fn = getattr(cache.get(key), "fn", None)
        count += getattr(fn, "_cache_size", lambda: 1)() == 0
    return count


class Kernel(ArgumentPlan):
    """Runs `op` through `lowering`; writes mutated arguments back through their geometry."""

    def __init__(
        self,
        op: torch._ops.OpOverload,
        lowering: Lowering,
        keyed: bool = False,
        fallback: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(op, lowering)
        self.lowering = lowering
        # runs the calls the lowering cannot take: those naming complex32, unless the lowering
        # handles it and this kernel only writes arguments (a JAX result has no complex32 type,
        # so a fresh tensor could not be made of one)
        self.fallback = fallback
        self.takes_complex32 = lowering.complex32 and bool(self.mutated) and None not in self.returns
        self.cache: dict[tuple, CachedExecutable] = {}
        self.size_cache: dict[tuple, CachedExecutable] = {}
        # whether the native module may key this op's calls and serve them (module docstring);
        # not where `validate` must see every call's float scalars: a native hit runs no Python
        # (nor for a large executable's calls, which spread XLA's threads: `_remember`)
        self.keyed = (
            keyed
            and _NATIVE is not None
            and not (lowering.random or lowering.size is not None or lowering.validate or self.item_returns)
            and len(op._schema.returns) == len([r for r in op._schema.returns if "Tensor" in str(r.type)])
        )
        # the dispatcher's kernel for a functional op lays its results out as PyTorch does
        self.follows_layout = keyed and not self.mutated and not self.item_returns

    def __call__(this, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - `self` is an ATen argument name
        values = this.bind(args, kwargs)
        for i in this.host_indices:
            values[i] = [_uploaded(t) for t in values[i]]
        if this.lowering.validate is not None:
            this._validate(values)
        call = CallInputs()
        try:
            arg_key, op = this._arg_key, this.op
            key = [
                call.tensor(v, op) if kind is TENSOR and isinstance(v, torch.Tensor) else arg_key(kind, v, call)
                for kind, v in zip(this.kinds, values)
            ]
            key.append(tuple(call.unwritten))
            key.append(tuple(call.types))
            key.append(tuple(call.held))
            if this.lowering.size is not None:
                key.append(this._sizes(tuple(key), call))
            key = tuple(key)
            if this.lowering.random:
                call.scalars.extend(rng_inputs())
            entry = this.cache.get(key)
            if entry is None and this._off_lowering(key):
                pass  # no executable, nothing launched: the fallback below runs the call
            elif entry is None:
                start = time.perf_counter()
                strides = pytorch_strides(op, args, kwargs) if this.follows_layout else None
                with profiler.compiling(f"compile {this.name}"):
                    entry, how = this._build(key, call, strides)
                launch = profiler.now() if profiler.recording() else 0
                results = entry.fn(*call.buffers, *call.scalars)
                if launch:
                    profiler.launched(this.name, launch, results)
                entry.large = cores.large(entry.fn.cost_analysis())
                entry.fn = cpp_entry_point(entry.fn)
                _bounded_insert(this.cache, key, entry)
                seconds = time.perf_counter() - start
                metrics.miss(this.name, seconds, loaded_from_store=how == "loaded")
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("%s %s for %s in %.1f ms", how, this.name, call.signature(), seconds * 1e3)
            else:
                _hits[this.name] += 1
                launch = profiler.now() if profiler.recording() else 0
                results = entry.fn(*call.buffers, *call.scalars)
                if launch:
                    profiler.launched(this.name, launch, results)
        except Complex32ResultError:
            if this.fallback is None:
                raise
            entry = None  # traced only: nothing ran, nothing is cached
        except Exception as error:
            if raised_by_jax(error):
                translated = torch_error(error)
                this._name_error(translated, call)
                raise translated from error
            this._name_error(error, call)
            raise
        if entry is None:
            return this.fallback(*args, **kwargs)
        if entry.large:
            spread_until_ready(results)
        made = len(entry.out_meta)
        for slot, buf in zip(entry.mutated_slots, results[made:]):
            call.allocs[slot].buffer = buf
        if entry.checks:
            device_checks.defer(results[-1], entry.checks, this.name)
        returned = this._returns(entry, results, values)
        if this.keyed:
            this._remember(entry)
        return returned

    def _off_lowering(self, key: tuple) -> bool:
        """Whether this call names complex32 and this kernel cannot take it (`takes_complex32`).
        Checked on a miss only (a hit's key was checked when built), and such a call is never
        cached, so the native module never serves it."""
        if self.takes_complex32 or not names_bits_dtype(key[: len(self.kinds)]):
            return False
        if self.fallback is None:
            jax_dtype(torch.complex32)  # raises: no kernel here may run it
        return True

    def _validate(self, values: list) -> None:
        try:
            self.lowering.validate(*values)
        except Exception as error:
            self._name_error(error, _Described(values))
            raise

    def _build(self, key: tuple, call: CallInputs, strides: list | None) -> tuple[CachedExecutable, str]:
        """The executable for `key` whose fresh results take `strides` (`pytorch_strides`): from
        the executable store, else traced and compiled (and stored); with how it was got, "loaded"
        or "built"."""
        signature = self._signature(key)
        stored = executable_store.load(signature) if signature else None
        entry = CachedExecutable()
        if stored is not None:
            entry.fn, (entry.checks, entry.out_meta, entry.tree, entry.mutated_slots, entry.single) = stored
            return entry, "loaded"
        writable = written_slots([key[i] for i in self.mutated])
        donated = buffer_positions(writable, key[len(self.kinds)])
        suffix = executable_store.module_suffix(signature) if signature else ""
        traced = jitted(self._traceable(key, entry, writable, suffix, strides), donated, len(call.buffers))
        entry.fn, storable = executable_store.compile_storable(traced.lower(*call.buffers, *call.scalars))
        if signature and storable:
            meta = (entry.checks, entry.out_meta, entry.tree, entry.mutated_slots, entry.single)
            executable_store.save(signature, entry.fn, meta)
        return entry, "built"

    def _signature(self, key: tuple) -> str | None:
        """What names this kernel's executable for `key` across processes (the store's key), or
        None where part of the key is named by object identity and so never recurs."""
        if not (executable_store.enabled() and self.lowering.storable):
            return None
        fn = self.lowering.fn
        signature = f"{self.name}|{fn.__module__}.{fn.__qualname__}|{key!r}"
        return None if " at 0x" in signature else signature

    def _remember(self, entry: CachedExecutable) -> None:
        """Offer this call's executable to the native module (it keeps it if it keyed the call);
        a large one stays with Python, which spreads XLA's threads while it runs: its launch
        costs milliseconds, beside which this path's microseconds do not count."""
        if entry.large:
            return
        if entry.native_returns is None:
            entry.native_returns = self._native_returns(entry)
        if entry.native_returns is False:
            return
        checks = entry.checks or None
        _NATIVE.remember(self.op, entry, entry.fn, entry.out_meta, entry.mutated_slots, checks, entry.native_returns)

    def _native_returns(self, entry: CachedExecutable) -> list | bool:
        """Per schema return: (0, argument index, 0) for an argument returned as is, (1, output, 0)
        for a fresh tensor, (2, first output, count) for a fresh Tensor[]; False where the
        results are shaped otherwise."""
        leaves = len(entry.out_meta)
        tree = entry.tree
        fresh = [i for i, source in enumerate(self.returns) if source is None]
        if self.mutated and not fresh:
            return [(0, source, 0) for source in self.returns]
        if len(self.returns) == 1 and str(self.op._schema.returns[0].type) == "List[Tensor]":
            same = tree == jax.tree_util.tree_structure([0] * leaves)
            return [(2, 0, leaves)] if same and not self.mutated else False
        if tree != jax.tree_util.tree_structure(tuple(range(leaves)) if len(fresh) > 1 else 0):
            return False
        outputs = iter(range(leaves))
        return [(1, next(outputs), 0) if source is None else (0, source, 0) for source in self.returns]

    def _name_error(self, error: Exception, call: CallInputs) -> None:
        """Prefix an error a lowering raised (PyTorch's message) with the op and its dtypes."""
        message = error.args[0] if error.args else None
        if isinstance(message, str) and not message.startswith("neuron:"):
            dtypes = ", ".join(str(t.dtype).removeprefix("torch.") for t in call.tensors)
            error.args = (f"neuron: {self.name} ({dtypes} on neuron): {message}", *error.args[1:])

    def _sizes(self, key: tuple, call: CallInputs) -> Any:
        """Run the lowering's size pass on this call's inputs; its values as Python ints."""
        entry = self.size_cache.get(key)
        if entry is None:
            entry = CachedExecutable()
            entry.fn = jax.jit(self._traceable(key, entry, sizing=True))
            outputs, _, _ = entry.fn(call.buffers, call.scalars)
            _bounded_insert(self.size_cache, key, entry)
        elif entry.tree.num_leaves:
            outputs, _, _ = entry.fn(call.buffers, call.scalars)
        else:
            return None
        return jax.tree_util.tree_unflatten(entry.tree, [int(x[0]) for x in jax.device_get(outputs)])

    def _arg_key(self, kind: int, v: Any, call: CallInputs) -> Any:
        if kind == TENSOR:
            if isinstance(v, torch.Tensor):
                return call.tensor(v, self.op)
            kind = SCALAR  # a wrapped Python number arrives unboxed
        if kind == STATIC:
            if isinstance(v, list):
                return tuple(v)
            if type(v) in _NUMBERS:
                call.types.append(type(v))
            return v
        if kind == SCALAR:
            if isinstance(v, DYNAMIC_SCALARS):
                call.scalars.append(scalar_input(v))
                return type(v)
            if type(v) in _NUMBERS:
                call.types.append(type(v))
            return v
        if kind == OPT_TENSOR:
            return None if v is None else call.tensor(v, self.op)
        if kind == SCALAR_LIST:
            return tuple(self._arg_key(SCALAR, x, call) for x in v)
        return tuple(None if t is None else call.tensor(t, self.op) for t in v)

    def _returns(self, entry: CachedExecutable, outputs: list, values: list) -> Any:
        if entry.single:
            return tensor_on_new_storage(*entry.out_meta[0], outputs[0])
        if self.item_returns:
            leaves = [np.asarray(o).item() for o in outputs[: len(entry.out_meta)]]
        else:
            leaves = [tensor_on_new_storage(*meta, buf) for buf, meta in zip(outputs, entry.out_meta)]
        fresh = jax.tree_util.tree_unflatten(entry.tree, leaves)
        if not self.mutated:
            return fresh
        if not self.returns:
            return None
        pending = iter(fresh if isinstance(fresh, (tuple, list)) else (fresh,))
        results = [next(pending) if source is None else values[source] for source in self.returns]
        return results[0] if len(results) == 1 else tuple(results)

    def _traceable(
        self,
        key: tuple,
        entry: Any,
        writable: list[int] = (),
        suffix: str = "",
        strides: list | None = None,
        sizing: bool = False,
    ) -> Callable:
        kinds, lowering = self.kinds, self.lowering
        mutated = self.mutated if not sizing else []
        arg_keys = key[: len(kinds)]
        unwritten = key[len(kinds)]

        def run(buffers: list, scalars: list) -> tuple:
            storage = load_storages(buffers, unwritten)
            scal = iter(scalars)

            def load(k: Any) -> Any:
                if k is None:
                    return None
                if k[0] == "cpu0":
                    return next(scal)
                return read_tensor(storage, k)

            args = []
            for kind, k in zip(kinds, arg_keys):
                if isinstance(k, type):
                    args.append(next(scal))
                elif kind in (TENSOR, OPT_TENSOR) and isinstance(k, tuple):
                    args.append(load(k))
                elif kind == TENSOR_LIST:
                    args.append([load(x) for x in k])
                elif kind == SCALAR_LIST:
                    args.append([next(scal) if isinstance(x, type) else x for x in k])
                else:
                    args.append(list(k) if isinstance(k, tuple) else k)
            kwargs = {}
            if sizing:
                with collecting_checks():
                    result = lowering.size(*args)
                leaves, entry.tree = jax.tree_util.tree_flatten(result)
                return [jnp.asarray(x, jnp.int64).reshape(1) for x in leaves], [], None
            if lowering.random:
                kwargs["key"] = device_key(next(scal), next(scal), next(scal))
            if lowering.size is not None:
                kwargs["size"] = key[len(kinds) + 3]
            if lowering.layout:
                kwargs["contiguous"] = tuple(
                    isinstance(k, tuple) and k[0] != "cpu0" and is_contiguous(k[2], k[3])
                    for kind, k in zip(kinds, arg_keys)
                    if kind in (TENSOR, OPT_TENSOR)
                )
            with collecting_checks() as checks:
                result = lowering.fn(*args, **kwargs)
            entry.checks = [(error, message) for _, error, message in checks]
            flags = jnp.stack([flag for flag, _, _ in checks]) if checks else None
            if mutated:
                result = self._write_back(result, arg_keys, storage, entry)
                entry.mutated_slots = with_donated(entry.mutated_slots, writable, unwritten)
            leaves, entry.tree = jax.tree_util.tree_flatten(result)
            leaves = [jnp.asarray(x) for x in leaves]
            layouts = strides if strides is not None and len(strides) == len(leaves) else [None] * len(leaves)
            flat, out_strides = zip(*[_laid_out(x, s) for x, s in zip(leaves, layouts)]) if leaves else ((), ())
            entry.out_meta = [
                _out_meta(tuple(x.shape), TO_TORCH[np.dtype(x.dtype)], s) for x, s in zip(leaves, out_strides)
            ]
            entry.single = not mutated and not self.item_returns and entry.tree.num_nodes == entry.tree.num_leaves == 1
            return list(flat), [storage[s] for s in entry.mutated_slots], flags

        run.__name__ = run.__qualname__ = module_name(self.name) + suffix  # names the XLA module
        return run

    def _write_back(self, result: Any, arg_keys: tuple, storage: list, entry: Any) -> Any:
        """Scatter new values of mutated args into their storages; return fresh results."""
        pairs, fresh_results = self.mutations(result, list(arg_keys))
        slots = []
        for k, v in pairs:
            slot = write_tensor(storage, k, v)
            if slot not in slots:
                slots.append(slot)
        entry.mutated_slots = slots
        return fresh_results
