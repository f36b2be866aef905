"""How one FX node runs inside a compiled executable.

Every ATen node runs through the SAME lowering eager uses (`ops.LOWERINGS`), bound exactly as
the eager kernel binds it (schema order, float scalars weakly typed, everything else static).
View nodes need no lowering: eager serves them as metadata, so here they read the input's
elements through the geometry PyTorch's own meta kernel gives the view. Size arithmetic
(`sym_size`, `operator.mul` on SymInts) is evaluated in Python on the concrete sizes of the
trace. A node whose tensors are all CPU tensors runs on the host in PyTorch CPU; a node with
no rule runs eagerly between compiled regions (or is an error).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import torch
from torch._higher_order_ops.auto_functionalize import AsStridedViewInfo, read_view_information_from_args
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from .. import ops
from ..eager.arguments import STATIC, ArgumentPlan
from ..eager.storage_io import DYNAMIC_SCALARS, typed
from ..ops._dtypes import BITS, torch_dtype
from ..ops.geometry import Geometry, read, write

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload
_AS_STRIDED = {aten.as_strided.default}
_AUTO_FUNCTIONALIZED = torch.ops.higher_order.auto_functionalized_v2
# A custom op with a neuron kernel of its own (`register_kernel(..., "neuron")`) and no JAX body:
# that kernel is its implementation, so it runs between compiled regions, never an error.
OWN_KERNEL = "runs its own neuron kernel (register_kernel) between compiled regions"
_SIZE_QUERIES: dict[Any, Callable[..., Any]] = {
    aten.sym_size.int: lambda x, dim: x.shape[dim],
    aten.sym_numel.default: lambda x: x.size,
}


@dataclass
class Rule:
    """What a compiled executable does for one node."""

    fn: Callable[..., Any] | None  # takes the node's resolved (args, kwargs[, key])
    random: bool = False  # gets `key=` from the device RNG state (one offset per node)
    mutated: list[int] = field(default_factory=list)  # positions of arguments it writes
    reads_storage: bool = False  # as_strided of a graph input: reads the input's storage
    arguments: ArgumentPlan | None = None  # of a mutating op: its binder and return plan, as eager
    host: bool = False  # all its tensors are CPU tensors: PyTorch CPU runs it, outside executables


def tensor_args(node: Node) -> list[Node]:
    found: list[Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), lambda n: found.append(n) if _is_tensor(n) else None)
    return found


def _is_tensor(n: Node) -> bool:
    return isinstance(n.meta.get("val"), torch.Tensor)


def _values(node: Node) -> list[Any]:
    return torch.utils._pytree.tree_leaves(node.meta.get("val"))


def broadcast_operands(nodes: list[Node]) -> set[Node]:
    """Values among `nodes` that a later pointwise node among them broadcasts to a bigger shape.

    XLA fuses a producer into each consumer and recomputes it per OUTPUT element, so a small
    operand computed in the graph (RoPE's cos/sin table, a norm's rsqrt) would be re-evaluated
    for every element it is broadcast to. Such values are materialized once instead."""
    members, found = set(nodes), set()
    for node in nodes:
        if not (isinstance(node.target, OpOverload) and torch.Tag.pointwise in node.target.tags):
            continue
        size = _numel(node)
        for arg in tensor_args(node):
            if arg in members and 1 < _numel(arg) < size:
                found.add(arg)
    return found


def _numel(node: Node) -> int:
    value = node.meta.get("val")
    numel = value.numel() if isinstance(value, torch.Tensor) else 0
    return numel if isinstance(numel, int) else 0


def rule_for(node: Node) -> Rule | str:
    """The node's rule, or the reason it cannot run inside an executable."""
    if _on_host(node):
        return Rule(None, host=True)
    if node.target is operator.getitem:
        return _rule(node)
    inputs = [v for n in tensor_args(node) for v in _values(n) if isinstance(v, torch.Tensor)]
    outputs = [v for v in _values(node) if isinstance(v, torch.Tensor)]
    # CPU scalar tensors join as values, as in eager (a CUDA-like rule); anything else off neuron
    if any(v.device.type != "neuron" for v in outputs) or any(
        v.device.type != "neuron" and not (v.device.type == "cpu" and v.dim() == 0) for v in inputs
    ):
        return "moves data between neuron and another device"
    if any(v.dtype in BITS for v in _tensor_values(node)) or any(a in BITS for a in _dtype_args(node)):
        # a graph's values are arrays of JAX dtypes; eager's kernels hold the complex32 rule
        # (`Lowering.complex32`): on a lowering that handles it, else PyTorch's CPU kernel
        return "has complex32 values, which only eager kernels take"
    return _rule(node)


