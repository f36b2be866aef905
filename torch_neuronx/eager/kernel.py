"""The eager kernel: run one ATen overload's lowering as a cached executable.

Per call, each argument contributes to a cache key: tensors their storage slot, dtype and
geometry; float scalars, alone or in a Scalar[] list, only their type (their value is an
executable input, so a learning rate that changes every step never recompiles); everything
else its value, and for numbers also their type (4, 4.0 and True are equal dict keys, but
`arange(4)` is int64 and `arange(4.0)` float32). The executable gathers each tensor from its
storage buffer, applies the lowering, and scatters the values of mutated arguments back into
their storages' buffers (DESIGN 3).
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
from jax.sharding import SingleDeviceSharding

from ..ops import Lowering, collecting_checks
from ..ops._dtypes import TO_TORCH, jax_dtype
from ..ops.geometry import Geometry, contiguous_strides, numel, read, write
from ..runtime.debug import log, module_name
from ..runtime.memory import MEMORY
from ..runtime.platform import device
from ..runtime.rng import RNG
from . import metrics
from .tensor import tensor_on_new_storage

_TABLE = MEMORY.table
_hits = metrics.hits
jax.monitoring.register_event_duration_secs_listener(metrics.count_lowering)
TENSOR, OPT_TENSOR, TENSOR_LIST, SCALAR, STATIC, SCALAR_LIST = range(6)
_TENSOR_KINDS = {
    "Tensor": TENSOR,
    "Optional[Tensor]": OPT_TENSOR,
    "List[Tensor]": TENSOR_LIST,
    "List[Optional[Tensor]]": TENSOR_LIST,
    "number": SCALAR,
    "Optional[number]": SCALAR,
    "float": SCALAR,
    "Optional[float]": SCALAR,
    "List[number]": SCALAR_LIST,
}
_DYNAMIC_SCALARS = (float, complex)
# Executables kept per op and in the whole process. Each holds compiled code (about three
# memory mappings and 1.5 MiB on the CPU platform); a process that meets thousands of shapes
# (generate's growing input_ids, a sweep) would otherwise run out of mappings ("LLVM
# compilation error: Cannot allocate memory"). The oldest is dropped first; XLA's persistent
# cache makes building it again cheap.
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


def rng_inputs(count: int = 1) -> list:
    """Executable inputs for the next `count` draws from the device RNG state."""
    seed, offset = RNG.next(count)
    return [np.uint64(seed), np.uint32(offset & 0xFFFFFFFF), np.uint32(offset >> 32)]


_failed: list = []  # (flags, [(error, message)], op) of checked calls not yet inspected
_MAX_PENDING = 64


def raise_failed_checks() -> None:
    """Raise the first failed `ops.check` of the calls run so far (an index out of range...).
    Called at host syncs, like a CUDA device-side assert; also every _MAX_PENDING checked calls."""
    if not _failed:
        return
    pending = _failed[:]
    _failed.clear()
    for flags, checks, op in pending:
        for (ok, value), (error, message) in zip(np.asarray(flags).tolist(), checks):
            if not ok:
                raise error(f"neuron: {op}: {message.format(value)}")


def device_key(seed: Any, lo: Any, hi: Any) -> Any:
    """The jax PRNG key of one random op: the device seed folded with the op's offset."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), lo), hi)


def device_keys(seed: Any, lo: Any, hi: Any, count: int) -> list:
    """Inside a trace: keys of `count` random ops drawn one after another from the offset
    (lo, hi) of `rng_inputs(count)`; op i gets offset + i, as `count` eager calls would."""
    offset = (jnp.asarray(hi, jnp.uint64) << 32) | jnp.asarray(lo, jnp.uint64)
    keys = []
    for i in range(count):
        at = offset + np.uint64(i)
        keys.append(device_key(seed, (at & 0xFFFFFFFF).astype(jnp.uint32), (at >> 32).astype(jnp.uint32)))
    return keys


# c10::ScalarType codes: a schema's ScalarType default (randint's `dtype=long`) reads back as one.
_SCALAR_TYPES = dict(
    enumerate(
        (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64)
    )
)


def _default(arg: Any) -> Any:
    if not arg.has_default_value():
        return None
    value = arg.default_value
    if arg.name == "dtype" and isinstance(value, int):
        return _SCALAR_TYPES[value]
    return value


