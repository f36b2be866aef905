"""The coverage ladder: which kernel serves an ATen overload on neuron (DESIGN 5).

own lowering -> lowering of the functional twin (in-place, out=) -> PyTorch's composite
kernel or decomposition, which stay on device -> CPU fallback (counted, warned once, or an error when
TORCH_NEURONX_DISABLE_FALLBACK=1). Storage kernels (factories, copies, resize) and views come first.
Kernels are built on an op's first call and kept in KERNELS; the first build also loads the
lowering registry and gives lowered overloads that PyTorch serves with a CompositeExplicitAutograd
kernel (convolution, embedding, ...) a direct PrivateUse1 kernel, since that composite would
otherwise win over the backend fallback and the lowering would never run.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

from .. import ops
from ..ops import Lowering, is_mutating
from ..ops._common import scalar_type_name, type_meta_name
from ..ops._dtypes import BITS, jax_dtype, torch_dtype
from ..runtime import checks, native
from . import metrics
from .arguments import Binder
from .kernel import Kernel
from .storage_io import scalar_input
from .storage_kernels import COMPLEX32_KERNELS, STORAGE_KERNELS, CpuKernel, ToCopy, transfer

OpOverload = torch._ops.OpOverload
KERNELS: dict[OpOverload, Callable[..., Any]] = {}
_LIBRARIES: list[torch.library.Library] = []
_NATIVE = native.module()
_TENSOR_OPTIONS = {"dtype", "layout", "device", "pin_memory"}
_state = threading.local()
_lowerings_lock = threading.Lock()


def kernel_for(op: OpOverload) -> Callable[..., Any]:
    kernel = KERNELS.get(op)
    if kernel is None:
        # threads building the same op at once all use the first kernel stored
        kernel = KERNELS.setdefault(op, build(op))
    return kernel


def _lowerings() -> dict[OpOverload, Lowering]:
    """The lowering registry, loaded once. Without the native module, lowered composite
    overloads are routed here now; with it, `connect_native` routes them to its kernel."""
    with _lowerings_lock:  # threads making their first kernels at once must not route twice
        return _load_lowerings()


@functools.cache
def _load_lowerings() -> dict[OpOverload, Lowering]:
    lowerings = ops.load()
    if _NATIVE is None:
        library = torch.library.Library("aten", "IMPL")
        for op in _routed(lowerings):
            library.impl(op.name().split("::", 1)[1], _direct(op), "PrivateUse1")
        _LIBRARIES.append(library)
    return lowerings


def _routed(lowerings: dict[OpOverload, Lowering]) -> list[OpOverload]:
    """Lowered overloads whose CompositeExplicitAutograd kernel would otherwise decompose them."""
    return [
        op
        for op in lowerings
        if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeExplicitAutograd")
        and not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1")
    ]


def _direct(op: OpOverload) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return kernel_for(op)(*args, **kwargs)

    return kernel


_CPU_SCALAR_DTYPES = (
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)


def connect_native(entry: Callable[..., Any]) -> None:
    """Give the native module what its kernel needs from Python: `entry(op, *args, **kwargs)`
    runs a call in Python, `describe` says how to serve each op, `scalar_input` makes a scalar's
    device array, the deferred-check queue, and the numpy dtype a CPU scalar tensor's value
    takes (as in `CallInputs.foreign`)."""
    numpy_dtypes = {dtype: jax_dtype(dtype) for dtype in _CPU_SCALAR_DTYPES}
    _NATIVE.configure(
        entry, describe, scalar_input, checks.PENDING, checks.raise_failed, checks.MAX_PENDING, numpy_dtypes
    )
    # only now: the native kernel needs what `configure` gave it
    _NATIVE.register_kernels([op.name().split("::", 1)[1] for op in _routed(_lowerings())], fallback=False)


_EMPTY = {torch.ops.aten.empty.memory_format: "empty", torch.ops.aten.empty_strided.default: "empty_strided"}


def describe(op: OpOverload) -> list[int] | str | None:
    """How the native kernel serves `op`: the argument kinds of a keyed lowering kernel (it keys
    the calls and serves those it has an executable for), "cpu" for a CPU kernel (it redispatches
    itself), "empty"/"empty_strided" for the allocating storage kernels (it makes the tensor
    itself where the arguments are plain), None for any other kernel (it runs this module's)."""
    try:
        kernel = kernel_for(op)
    except Exception:  # the call itself reports the error, through the Python kernel
        return None
    if isinstance(kernel, CpuKernel):
        return "cpu"
    if op in _EMPTY:
        return _EMPTY[op]
    if isinstance(kernel, Kernel) and kernel.keyed:
        return list(kernel.kinds)
    return None


def build(op: OpOverload) -> Callable[..., Any]:
    lowerings = _lowerings()
    if op in STORAGE_KERNELS:
        return STORAGE_KERNELS[op]
    if op is torch.ops.aten._to_copy.default:
        return ToCopy(op, lowerings[op], keyed=True, fallback=transfer)
    if op in lowerings:
        return Kernel(op, lowerings[op], keyed=True, fallback=COMPLEX32_KERNELS.get(op) or CpuFallback(op))
    if _is_view(op) or torch.Tag.inplace_view in op.tags:  # (in-place) views change metadata only
        return CpuKernel(op)
    twin = functional_twin(op)
    if twin is not None and twin in lowerings:
        if _out_indices(op):
            return OutKernel(op, twin)
        return Kernel(op, _inplace(lowerings[twin], str(op)), keyed=True, fallback=CpuFallback(op))
    if _has_composite(op):
        return CpuKernel(op)
    decomposition = _decompositions().get(op)
    if decomposition is not None:
        return Decomposed(op, decomposition)
    return CpuFallback(op)


def _has_composite(op: OpOverload) -> bool:
    """An op routed here over its CompositeExplicitAutograd kernel (`_register`: the `_foreach_*`
    family) runs that kernel when it has no lowering; its pieces dispatch back to neuron. With no
    CPU kernel of its own, the composite fills the CPU slot, so redispatching to CPU reaches it."""
    name = op.name()
    return torch._C._dispatch_has_kernel_for_dispatch_key(
        name, "CompositeExplicitAutograd"
    ) and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")


def _is_view(op: OpOverload) -> bool:
    returns = op._schema.returns
    return (
        len(returns) == 1
        and returns[0].alias_info is not None
        and not returns[0].alias_info.is_write
        and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU")
    )


def _out_indices(op: OpOverload) -> list[int]:
    return [i for i, a in enumerate(op._schema.arguments) if a.is_out]


def functional_twin(op: OpOverload) -> OpOverload | None:
    """`add_.Tensor` -> `add.Tensor`; `add.out` -> `add.Tensor` (matched by argument names)."""
    if not is_mutating(op):
        return None
    name = op._schema.name.split("::")[1]
    packet = getattr(torch.ops.aten, name.rstrip("_"), None) if name.endswith("_") else op._overloadpacket
    if packet is None:
        return None
    if name.endswith("_"):
        twin = getattr(packet, op._overloadname, None)
        return twin if twin is not None and not is_mutating(twin) else None
    wanted = [a.name for a in op._schema.arguments if not a.is_out]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        names = [a.name for a in candidate._schema.arguments]
        if not is_mutating(candidate) and [n for n in names if n in wanted or n not in _TENSOR_OPTIONS] == wanted:
            return candidate
    return None


def _inplace(functional: Lowering, name: str) -> Lowering:
    """Derive an in-place lowering: the functional result must fit `self` and cast to it."""

    def fn(self: Any, *rest: Any, **kwargs: Any) -> Any:
        result = functional.fn(self, *rest, **kwargs)
        pairs = zip(self, result) if isinstance(self, list) else [(self, result)]
        for target, value in pairs:
            if tuple(value.shape) != tuple(target.shape):
                raise RuntimeError(
                    f"neuron: {name}: output with shape {list(target.shape)} doesn't match the "
                    f"broadcast shape {list(value.shape)}"
                )
            _check_cast(torch_dtype(value), torch_dtype(target), name)
        return result

    return dataclasses.replace(functional, fn=fn)


def _check_cast(result: torch.dtype, out: torch.dtype, name: str) -> None:
    if not torch.can_cast(result, out):
        raise RuntimeError(f"neuron: {name}: result type {result} can't be cast to the desired output type {out}")


class OutKernel:
    """`op.out(...)`: run the functional twin, then resize `out` if needed and copy into it."""

    def __init__(self, op: OpOverload, twin: OpOverload) -> None:
        self.name = str(op)
        self.bind = Binder(op._schema)
        self.outs = _out_indices(op)
        self.inputs = [i for i in range(len(op._schema.arguments)) if i not in self.outs]
        twin_names = {a.name for a in twin._schema.arguments}
        own_names = {a.name for a in op._schema.arguments}
        self.takes_dtype = "dtype" in twin_names and "dtype" not in own_names
        self.input_names = [op._schema.arguments[i].name for i in self.inputs]
        base = op._schema.name.removeprefix("aten::")
        self.exact_dtype, self.exact_alias_ok = base in _EXACT_DTYPE_OUT, base not in _NO_ALIAS_OUT
        self.structured = bool({base, f"{base}.{op._overloadname}"} & _STRUCTURED_OUT)
        self.base, self.out_dtype = base, _OUT_DTYPE.get(base)
        self.twin = kernel_for(twin)

    def __call__(this, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - `self` is an ATen argument name
        values = this.bind(args, kwargs)
        outs = [values[i] for i in this.outs]
        call_kwargs = {n: values[i] for n, i in zip(this.input_names, this.inputs)}
        _check_overlap(this.name, outs, [v for i in this.inputs for v in _tensors(values[i])], this.exact_alias_ok)
        if this.out_dtype is not None and outs[0].dtype != this.out_dtype:
            want, got = scalar_type_name(this.out_dtype), scalar_type_name(outs[0].dtype)
            raise RuntimeError(f"neuron: {this.name}: {this.base} expects {want} tensor out, got: {got}")
        if this.takes_dtype:
            call_kwargs["dtype"] = outs[0].dtype
        result = this.twin(**call_kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        for out, value in zip(outs, results):  # every out is checked before any is written
            this.check_dtype(value.dtype, out.dtype)
        for out, value in zip(outs, results):
            if out.shape != value.shape:
                out.resize_(value.shape)
            out.copy_(value)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def check_dtype(this, result: torch.dtype, out: torch.dtype) -> None:  # noqa: N805 - as __call__
        if this.exact_dtype and result != out:
            got, want = scalar_type_name(result), scalar_type_name(out)
            raise RuntimeError(
                f"neuron: {this.name}: Expected the dtype for input and out to match, but got {got} for input's "
                f"dtype and {want} for out's dtype."
            )
        if this.structured and result != out:
            want, got = type_meta_name(result), type_meta_name(out)
            raise RuntimeError(f"neuron: {this.name}: Expected out tensor to have dtype {want}, but got {got} instead")
        _check_cast(result, out, this.name)


_EXACT_DTYPE_OUT = {"amax", "amin"}  # out= must have the input's dtype, no casting
# Structured kernels that fix their outputs' dtype (not from `out`, as TensorIterator ops and
# sum/mean/cumsum do): their generated out= wrapper refuses any other dtype (resize_out). By
# schema name, or name.overload where other overloads of the name allow casting (max.out).
_STRUCTURED_OUT = {
    "aminmax", "gather", "sort", "topk", "argmax", "argmin", "max.dim_max", "min.dim_min", "scatter", "scatter_add",
    "scatter_reduce", "index_add", "index_copy", "index_reduce", "mm", "addmm", "bmm", "baddbmm", "addmv", "mv",
    "_addmm_activation", "tril", "triu", "_softmax", "_log_softmax", "linalg_vector_norm", "norm", "linalg_cross",
    "nll_loss_forward", "isin", "avg_pool2d", "avg_pool3d", "max_pool2d_with_indices", "adaptive_max_pool2d",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "upsample_trilinear3d", "upsample_bicubic2d",
}  # fmt: skip
_OUT_DTYPE = {"multinomial": torch.int64}  # out= must have this dtype, checked before computing
# out= ops that refuse an `out` sharing any memory with an input, even exactly (PyTorch's
# assert_no_overlap); the others refuse only a partial overlap, as TensorIterator does.
_NO_ALIAS_OUT = {"gather", "index_select", "take", "masked_select", "kthvalue", "bernoulli", "take_along_dim"}
_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)
_INTERNAL_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [v for v in value if isinstance(v, torch.Tensor)] if isinstance(value, (list, tuple)) else []


def _check_overlap(name: str, outs: list[torch.Tensor], inputs: list[torch.Tensor], exact_ok: bool) -> None:
    """PyTorch's memory-overlap rules for `out=` (at::has_internal_overlap, get_overlap_status):
    an `out` may not write one element twice (a stride-0 dim) nor partially overlap an input;
    nor overlap it exactly unless `exact_ok`."""
    for out in outs:
        if any(stride == 0 and size > 1 for size, stride in zip(out.shape, out.stride())):
            raise RuntimeError(f"neuron: {name}: {_INTERNAL_OVERLAP}")
        for x in inputs:
            if _overlap(out, x) and not (exact_ok and _same_memory(out, x)):
                raise RuntimeError(f"neuron: {name}: {_OVERLAP}")


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    if not (is_non_overlapping_and_dense(a) and is_non_overlapping_and_dense(b)):
        return False  # PyTorch's TOO_HARD: not checked
    start_a, start_b = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    return start_a < start_b + b.numel() * b.element_size() and start_b < start_a + a.numel() * a.element_size()


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    def layout(t: torch.Tensor) -> tuple:
        return t.storage_offset() * t.element_size(), t.shape, t.stride(), t.element_size()

    return layout(a) == layout(b)


def _decompositions() -> dict:
    from torch._decomp import decomposition_table

    return decomposition_table


class Decomposed:
    """Run PyTorch's decomposition of `op`; its pieces dispatch back to neuron."""

    def __init__(self, op: OpOverload, fn: Callable[..., Any]) -> None:
        self.op, self.fn, self.name = op, fn, str(op)

    def __call__(this, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - `self` is an ATen argument name
        active = _state.__dict__.setdefault("decomposing", set())
        if this.op in active or _names_complex32(args, kwargs):
            # complex32 as a lowered op meets it (`Kernel`): its pieces might compute what CPU
            # refuses, so PyTorch's CPU kernel decides
            return CpuFallback(this.op)(*args, **kwargs)
        active.add(this.op)
        try:
            metrics.decompositions[this.name] += 1
            return this.fn(*args, **kwargs)
        finally:
            active.discard(this.op)


def _names_complex32(args: tuple, kwargs: dict) -> bool:
    return any(
        (v.dtype if isinstance(v, torch.Tensor) else v) in BITS
        for v in torch.utils._pytree.tree_leaves((args, kwargs))
        if isinstance(v, (torch.Tensor, torch.dtype))
    )


def fallback_disabled() -> bool:
    return os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK", "0") not in ("", "0", "false", "False")


_warned: set[str] = set()


class CpuFallback:
    """Copy neuron tensors to CPU, run the CPU kernel, copy results and mutations back."""

    def __init__(self, op: OpOverload) -> None:
        self.op, self.name = op, str(op)
        self.mutated = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        self.bind = Binder(op._schema)

    def __call__(this, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - `self` is an ATen argument name
        if fallback_disabled():
            raise NotImplementedError(
                f"neuron: no lowering for {this.name} and TORCH_NEURONX_DISABLE_FALLBACK=1 forbids the CPU "
                "fallback. Unset it to run this op on CPU, or add a lowering in torch_neuronx/ops."
            )
        if this.name not in _warned:
            _warned.add(this.name)
            warnings.warn(
                f"neuron: {this.name} has no device lowering; running it on CPU (copies in and out). "
                "Set TORCH_NEURONX_DISABLE_FALLBACK=1 to make this an error.",
                stacklevel=3,
            )
        metrics.fallbacks[this.name] += 1
        values = this.bind(args, kwargs)
        names = this.bind.names
        cpu_values = [_to_cpu(v, name) for v, name in zip(values, names)]
        result = this.op(*cpu_values[: len(args)], **dict(zip(names[len(args) :], cpu_values[len(args) :])))
        mutated = {}
        for name in this.mutated:
            original, on_cpu = values[names.index(name)], cpu_values[names.index(name)]
            pairs = zip(original, on_cpu) if isinstance(original, (list, tuple)) else [(original, on_cpu)]
            for dst, src in pairs:
                if isinstance(dst, torch.Tensor):
                    if dst.shape != src.shape:
                        dst.resize_(src.shape)
                    dst.copy_(src)
                    mutated[id(src)] = dst
        return torch.utils._pytree.tree_map(lambda r: _back(r, mutated), result)


def _to_cpu(value: Any, name: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu() if value.device.type == "neuron" else value
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v, name) for v in value)
    if isinstance(value, torch.device) or (name == "device" and value is not None):
        return torch.device("cpu")
    return value


def _back(value: Any, mutated: dict) -> Any:
    if isinstance(value, torch.Tensor):
        return mutated[id(value)] if id(value) in mutated else value.to("neuron")
    return value