def _dtype_args(node: Node) -> list[torch.dtype]:
    return [v for v in (*node.args, *node.kwargs.values()) if isinstance(v, torch.dtype)]


def scalar_rule(node: Node) -> Rule | None:
    """The rule that computes a host node inside an executable instead, where its CPU 0-d
    tensors are 0-d arrays (as CPU scalars joining a kernel are); None for anything else."""
    if not all(v.dim() == 0 for v in _tensor_values(node)):
        return None
    rule = _rule(node)
    return rule if isinstance(rule, Rule) and not (rule.mutated or rule.random or rule.reads_storage) else None


def _rule(node: Node) -> Rule | str:
    target = node.target
    if target is operator.getitem:
        return Rule(lambda args, kwargs: args[0][args[1]])
    if free_unbacked_symbols(node.meta.get("val")):
        return "has a data-dependent output shape"
    if target is _AUTO_FUNCTIONALIZED:
        return _auto_functionalized(node)
    if not isinstance(target, OpOverload):
        if any(isinstance(v, torch.Tensor) for v in _values(node)) or tensor_args(node):
            return f"{target} is not an ATen op"
        return Rule(lambda args, kwargs: target(*args, **kwargs))
    if target in _SIZE_QUERIES:
        query = _SIZE_QUERIES[target]
        return Rule(lambda args, kwargs: query(*args, **kwargs))
    lowering = ops.load().get(target)
    if lowering is not None:
        return _lowered(node, target, lowering)
    if is_view(target):
        return _view(node, target)
    if torch._C._dispatch_has_kernel_for_dispatch_key(target.name(), "PrivateUse1"):
        return OWN_KERNEL
    return "has no lowering"


def _on_host(node: Node) -> bool:
    """Every tensor the node reads or makes is a CPU tensor, as an optimizer's step counters
    (`capturable=False`) and the bias corrections computed from them."""
    values = _tensor_values(node)
    return bool(values) and all(v.device.type == "cpu" for v in values)


def _tensor_values(node: Node) -> list[torch.Tensor]:
    """The (fake) tensors the node makes and reads."""
    return [v for n in (node, *node.all_input_nodes) for v in _values(n) if isinstance(v, torch.Tensor)]


def _lowered(node: Node, op: OpOverload, lowering: ops.Lowering) -> Rule | str:
    arguments = ArgumentPlan(op, lowering)  # binds and classifies arguments as eager does
    bind = arguments.bind
    for index in arguments.mutated:
        value = bind(node.args, node.kwargs)[index]
        written = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(w, Node) and w.op != "placeholder" for w in written):
            return "mutates a value computed inside the graph"

    return Rule(_call(arguments, lowering), random=lowering.random, mutated=arguments.mutated, arguments=arguments)


def _call(arguments: ArgumentPlan, lowering: ops.Lowering) -> Callable[..., Any]:
    """The lowering called with a node's resolved (args, kwargs[, key]) bound as the eager kernel
    binds them, its arguments validated first as eager does."""
    bind, kinds, fn, validate = arguments.bind, arguments.kinds, lowering.fn, lowering.validate

    def run(args: tuple, kwargs: dict, key: Any = None) -> Any:
        values = bind(args, kwargs)
        if validate is not None:
            validate(*values)
        for i, (kind, v) in enumerate(zip(kinds, values)):
            if kind != STATIC:  # as eager: float scalars (alone or in a list) weakly typed, not Python floats
                values[i] = [_weak(x) for x in v] if isinstance(v, (list, tuple)) else _weak(v)
        return fn(*values) if key is None else fn(*values, key=key)

    return run


