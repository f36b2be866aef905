"""Make `neuron` a PyTorch device: PrivateUse1 rename, the `torch.neuron` module, hooks, the
dispatcher fallback that routes every ATen op to our kernels, and the AMP dtype hook.

Runs at `import torch` (autoload entry point) and must stay cheap: no JAX import here. Until the
first device op, a Python fallback serves every op; that op loads the eager machinery and, where
the native module is active (`runtime/native.py`), hands every op to the native kernel instead,
which calls back into `_dispatch` only for what it does not serve itself.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from . import _autocast, device, pinned, storage
from .runtime import deferred, native, profiler

_done = False
_libraries: list[torch.library.Library] = []


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


_kernels: dict = {}  # eager.dispatch.KERNELS once the eager machinery has loaded
_python_kernels: list[torch.library.Library] = []  # the Python fallback and overrides
_lock = threading.Lock()


def _dispatch(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """Every neuron op enters here; the eager machinery (and JAX) loads on first use.

    TorchDynamo's frame hook is off while a kernel runs. Code that runs eagerly inside a compiled
    function (a frame Dynamo gave up on, between graphs) still has its callees offered to Dynamo,
    and a kernel must run, never be traced: skip rules name our package and JAX, but JAX also runs
    dataclass `__init__`s generated from `<string>`, which no rule can name. A call that uses a
    storage still waiting for a collective (`runtime/deferred.py`) completes that first; a view
    only reads metadata."""
    kernel = _kernels.get(op)
    if kernel is None:
        kernel = _kernel_for(op)
    hook = set_eval_frame(None)
    try:
        if deferred.active() and not op.is_view:
            deferred.settle_uses((*args, *kwargs.values()))
        return kernel(*args, **kwargs)
    finally:
        set_eval_frame(hook)


SPARSE_REFUSED = (
    "sparse layouts are not supported on the neuron device: keep sparse tensors on CPU, and convert "
    "them with .to_dense() on CPU before moving them to neuron"
)


# What makes a sparse tensor from dense neuron ones: a compressed (CSR, ...) tensor is assembled
# by composites from dense parts, never reaching a sparse dispatch key, and would come out broken.
_SPARSE_MAKERS = (
    "_to_sparse",
    "_to_sparse.sparse_dim",
    "_to_sparse_csr",
    "_to_sparse_csc",
    "_to_sparse_bsr",
    "_to_sparse_bsc",
    "_sparse_compressed_tensor_unsafe",
    "_sparse_csr_tensor_unsafe",
    "_sparse_csc_tensor_unsafe",
    "_sparse_bsr_tensor_unsafe",
    "_sparse_bsc_tensor_unsafe",
)


def _refuse_sparse(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Every op on a sparse neuron tensor, and every op making one (as `.to("neuron")` of a sparse
    CPU tensor does): PyTorch's own error would name a `Sparseneuron` backend, or none at all."""
    raise NotImplementedError(f"neuron: {op}: {SPARSE_REFUSED}")


def _kernel_for(op: torch._ops.OpOverload) -> Any:
    global _kernels
    from .eager import dispatch

    with _lock:
        if _python_kernels and native.module() is not None:
            dispatch.connect_native(_dispatch)
            for library in _python_kernels:
                library._destroy()
            _python_kernels.clear()
            native.module().register_kernels(_overridden(), fallback=True)
            profiler.register()
    _kernels = dispatch.KERNELS
    return dispatch.kernel_for(op)


def _overridden() -> list[str]:
    """Ops whose CompositeExplicit kernels would shadow the fallback: structured ops (whose
    composite makes an empty output and calls `.out`), the `_foreach_*` ops (whose composite
    loops over single-tensor ops; one executable serves the whole list instead, and the ladder
    still runs that composite when an op has no lowering; `.out` forms keep theirs, which call
    the functional op), `_chunk_cat.out` (FSDP2's reduce-scatter input; its composite zeroes and
    copies chunk by chunk) and the transfers we do directly."""
    structured = torch._C._dispatch_get_registrations_for_dispatch_key("CompositeExplicitAutogradNonFunctional")
    names = [n[len("aten::") :] for n in structured if n.startswith("aten::")]
    foreach = [
        n[len("aten::") :]
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::_foreach_") and not n.endswith("out")
    ]
    return [*names, *foreach, "_chunk_cat.out", "copy_", "_to_copy", "_copy_from", "_copy_from_and_resize"]


def register() -> None:
    """Idempotent: set up the `neuron` device and route its ops to torch_neuronx."""
    global _done
    if _done:
        return
    _done = True
    if torch._C._get_privateuse1_backend_name() != "neuron":
        _setup_privateuseone_for_python_backend("neuron", backend_module=device, hook=_Hooks(), device_guard=_Guard())
    storage.register()
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(_dispatch, "PrivateUse1")
    sparse, sparse_makers = torch.library.Library("_", "IMPL"), torch.library.Library("aten", "IMPL")
    for key in ("SparsePrivateUse1", "SparseCsrPrivateUse1"):
        sparse.fallback(_refuse_sparse, key)
    for name in _SPARSE_MAKERS:
        sparse_makers.impl(name, functools.partial(_refuse_sparse, f"aten.{name}"), "PrivateUse1")
    _libraries.extend([sparse, sparse_makers])
    overrides = torch.library.Library("aten", "IMPL")
    for name in _overridden():
        overrides.impl(name, _bound(name), "PrivateUse1")
    _python_kernels.extend([fallback, overrides])
    shallow_copy = torch.library.Library("aten", "IMPL")
    # nn.Module.to() moves a parameter in place (`param.data = moved`, keeping the Parameter
    # object, so tied weights stay tied and optimizers keep their references) only when the two
    # tensor types are shallow-copy compatible; C++ knows the dense CPU/CUDA/XPU/... backends but
    # not PrivateUse1, so every .to("neuron") would replace each Parameter by a new one.
    shallow_copy.impl("_has_compatible_shallow_copy_type", _shallow_copy_compatible, "PrivateUse1")
    _libraries.append(shallow_copy)
    _route_accelerator_synchronize()
    _autocast.register(_libraries)
    pinned.register()
    from .distributed import register as register_distributed

    register_distributed()
    from .compile.registration import install

    install()  # torch.compile(backend="neuron"), without importing torch._dynamo now
    if native.built():  # loading it costs about a millisecond; building it waits for the first device op
        profiler.register()  # before any profiler session, so the first one sees the device


def _shallow_copy_compatible(self: torch.Tensor, src: torch.Tensor) -> bool:
    return (
        self.layout == torch.strided
        and src.layout == torch.strided
        and {self.device.type, src.device.type} <= {"cpu", "neuron"}
    )


def _route_accelerator_synchronize() -> None:
    """torch.accelerator.synchronize asks the C++ device guard, which a Python backend cannot
    implement (only `type_` is overridable); route the neuron case to torch.neuron.synchronize."""
    original = torch.accelerator.synchronize

    def synchronize(device: Any = None) -> None:
        if device is None or torch.device(device).type == "neuron":
            if torch.accelerator.current_accelerator().type == "neuron":
                return torch.neuron.synchronize()
        return original(device)

    synchronize.__doc__ = original.__doc__
    torch.accelerator.synchronize = synchronize


def _bound(name: str) -> Any:
    """A kernel for `name` ("add.Tensor") that resolves its OpOverload on first call."""
    packet, _, overload = name.partition(".")
    resolved: list[torch._ops.OpOverload] = []

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if not resolved:
            resolved.append(getattr(getattr(torch.ops.aten, packet), overload or "default"))
        return _dispatch(resolved[0], *args, **kwargs)

    return kernel
