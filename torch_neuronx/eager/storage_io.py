"""Executables over device storages, shared by eager kernels and compiled graphs (DESIGN 2-3).

Host side: `CallInputs` turns one call's tensors into executable inputs, each distinct storage
once (its slot), and gives each tensor its key (slot, dtype, shape, strides, offset, math bits);
`jitted` builds the executable, donating the buffers of the storages it writes; `rng_inputs`
draws from the device RNG state. Trace side: `load_storages` gives each slot's buffer,
`read_tensor` reads a tensor through its geometry and `write_tensor` scatters a value back into
its storage, so every alias sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax.sharding import SingleDeviceSharding

from ..ops._dtypes import BITS, TO_TORCH, buffer_dtype, from_bits, jax_dtype, to_bits
from ..ops.geometry import Geometry, read, write
from ..runtime.memory import memory
from ..runtime.platform import device
from ..runtime.rng import RNG

DYNAMIC_SCALARS = (float, complex)  # Python numbers passed as executable inputs, keyed by type
_MEMORY = memory()
_SCALAR_INPUTS: dict[tuple, Any] = {}
MAX_SCALAR_INPUTS = 4096


def scalar_input(value: Any, dtype: Any = None) -> Any:
    """The device array an executable takes for a scalar input: a Python float or complex stays
    weakly typed (as JAX types the number itself); with a numpy `dtype` (a CPU scalar tensor's)
    it has that dtype. Kept by value (up to MAX_SCALAR_INPUTS), since moving a host scalar to
    the device costs more than the small op it feeds; the native module keeps its own."""
    key = (dtype, type(value), repr(value))  # repr: -0.0 and 0.0 are equal dict keys
    array = _SCALAR_INPUTS.get(key)
    if array is None:
        if len(_SCALAR_INPUTS) >= MAX_SCALAR_INPUTS:
            _SCALAR_INPUTS.clear()
        host = value if dtype is None else np.asarray(value, dtype)
        array = _SCALAR_INPUTS[key] = jax.device_put(host, device())
    return array


class CallInputs:
    """One call's executable inputs: its distinct storages (slots) and dynamic scalars."""

    __slots__ = ("allocs", "buffers", "held", "scalars", "slots", "tensors", "types", "unwritten")

    def __init__(self) -> None:
        self.slots: dict[int, int] = {}  # storage address -> slot
        self.allocs: list = []  # per slot
        self.buffers: list = []  # of the slots' storages that hold one, in slot order
        self.unwritten: list = []  # per slot: None, or (nbytes, dtype) of a never-written storage
        self.held: list = []  # per buffer: its storage's (nbytes, dtype), which fix its shape and dtype
        self.scalars: list = []
        self.tensors: list = []
        self.types: list = []  # of the numbers keyed by value, in argument order

    def tensor(self, t: torch.Tensor, op: Any) -> tuple:
        """The key of tensor `t`: (slot, dtype, shape, strides, offset, conj | neg << 1)."""
        try:
            addr = t.untyped_storage().data_ptr()
            slot = self.slots.get(addr)
            if slot is None:
                alloc = _MEMORY[addr]
                slot = self.slots[addr] = len(self.allocs)
                self.allocs.append(alloc)
                buffer = alloc.buffer
                if buffer is None:
                    self.unwritten.append((alloc.nbytes, alloc.dtype))
                else:
                    self.unwritten.append(None)
                    self.buffers.append(buffer)
                    self.held.append((alloc.nbytes, alloc.dtype))
        except (KeyError, AttributeError):
            return self.foreign(t, op)
        self.tensors.append(t)
        return (slot, t.dtype, t.shape, t.stride(), t.storage_offset(), t.is_conj() | t.is_neg() << 1)

    def foreign(self, t: Any, op: Any) -> tuple:
        """A CPU scalar tensor joins as a value (as CUDA allows); any other device is an error."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"neuron: {op} expected a Tensor, got {type(t).__name__}")
        if t.device.type == "cpu" and t.dim() == 0:
            # a complex32 value joins as complex64; its key names complex32, which keeps it off lowerings
            value_dtype = torch.complex64 if t.dtype in BITS else t.dtype
            self.scalars.append(scalar_input(t.item(), jax_dtype(value_dtype)))
            return ("cpu0", t.dtype)
        raise RuntimeError(
            f"neuron: {op} expected all tensors to be on the same device, but found at least two "
            f"devices, neuron:0 and {t.device}! Move the tensor with .to('neuron') first."
        )

    def signature(self) -> str:
        """The call's tensors in words, for logs."""
        return ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in self.tensors) or "no tensors"


def is_tensor_key(k: Any) -> bool:
    """Whether a key part is a `CallInputs.tensor` key."""
    return isinstance(k, tuple) and len(k) == 6 and isinstance(k[0], int)


def names_bits_dtype(arg_keys: Any) -> bool:
    """Whether a call's argument keys name a storage-only dtype (`_dtypes.BITS`): a tensor of it
    or it as an argument (`dtype=torch.complex32`). Only arguments count: a float16 view of a
    complex32 storage reads real float16 values."""
    if isinstance(arg_keys, torch.dtype):
        return arg_keys in BITS
    if is_tensor_key(arg_keys):
        return arg_keys[1] in BITS
    return isinstance(arg_keys, tuple) and any(names_bits_dtype(k) for k in arg_keys)


# ---- inside a trace -------------------------------------------------------------------------


