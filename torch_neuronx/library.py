"""Custom kernels: a JAX function as a PyTorch custom op, on neuron and CPU, under torch.compile
and in autograd.

`custom_op(name, mutates_args=...)` defines the op with `torch.library.custom_op` from the
function's annotations, so it is a real dispatcher op (`torch.ops.<ns>.<name>`, `opcheck`,
`register_autograd`, `register_kernel`), and gives it:
- on neuron, the function as the op's lowering (`ops.LOWERINGS`): eager runs it through the
  kernel every built-in op runs through (one cached executable per signature, views read through
  their geometry, mutated arguments written back through it, the native hit path), and a compiled
  graph traces it inline into its one executable;
- on CPU, the same function jitted by JAX, tensors handed over without copies where DLPack allows;
- a fake kernel from `jax.eval_shape`, so FakeTensor, Dynamo and `opcheck` need nothing more;
- autograd from `jax.vjp` (functional ops): the backward is a second op made the same way,
  `<name>_backward`, so it too is one executable in eager and inline in a compiled graph.

The function follows the lowerings' conventions: tensors arrive as jax arrays, float arguments as
weakly typed jax scalars (a new value never recompiles), everything else as static Python values.
A mutating op's function returns the new values of its mutated arguments, in `mutates_args`
order, then its outputs; the op returns only the outputs. Executables of custom ops are not kept
in our executable store (it cannot see a change to the user's function); XLA's persistent cache,
keyed on the traced module, still spares recompiling them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import torch
from torch._library.autograd import make_autograd_impl
from torch.utils._pytree import tree_leaves, tree_map

from . import ops
from .eager.arguments import OPT_TENSOR, SCALAR, TENSOR, TENSOR_LIST, ArgumentPlan
from .eager.storage_io import DYNAMIC_SCALARS
from .eager.tensor import to_numpy
from .ops._dtypes import TO_TORCH, jax_dtype
from .runtime import native, platform

_TRACED = object()  # marks an argument the function receives traced (jax array or scalar)
_SAVED = object()  # marks a tensor argument kept for the backward by `save_for_backward`


def custom_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: str | Iterable[str],
    schema: str | None = None,
) -> Any:
    """Define `name` ("namespace::op") as a PyTorch custom op whose body `fn` is JAX; usable as a
    decorator. Returns the op's `torch._library.custom_ops.CustomOpDef`, as
    `torch.library.custom_op` does. `mutates_args` names the arguments the op writes."""

    def define(fn: Callable[..., Any]) -> Any:
        mutates = (mutates_args,) if isinstance(mutates_args, str) else tuple(mutates_args)
        if "unknown" in mutates:
            raise ValueError(
                f"torch_neuronx.custom_op {name}: mutates_args must name the arguments the op writes "
                "(its function returns their new values), not 'unknown'"
            )
        opdef, jax_op = _define(name, fn, mutates, schema or torch.library.infer_schema(fn, mutates_args=mutates))
        if not jax_op.plan.mutated and opdef._opoverload._schema.returns:
            _derive_autograd(opdef, jax_op)
        return opdef

    return define if fn is None else define(fn)


def _define(name: str, fn: Callable[..., Any], mutates: tuple[str, ...], schema: str) -> tuple[Any, JaxOp]:
    """The custom op `name` with `fn` as its lowering, CPU kernel and fake kernel."""
    platform.jax()  # x64 and the platform, before anything is traced
    jax_op: JaxOp | None = None

    def on_cpu(*args: Any, **kwargs: Any) -> Any:
        return jax_op.on_cpu(*args, **kwargs)

    on_cpu.__name__, on_cpu.__module__ = fn.__name__, fn.__module__
    opdef = torch.library.custom_op(name, on_cpu, mutates_args=mutates, device_types="cpu", schema=schema)
    jax_op = JaxOp(opdef._opoverload, fn, mutates)
    opdef.register_fake(jax_op.fake)
    if native.module() is not None:  # a call on neuron that records no gradient skips the Python autograd kernel
        native.module().register_autograd(opdef._namespace, opdef._name, make_autograd_impl(opdef._opoverload, opdef))
    return opdef, jax_op


def pallas_interpret() -> bool:
    """What to pass as `pallas_call(..., interpret=)`: True where the platform cannot compile
    Pallas kernels (the CPU platform), so they run in JAX's interpreter there."""
    return platform.platform_name() == "cpu"