class Binder:
    """Turns (args, kwargs) of a call into the full argument list in schema order."""

    def __init__(self, schema: torch.FunctionSchema) -> None:
        self.names = [a.name for a in schema.arguments]
        self.defaults = [_default(a) for a in schema.arguments]
        self.count = len(self.names)

    def __call__(self, args: tuple, kwargs: dict) -> list:
        values = list(args)
        if len(values) < self.count:
            values.extend(self.defaults[len(values) :])
        for name, value in kwargs.items():
            values[self.names.index(name)] = value
        return values


class Call:
    """One call's executable inputs: distinct storages (slots) and dynamic scalars."""

    __slots__ = ("allocs", "buffers", "fresh", "scalars", "slots", "tensors", "types")

    def __init__(self) -> None:
        self.slots: dict[int, int] = {}
        self.allocs: list = []
        self.buffers: list = []  # of the slots' storages that hold one, in slot order
        self.fresh: list = []  # per slot: None, or (nbytes, dtype) of a never-written storage
        self.scalars: list = []
        self.tensors: list = []
        self.types: list = []  # of the numbers keyed by value, in argument order

    def tensor(self, t: torch.Tensor, op: Any) -> tuple:
        try:
            addr = t.untyped_storage().data_ptr()
            slot = self.slots.get(addr)
            if slot is None:
                alloc = _TABLE[addr]
                slot = self.slots[addr] = len(self.allocs)
                self.allocs.append(alloc)
                buffer = alloc.buffer
                if buffer is None:
                    self.fresh.append((alloc.nbytes, alloc.dtype))
                else:
                    self.fresh.append(None)
                    self.buffers.append(buffer)
        except (KeyError, AttributeError):
            return self.foreign(t, op)
        self.tensors.append(t)
        return (slot, t.dtype, t.shape, t.stride(), t.storage_offset(), t.is_conj() | t.is_neg() << 1)

    def foreign(self, t: Any, op: Any) -> tuple:
        """A CPU scalar tensor joins as a value (as CUDA allows); any other device is an error."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"neuron: {op} expected a Tensor, got {type(t).__name__}")
        if t.device.type == "cpu" and t.dim() == 0:
            self.scalars.append(np.asarray(t.item(), dtype=jax_dtype(t.dtype)))  # not jnp: no eager op
            return ("cpu0", t.dtype)
        raise RuntimeError(
            f"neuron: {op} expected all tensors to be on the same device, but found at least two "
            f"devices, neuron:0 and {t.device}! Move the tensor with .to('neuron') first."
        )


def _uploaded(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0:
        from .transfer import to_device

        return to_device(t)
    return t


def _typed(buf: Any, dtype: torch.dtype) -> Any:
    """View a storage buffer's bytes as `dtype` elements (a tensor.view(dtype) on device)."""
    target = jax_dtype(dtype)
    if buf.dtype == target:
        return buf
    if buf.dtype == jnp.bool_:
        buf = buf.astype(jnp.uint8)
    if target == jnp.bool_:
        return _typed(buf, torch.uint8) != 0
    if jnp.issubdtype(buf.dtype, jnp.complexfloating):  # XLA cannot bitcast complex: split it
        parts = jnp.stack([jnp.real(buf), jnp.imag(buf)], axis=-1).reshape(-1)
        return _typed(parts, TO_TORCH[np.dtype(parts.dtype)])
    if jnp.issubdtype(target, jnp.complexfloating):
        part = jnp.finfo(target).dtype
        pairs = _typed(buf, TO_TORCH[np.dtype(part)]).reshape(-1, 2)
        return jax.lax.complex(pairs[:, 0], pairs[:, 1])
    src, dst = buf.dtype.itemsize, np.dtype(target).itemsize
    if src == dst:
        return jax.lax.bitcast_convert_type(buf, target)
    if src > dst:
        return jax.lax.bitcast_convert_type(buf, target).reshape(-1)
    return jax.lax.bitcast_convert_type(buf.reshape(-1, dst // src), target)


def _untyped(value: Any, like: Any) -> Any:
    """Inverse of `_typed`: bytes of `value` as the storage buffer's dtype."""
    if value.dtype == like.dtype:
        return value
    return _typed(value, TO_TORCH[np.dtype(like.dtype)])


def load_storages(buffers: list, fresh: tuple) -> list:
    """Inside a trace: each slot's storage buffer, zeros for never-written storages
    (`fresh` is `tuple(Call.fresh)`)."""
    bufs = iter(buffers)
    return [jnp.zeros(f[0] // f[1].itemsize, jax_dtype(f[1])) if f else next(bufs) for f in fresh]


def _math_bits(value: Any, bits: int) -> Any:
    """Apply a lazy conjugate (bit 0) / negative (bit 1) view's math; each is its own inverse."""
    value = jnp.conj(value) if bits & 1 else value
    return -value if bits & 2 else value


def read_tensor(storage: list, key: tuple) -> Any:
    """Inside a trace: the tensor described by `key` (from `Call.tensor`), read through its geometry."""
    slot, dtype, shape, strides, offset, bits = key
    return _math_bits(read(_typed(storage[slot], dtype), Geometry(tuple(shape), strides, offset)), bits)


def write_tensor(storage: list, key: tuple, value: Any) -> int:
    """Inside a trace: scatter `value` into the storage of the tensor described by `key`
    through its geometry (every alias of that storage sees it); returns the slot written."""
    slot, dtype, shape, strides, offset, bits = key
    buf = storage[slot]
    value = _math_bits(value.astype(jax_dtype(dtype)), bits)
    typed = write(_typed(buf, dtype), Geometry(tuple(shape), strides, offset), value)
    storage[slot] = _untyped(typed, buf)
    return slot


class _Entry:
    """A compiled executable and what its outputs are."""

    __slots__ = ("checks", "fn", "mutated_slots", "out_meta", "single", "tree")

    def __init__(self) -> None:
        self.fn: Any = None
        self.checks: list = []
        self.out_meta: list = []
        self.tree: Any = None
        self.mutated_slots: list = []
        self.single = False


def _out_meta(shape: tuple, dtype: torch.dtype) -> tuple:
    """`tensor_on_new_storage`'s leading arguments for a dense result, computed once per executable."""
    return shape, dtype, contiguous_strides(shape), numel(shape) * dtype.itemsize


def jitted(run: Callable, donated: list[int], count: int) -> Callable:
    """`run(buffers, scalars)` (`count` buffers) as one executable that may overwrite the buffers
    at `donated` (storages the call writes, whose old contents die with it) instead of
    allocating new ones. Its results are committed to the device whatever its inputs: JAX keys
    its compile cache on that, and a factory's results (no array inputs) would otherwise be
    uncommitted, so every executable they reach would be lowered and compiled (or loaded) a
    second time once computed buffers arrive (an AdamW state made by `zeros_like`: 40 ms in
    the second step)."""
    committed = SingleDeviceSharding(device())
    if not donated:
        return jax.jit(run, out_shardings=committed)
    kept = [i for i in range(count) if i not in donated]

    def split(given: list, others: list, scalars: list) -> Any:
        buffers = [None] * (len(given) + len(others))
        for i, b in zip(donated, given):
            buffers[i] = b
        for i, b in zip(kept, others):
            buffers[i] = b
        return run(buffers, scalars)

    split.__name__ = split.__qualname__ = run.__name__
    executable = jax.jit(split, donate_argnums=0, out_shardings=committed)

    def call(buffers: list, scalars: list) -> Any:
        return executable([buffers[i] for i in donated], [buffers[i] for i in kept], scalars)

    return call


def written_slots(arg_keys: Any) -> list[int]:
    """The storage slots behind `arg_keys` (the `Call.tensor` keys, or tuples of them, of the
    arguments a call may write), in slot order."""
    slots = set()
    for k in arg_keys:
        for t in (k,) if is_tensor_key(k) else k if isinstance(k, tuple) else ():
            if is_tensor_key(t):
                slots.add(t[0])
    return sorted(slots)


def with_donated(written: list[int], writable: list[int], fresh: tuple) -> list[int]:
    """The slots a trace writes, plus every writable slot holding a buffer that it left alone:
    that buffer was donated to the call, so the storage gets it back (unchanged) as new."""
    return written + [s for s in writable if fresh[s] is None and s not in written]


def buffer_positions(slots: list[int], fresh: tuple) -> list[int]:
    """Where the buffers of `slots` sit in `Call.buffers` (never-written storages have none)."""
    held = [slot for slot, f in enumerate(fresh) if f is None]
    return [i for i, slot in enumerate(held) if slot in slots]


def is_tensor_key(k: Any) -> bool:
    """Whether a key part is a `Call.tensor` key (slot, dtype, shape, strides, offset, bits)."""
    return isinstance(k, tuple) and len(k) == 6 and isinstance(k[0], int)


def _signature(call: Call) -> str:
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in call.tensors) or "no tensors"


def _bounded_insert(cache: dict, key: tuple, entry: Any) -> None:
    """Add an executable to an op's cache, dropping the op's oldest, then the process's oldest,
    beyond their bounds."""
    while cache and len(cache) >= MAX_EXECUTABLES_PER_OP:
        oldest = next(iter(cache))
        del cache[oldest]
        _LIVE.pop((id(cache), oldest), None)
    while _LIVE and len(_LIVE) >= MAX_EXECUTABLES:
        (_, oldest), owner = _LIVE.popitem(last=False)
        owner.pop(oldest, None)
    cache[key] = entry
    _LIVE[(id(cache), key)] = cache


def live_executables() -> int:
    """Eager executables held now, across every op (at most MAX_EXECUTABLES)."""
    return len(_LIVE)


class Kernel:
    """Runs `op` through `lowering`; writes mutated arguments back through their geometry."""

    def __init__(self, op: torch._ops.OpOverload, lowering: Lowering, functional: bool = True) -> None:
        schema = op._schema
        self.op = op
        self.name = str(op)
        self.lowering = lowering
        self.bind = Binder(schema)
        self.kinds = [
            STATIC if a.name in lowering.static else _TENSOR_KINDS.get(str(a.type), STATIC) for a in schema.arguments
        ]
        self.mutated = [
            i
            for i, a in enumerate(schema.arguments)
            if (a.alias_info is not None and a.alias_info.is_write) or a.name in lowering.mutates
        ]
        self.returns = self._return_plan(schema)
        self.item_returns = bool(schema.returns) and all("Tensor" not in str(r.type) for r in schema.returns)
        # Advanced-indexing index tensors may live on the host, as PyTorch allows for CUDA.
        self.host_indices = [
            i for i, a in enumerate(schema.arguments) if a.name == "indices" and self.kinds[i] == TENSOR_LIST
        ]
        self.cache: dict[tuple, Any] = {}
        self.size_cache: dict[tuple, Any] = {}

    def _return_plan(self, schema: torch.FunctionSchema) -> list:
        """For each return: the index of the argument it aliases, or None if it is fresh."""
        plan = []
        for r in schema.returns:
            source = None
            if r.alias_info is not None:
                for i, a in enumerate(schema.arguments):
                    if a.alias_info is not None and a.alias_info.before_set == r.alias_info.before_set:
                        source = i
            plan.append(source)
        return plan

    def __call__(this, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - `self` is an ATen argument name
        values = this.bind(args, kwargs)
        for i in this.host_indices:
            values[i] = [_uploaded(t) for t in values[i]]
        call = Call()
        try:
            arg_key, op = this._arg_key, this.op
            key = [
                call.tensor(v, op) if kind is TENSOR and isinstance(v, torch.Tensor) else arg_key(kind, v, call)
                for kind, v in zip(this.kinds, values)
            ]
            key.append(tuple(call.fresh))
            key.append(tuple(call.types))
            if this.lowering.size is not None:
                key.append(this._sizes(tuple(key), call))
            key = tuple(key)
            if this.lowering.random:
                call.scalars.extend(rng_inputs())
            entry = this.cache.get(key)
            if entry is None:
                start = time.perf_counter()
                entry = _Entry()
                writable = written_slots([key[i] for i in this.mutated])
                donated = buffer_positions(writable, key[len(this.kinds)])
                entry.fn = jitted(this._traceable(key, entry, writable), donated, len(call.buffers))
                outputs, new_buffers, flags = entry.fn(call.buffers, call.scalars)
                _bounded_insert(this.cache, key, entry)
                seconds = time.perf_counter() - start
                metrics.miss(this.name, seconds)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("built %s for %s in %.1f ms", this.name, _signature(call), seconds * 1e3)
            else:
                _hits[this.name] += 1
                outputs, new_buffers, flags = entry.fn(call.buffers, call.scalars)
        except Exception as error:
            this._name_error(error, call)
            raise
        if entry.checks:
            _failed.append((flags, entry.checks, this.name))
            if len(_failed) > _MAX_PENDING:
                raise_failed_checks()
        for slot, buf in zip(entry.mutated_slots, new_buffers):
            call.allocs[slot].buffer = buf
        return this._returns(entry, outputs, values)

    def _name_error(self, error: Exception, call: Call) -> None:
        """Prefix an error a lowering raised (PyTorch's message) with the op and its dtypes."""
        message = error.args[0] if error.args else None
        if isinstance(message, str) and not message.startswith("neuron:"):
            dtypes = ", ".join(str(t.dtype).removeprefix("torch.") for t in call.tensors)
            error.args = (f"neuron: {self.name} ({dtypes} on neuron): {message}", *error.args[1:])

    def _sizes(self, key: tuple, call: Call) -> Any:
        """Run the lowering's size pass on this call's inputs; its values as Python ints."""
        entry = self.size_cache.get(key)
        if entry is None:
            entry = _Entry()
            entry.fn = jax.jit(self._traceable(key, entry, sizing=True))
            outputs, _, _ = entry.fn(call.buffers, call.scalars)
            _bounded_insert(self.size_cache, key, entry)
        elif entry.tree.num_leaves:
            outputs, _, _ = entry.fn(call.buffers, call.scalars)
        else:
            return None
        return jax.tree_util.tree_unflatten(entry.tree, [int(x[0]) for x in jax.device_get(outputs)])

    def _arg_key(self, kind: int, v: Any, call: Call) -> Any:
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
            if isinstance(v, _DYNAMIC_SCALARS):
                call.scalars.append(v)
                return type(v)
            if type(v) in _NUMBERS:
                call.types.append(type(v))
            return v
        if kind == OPT_TENSOR:
            return None if v is None else call.tensor(v, self.op)
        if kind == SCALAR_LIST:
            return tuple(self._arg_key(SCALAR, x, call) for x in v)
        return tuple(None if t is None else call.tensor(t, self.op) for t in v)

    def _returns(self, entry: _Entry, outputs: list, values: list) -> Any:
        if entry.single:
            return tensor_on_new_storage(*entry.out_meta[0], outputs[0])
        if self.item_returns:
            leaves = [np.asarray(o).item() for o in outputs]
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

    def _traceable(self, key: tuple, entry: Any, writable: list[int] = (), sizing: bool = False) -> Callable:
        kinds, lowering = self.kinds, self.lowering
        mutated = self.mutated if not sizing else []
        arg_keys = key[: len(kinds)]
        fresh = key[len(kinds)]

        def run(buffers: list, scalars: list) -> tuple:
            storage = load_storages(buffers, fresh)
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
                kwargs["size"] = key[len(kinds) + 2]
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
                entry.mutated_slots = with_donated(entry.mutated_slots, writable, fresh)
            leaves, entry.tree = jax.tree_util.tree_flatten(result)
            leaves = [jnp.asarray(x) for x in leaves]
            entry.out_meta = [_out_meta(tuple(x.shape), TO_TORCH[np.dtype(x.dtype)]) for x in leaves]
            entry.single = not mutated and not self.item_returns and entry.tree.num_nodes == entry.tree.num_leaves == 1
            return [x.reshape(-1) for x in leaves], [storage[s] for s in entry.mutated_slots], flags

        run.__name__ = run.__qualname__ = module_name(self.name)  # names the XLA module (profiles, dumps)
        return run

    def mutations(self, result: Any, args: list) -> tuple[list, Any]:
        """Split a mutating lowering's result into (written argument, new value) pairs, one per
        tensor (lists unrolled, None skipped), and the fresh results (None if the op has none).
        `args` holds the call's arguments in schema order, in whatever form the caller keeps them."""
        fresh_results = None
        if any(source is None for source in self.returns):
            result, fresh_results = result
        single = len(self.mutated) == 1
        if single or not isinstance(result, (tuple, list)):
            result = (result,)
        pairs = []
        for index, value in zip(self.mutated, result):
            targets = args[index] if self.kinds[index] == TENSOR_LIST else (args[index],)
            vals = value if self.kinds[index] == TENSOR_LIST else (value,)
            pairs.extend((t, v) for t, v in zip(targets, vals) if t is not None and v is not None)
        return pairs, fresh_results

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