def _auto_functionalized(node: Node) -> Rule | str:
    """A mutating op (a custom op's) as AOTAutograd functionalizes it: each mutated argument a
    view regenerated from one of `_all_bases`, the op's lowering, its new values written into
    the bases through the same geometry; the node's value is (outputs..., new bases), as
    torch's own `auto_functionalized_v2` kernel returns."""
    op = node.args[0]
    lowering = ops.load().get(op)
    if lowering is None:
        return f"{op} has no lowering"
    arguments = ArgumentPlan(op, lowering)
    mutable = [op._schema.arguments[i] for i in arguments.mutated]
    bases = [base.meta["val"] for base in node.kwargs["_all_bases"]]
    names = dict(node.kwargs)
    views = read_view_information_from_args([a.name for a in mutable], [a.type for a in mutable], names, bases)
    infos = [i for v in views.values() for i in (v if isinstance(v, list) else [v]) if i is not None]
    if any(isinstance(i, AsStridedViewInfo) and not _dense_from_start(bases[i.base_index]) for i in infos):
        return "writes an as_strided view of a base that is not contiguous"
    metas = [torch.empty(b.shape, dtype=b.dtype, device="meta") for b in bases]
    geometry = {id(i): _geometry(i.regenerate_view(metas)) for i in infos}
    names = [name for name in names if name != "_all_bases"]
    call_op = _call(arguments, lowering)

    def run(args: tuple, kwargs: dict) -> Any:
        flats = [b.reshape(-1) for b in kwargs["_all_bases"]]

        def view(info: Any) -> Any:
            return None if info is None else read(flats[info.base_index], geometry[id(info)])

        call = {name: kwargs[name] for name in names}
        call.update({n: [view(i) for i in v] if isinstance(v, list) else view(v) for n, v in views.items()})
        result = call_op((), call)
        pairs, fresh = arguments.mutations(result, arguments.bind((), {**call, **views}))
        for info, value in pairs:
            flats[info.base_index] = write(flats[info.base_index], geometry[id(info)], value)
        outputs = [] if fresh is None else list(fresh) if isinstance(fresh, tuple) else [fresh]
        return (*outputs, *(f.reshape(b.shape) for f, b in zip(flats, kwargs["_all_bases"])))

    return Rule(run)


def _dense_from_start(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.storage_offset() == 0


def _geometry(view: torch.Tensor) -> Geometry:
    return Geometry(tuple(view.shape), tuple(view.stride()), view.storage_offset())


def _weak(v: Any) -> Any:
    return jnp.asarray(v) if isinstance(v, DYNAMIC_SCALARS) else v


def is_view(op: OpOverload) -> bool:
    """Every return aliases an input without writing it (eager serves it as metadata)."""
    returns = op._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _view(node: Node, op: OpOverload) -> Rule | str:
    """A view op: PyTorch's meta kernel gives the view's geometry over a contiguous input."""
    source = node.args[0]
    if op in _AS_STRIDED:
        if source.op == "placeholder":
            return Rule(None, reads_storage=True)
        fake = source.meta.get("val")
        if not (isinstance(fake, torch.Tensor) and fake.is_contiguous() and fake.storage_offset() == 0):
            return "as_strided of a non-contiguous intermediate depends on its memory layout"
    if any(isinstance(a, Node) and _is_tensor(a) for a in (*node.args[1:], *node.kwargs.values())):
        return "view op with more than one tensor argument"

    def run(args: tuple, kwargs: dict) -> Any:
        x, rest = args[0], args[1:]
        meta = op(torch.empty(x.shape, dtype=torch_dtype(x), device="meta"), *rest, **kwargs)
        flat = x.reshape(-1)
        if isinstance(meta, torch.Tensor):
            return _read_view(flat, meta)
        return [_read_view(flat, m) for m in meta]

    return Rule(run)


def _read_view(flat: Any, meta: torch.Tensor) -> Any:
    return read(typed(flat, meta.dtype), Geometry(tuple(meta.shape), tuple(meta.stride()), meta.storage_offset()))