class JaxOp:
    """One custom op's JAX function, bound to the op's schema, as a lowering and on CPU."""

    def __init__(self, op: torch._ops.OpOverload, body: Callable[..., Any], mutates: tuple[str, ...]) -> None:
        self.op, self.body = op, body
        self.plan = ArgumentPlan(op, ops.Lowering(body))
        names = [a.name for a in op._schema.arguments]
        self.written = [names.index(n) for n in mutates]  # in mutates_args order
        self.outputs = len(op._schema.returns)
        ops.LOWERINGS[op] = ops.Lowering(self.lowering, storable=False)

    def lowering(self, *args: Any) -> Any:
        """The body in the lowerings' convention: a mutating op returns (mutations in schema
        order, outputs) rather than mutations in `mutates_args` order followed by outputs."""
        result = self.body(*args)
        if not self.written:
            return result
        count = len(self.written) + self.outputs
        if count == 1 and not isinstance(result, tuple):
            result = (result,)
        if not isinstance(result, tuple) or len(result) != count:
            raise TypeError(
                f"neuron: {self.op}: its function must return the new values of {self.plan.bind.names[self.written[0]]}"
                f"{''.join(', ' + self.plan.bind.names[i] for i in self.written[1:])} (mutates_args order) then "
                f"its {self.outputs} output(s), {count} values in a tuple; got {type(result).__name__}"
            )
        new = dict(zip(self.written, result))
        mutations = [new[i] for i in self.plan.mutated]
        written = mutations[0] if len(mutations) == 1 else tuple(mutations)
        if not self.outputs:
            return written
        outs = result[len(self.written) :]
        return written, outs[0] if len(outs) == 1 else tuple(outs)

    def call(self, values: list, convert: Callable[[torch.Tensor], Any], run: Callable[..., Any]) -> Any:
        """The lowering on a call's bound `values` through `run(fn, *traced)`, `convert` making
        each tensor's traced value; static arguments as the eager kernel keeps them."""
        statics, traced = [], []
        for kind, v in zip(self.plan.kinds, values):
            if kind in (TENSOR, OPT_TENSOR) and isinstance(v, torch.Tensor):
                statics.append(_TRACED)
                traced.append(convert(v))
            elif kind == TENSOR_LIST:
                statics.append(_TRACED)
                traced.append([None if t is None else convert(t) for t in v])
            elif kind in (TENSOR, SCALAR) and isinstance(v, DYNAMIC_SCALARS):
                statics.append(_TRACED)
                traced.append(v)
            else:
                statics.append(_StaticList(v) if isinstance(v, list) else v)
        return run(self._with_statics(tuple(statics)), *traced)

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one per op, alive as long as the op
    def _with_statics(self, statics: tuple) -> Callable[..., Any]:
        def fn(*traced: Any) -> Any:
            pending = iter(traced)
            args = [next(pending) if s is _TRACED else list(s) if isinstance(s, _StaticList) else s for s in statics]
            return self.lowering(*args)

        return fn

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one per op, alive as long as the op
    def _jitted(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return jax.jit(fn)

    def on_cpu(self, *args: Any, **kwargs: Any) -> Any:
        """The op's CPU kernel: the function jitted on the platform's device, inputs and results
        shared with PyTorch through DLPack where possible; mutated arguments copied into."""
        values = self.plan.bind(args, kwargs)
        result = self.call(values, _array, lambda fn, *traced: self._jitted(fn)(*traced))
        pairs, fresh = self.plan.mutations(result, values) if self.plan.mutated else ([], result)
        for target, value in pairs:
            target.copy_(torch.from_dlpack(value))
        inputs = {t.data_ptr() for t in tree_leaves(values) if isinstance(t, torch.Tensor)}
        return tree_map(lambda a: _tensor(a, inputs), fresh)

    def fake(self, *args: Any, **kwargs: Any) -> Any:
        """The op's fake kernel: output shapes and dtypes from `jax.eval_shape` of the function."""
        values = self.plan.bind(args, kwargs)
        tensors = [t for t in tree_leaves(values) if isinstance(t, torch.Tensor)]
        where = tensors[0].device if tensors else next(v for v in values if isinstance(v, torch.device))
        result = self.call(values, _shape, jax.eval_shape)
        fresh = self.plan.mutations(result, values)[1] if self.plan.mutated else result
        return tree_map(lambda s: torch.empty(s.shape, dtype=TO_TORCH[s.dtype], device=where), fresh)


class _StaticList(tuple):
    """A static list argument, hashable for the cache; the function receives it as a list."""


def _array(t: torch.Tensor) -> Any:
    """A CPU tensor's elements as a jax array on the platform's device (the same memory on the
    CPU platform where PJRT can alias it)."""
    host = t.detach().resolve_conj().resolve_neg().contiguous()
    return jax.device_put(to_numpy(host), platform.device())


def _shape(t: torch.Tensor) -> Any:
    return jax.ShapeDtypeStruct(tuple(int(d) for d in t.shape), jax_dtype(t.dtype))


def _tensor(value: Any, taken: set[int]) -> torch.Tensor:
    """A result as a CPU tensor of its own: a result JAX forwarded from an input (or returned
    twice) is copied, since an op's outputs may alias neither its inputs nor each other."""
    out = torch.from_dlpack(jnp.asarray(value))
    if out.numel() and out.data_ptr() in taken:
        out = out.clone()
    taken.add(out.data_ptr())
    return out


# ---- autograd from jax.vjp --------------------------------------------------------------------


def _derive_autograd(opdef: Any, forward: JaxOp) -> None:
    """Register the op's backward: `<name>_backward(grad_outputs, differentiate, *args)` runs
    `jax.vjp` of the function and returns the gradients of the floating-point tensors among the
    arguments whose `differentiate` flag is set, in argument order (lists unrolled)."""
    schema = str(forward.op._schema)
    arguments = schema[schema.index("(") + 1 : schema.rindex(") ->")]
    backward_schema = f"(Tensor[] grad_outputs, bool[] differentiate, {arguments}) -> Tensor[]"

    def vjp(grad_outputs: list, differentiate: list, *args: Any) -> list:
        slots = [
            (i, j)
            for i, (arg, wanted) in enumerate(zip(args, differentiate))
            for j, leaf in enumerate(arg if isinstance(arg, list) else [arg])
            if wanted and _inexact(leaf)
        ]

        def outputs(*leaves: Any) -> list:
            rebuilt = [list(a) if isinstance(a, list) else a for a in args]
            for (i, j), leaf in zip(slots, leaves):
                if isinstance(rebuilt[i], list):
                    rebuilt[i][j] = leaf
                else:
                    rebuilt[i] = leaf
            return jax.tree_util.tree_leaves(forward.body(*rebuilt))

        primals = [args[i][j] if isinstance(args[i], list) else args[i] for i, j in slots]
        results, pullback = jax.vjp(outputs, *primals)
        cotangents = [g.astype(r.dtype) if _inexact(r) else _no_cotangent(r) for g, r in zip(grad_outputs, results)]
        return list(pullback(cotangents))

    name = f"{opdef._namespace}::{opdef._name}_backward"
    backward_op, _ = _define(name, vjp, (), backward_schema)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.stashed = [_stash(v) for v in inputs]
        ctx.save_for_backward(*(t for v in inputs for t in _tensors(v)))

    def backward(ctx: Any, *grads: Any) -> tuple:
        saved = iter(ctx.saved_tensors)
        inputs = [_unstash(v, saved) for v in ctx.stashed]
        wanted = [bool(w) for w in ctx.needs_input_grad]
        flat = [g if g is not None else torch.zeros(()) for g in tree_leaves(list(grads))]
        computed = iter(backward_op(flat, wanted, *inputs))
        return tuple(_place(v, w, computed) for v, w in zip(inputs, wanted))

    opdef.register_autograd(backward, setup_context=setup_context)


def _inexact(x: Any) -> bool:
    return x is not None and jnp.issubdtype(x.dtype, jnp.inexact)


def _no_cotangent(x: Any) -> Any:
    return jnp.zeros(x.shape, jax.dtypes.float0)


def _tensors(value: Any) -> list[torch.Tensor]:
    items = value if isinstance(value, (list, tuple)) else [value]
    return [t for t in items if isinstance(t, torch.Tensor)]


def _stash(value: Any) -> Any:
    """An argument as kept for the backward, its tensors replaced by _SAVED (they go through
    `save_for_backward`)."""
    if isinstance(value, torch.Tensor):
        return _SAVED
    if isinstance(value, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in value):
        return [_SAVED if isinstance(t, torch.Tensor) else t for t in value]
    return value


def _unstash(value: Any, saved: Any) -> Any:
    if value is _SAVED:
        return next(saved)
    if isinstance(value, list):
        return [next(saved) if t is _SAVED else t for t in value]
    return value


def _place(value: Any, wanted: bool, computed: Any) -> Any:
    """The gradient(s) of one argument, taken from the backward op's results in order."""
    if not wanted:
        return None
    if isinstance(value, torch.Tensor):
        return next(computed) if value.is_floating_point() or value.is_complex() else None
    if isinstance(value, list):
        return [_place(t, True, computed) if isinstance(t, torch.Tensor) else None for t in value]
    return None