def typed(buf: Any, dtype: torch.dtype) -> Any:
    """View a storage buffer's bytes as `dtype` elements (a tensor.view(dtype) on device)."""
    target = buffer_dtype(dtype)
    if buf.dtype == target:
        return buf
    if buf.dtype == jnp.bool_:
        buf = buf.astype(jnp.uint8)
    if target == jnp.bool_:
        return typed(buf, torch.uint8) != 0
    if jnp.issubdtype(buf.dtype, jnp.complexfloating):  # XLA cannot bitcast complex: split it
        parts = jnp.stack([jnp.real(buf), jnp.imag(buf)], axis=-1).reshape(-1)
        return typed(parts, TO_TORCH[np.dtype(parts.dtype)])
    if jnp.issubdtype(target, jnp.complexfloating):
        part = jnp.finfo(target).dtype
        pairs = typed(buf, TO_TORCH[np.dtype(part)]).reshape(-1, 2)
        return jax.lax.complex(pairs[:, 0], pairs[:, 1])
    src, dst = buf.dtype.itemsize, np.dtype(target).itemsize
    if src == dst:
        return jax.lax.bitcast_convert_type(buf, target)
    if src > dst:
        return jax.lax.bitcast_convert_type(buf, target).reshape(-1)
    return jax.lax.bitcast_convert_type(buf.reshape(-1, dst // src), target)


def untyped(value: Any, like: Any) -> Any:
    """Inverse of `typed`: bytes of `value` as the storage buffer's dtype."""
    if value.dtype == like.dtype:
        return value
    return typed(value, TO_TORCH[np.dtype(like.dtype)])


def load_storages(buffers: list, unwritten: tuple) -> list:
    """Each slot's storage buffer, zeros for never-written storages (`tuple(CallInputs.unwritten)`)."""
    bufs = iter(buffers)
    return [jnp.zeros(u[0] // u[1].itemsize, buffer_dtype(u[1])) if u else next(bufs) for u in unwritten]


def _math_bits(value: Any, bits: int) -> Any:
    """Apply a lazy conjugate (bit 0) / negative (bit 1) view's math; each is its own inverse."""
    value = jnp.conj(value) if bits & 1 else value
    return -value if bits & 2 else value


def read_tensor(storage: list, key: tuple) -> Any:
    """The tensor described by `key` (from `CallInputs.tensor`), read through its geometry."""
    slot, dtype, shape, strides, offset, bits = key
    value = read(typed(storage[slot], dtype), Geometry(tuple(shape), strides, offset))
    return _math_bits(from_bits(value) if dtype in BITS else value, bits)


def write_tensor(storage: list, key: tuple, value: Any) -> int:
    """Scatter `value` into the storage of the tensor described by `key` through its geometry
    (every alias of that storage sees it); returns the slot written."""
    slot, dtype, shape, strides, offset, bits = key
    buf = storage[slot]
    if dtype in BITS:
        value = to_bits(_math_bits(value, bits))
    else:
        value = _math_bits(value.astype(jax_dtype(dtype)), bits)
    storage[slot] = untyped(write(typed(buf, dtype), Geometry(tuple(shape), strides, offset), value), buf)
    return slot


# ---- building an executable -----------------------------------------------------------------


def written_slots(arg_keys: Any) -> list[int]:
    """The storage slots behind `arg_keys` (tensor keys, or tuples of them, of the arguments a
    call may write), in slot order."""
    slots = set()
    for k in arg_keys:
        for t in (k,) if is_tensor_key(k) else k if isinstance(k, tuple) else ():
            if is_tensor_key(t):
                slots.add(t[0])
    return sorted(slots)


def with_donated(written: list[int], writable: list[int], unwritten: tuple) -> list[int]:
    """The slots a trace writes, plus every writable slot holding a buffer that it left alone:
    that buffer was donated to the call, so the storage gets it back (unchanged) as new."""
    return written + [s for s in writable if unwritten[s] is None and s not in written]


def buffer_positions(slots: list[int], unwritten: tuple) -> list[int]:
    """Where the buffers of `slots` sit in `CallInputs.buffers` (never-written storages have none)."""
    held = [slot for slot, u in enumerate(unwritten) if u is None]
    return [i for i, slot in enumerate(held) if slot in slots]


def jitted(run: Callable, donated: list[int], count: int) -> Callable:
    """`run(buffers, scalars)` (lists, `count` buffers) returning (outputs, written buffers) and
    optionally device-check flags (None for none), as one executable: it takes the buffers then
    the scalars as positional arguments and returns one flat tuple, outputs then written buffers
    then the flags, so a call builds no containers. It may overwrite the buffers at `donated`
    (storages the call writes, whose old contents die with it) instead of allocating new ones.
    Its results are committed to the device whatever its inputs: JAX keys its compile cache on
    that, so a factory's uncommitted results would make every executable they reach lower and
    compile (or load) a second time once computed buffers arrive."""

    def flat(*args: Any) -> tuple:
        outputs, written, *flags = run(list(args[:count]), list(args[count:]))
        return (*outputs, *written, *(f for f in flags if f is not None))

    flat.__name__ = flat.__qualname__ = run.__name__
    return jax.jit(flat, donate_argnums=tuple(donated), out_shardings=SingleDeviceSharding(device()))


# ---- random numbers -------------------------------------------------------------------------


def rng_inputs(count: int = 1) -> list:
    """Executable inputs for the next `count` draws from the device RNG state."""
    seed, offset = RNG.next(count)
    return [np.uint64(seed), np.uint32(offset & 0xFFFFFFFF), np.uint32(offset >> 32)]


def device_key(seed: Any, lo: Any, hi: Any) -> Any:
    """Inside a trace: the jax PRNG key of one random op, the device seed folded with its offset."""
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
