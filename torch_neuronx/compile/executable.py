"""A run of FX nodes compiled as ONE jax.jit executable, cached per input signature.

Inputs are read exactly as an eager kernel reads its arguments (`eager.storage_io.CallInputs`:
each distinct storage once, each tensor through its geometry); mutated graph inputs are scattered
back into their storages inside the same executable. Outputs become new neuron tensors laid
out with the strides PyTorch's meta kernels gave them, so views AOTAutograd regenerates from
them see the same memory as in eager. Random nodes draw keys from the device RNG state, one
offset per node in graph order, exactly as the same ops called eagerly one by one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.fx import Node
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..eager.kernel import cpp_entry_point
from ..eager.storage_io import (
    DYNAMIC_SCALARS,
    CallInputs,
    buffer_positions,
    device_keys,
    is_tensor_key,
    jitted,
    load_storages,
    read_tensor,
    rng_inputs,
    scalar_input,
    with_donated,
    write_tensor,
    written_slots,
)
from ..eager.tensor import tensor_on_new_storage
from ..ops import collecting_checks
from ..ops._dtypes import jax_dtype, torch_dtype
from ..ops.geometry import Geometry, contiguous_strides, numel, write
from ..runtime import checks as device_checks
from ..runtime import cores, deferred, native, profiler
from ..runtime.debug import log, module_name
from ..runtime.platform import spread_until_ready
from . import counters
from .nodes import Rule, broadcast_operands

_STATIC = "static"
_NATIVE = native.module()


class LoweringError(Exception):
    """A node's lowering failed or disagreed with PyTorch's meta result while tracing."""

    def __init__(self, node: Node, problem: str) -> None:
        super().__init__(f"node `{node.name}` ({node.target}): {problem}")
        self.node, self.problem = node, problem


class Compiled:
    """One input signature's executable and how its outputs are made."""

    __slots__ = ("checks", "fn", "large", "mutated_slots", "outputs")

    def __init__(self) -> None:
        self.fn: Any = None
        self.checks: list = []  # the nodes' device-side checks: [(error type, message)]
        self.large = False  # runs with XLA:CPU's threads on every core (runtime/cores.py)
        self.mutated_slots: list[int] = []
        self.outputs: list = []  # per output node: (treedef, leaf specs)


class Executable:
    """Compiles `nodes` (in graph order) as one executable reading `inputs` from the env."""

    def __init__(self, name: str, nodes: list[Node], rules: dict[Node, Rule], inputs: list[Node], outputs: list[Node]):
        self.name = name
        self.nodes, self.rules, self.inputs, self.outputs = nodes, rules, inputs, outputs
        self.random = sum(1 for n in nodes if rules[n].random)
        self.materialized = broadcast_operands(nodes)
        targets = _mutation_targets(nodes, rules)
        self.written = [n for n in inputs if n in targets]  # inputs the graph writes
        self.cache: dict[tuple, Compiled] = {}
        self.native_cache: dict[bytes, Compiled] = {}  # the same entries by the native module's key
        self.last_key: tuple | None = None

    def run(self, env: dict) -> None:
        values = [env[n] for n in self.inputs]
        if deferred.active():
            deferred.settle_uses(values)
        keyed = _NATIVE.graph_inputs(values) if _NATIVE is not None else None
        if keyed is not None:
            entry = self.native_cache.get(keyed[0])
            if entry is not None:
                counters.hit()
                args = keyed[1]
                if self.random:
                    args.extend(rng_inputs(self.random))
                self._launch(entry, args, keyed[2], env)
                return
        call = CallInputs()
        # the held storages' (nbytes, dtype) fix the shapes of the buffers the executable takes
        key = (*[_input_key(value, n, call) for value, n in zip(values, self.inputs)], tuple(call.held))
        key = (*key, tuple(call.unwritten))
        if self.random:
            call.scalars.extend(rng_inputs(self.random))
        entry = self.cache.get(key)
        if entry is None:
            start = time.perf_counter()
            entry = Compiled()
            writable = written_slots([k for n, k in zip(self.inputs, key) if n in self.written])
            donated = buffer_positions(writable, key[-1])
            traced = jitted(self._traceable(key, entry, writable), donated, len(call.buffers))
            reason = None if self.last_key is None else describe_change(self.inputs, self.last_key, key)
            with profiler.compiling(
                f"compile graph `{self.name}`" if reason is None else f"recompile graph `{self.name}`: {reason}"
            ):
                compiled = traced.lower(*call.buffers, *call.scalars).compile()
            entry.large = cores.large(compiled.cost_analysis())
            entry.fn = compiled
            self._launch(entry, [*call.buffers, *call.scalars], call.allocs, env)
            entry.fn = cpp_entry_point(compiled)
            if reason is not None:
                counters.recompile(self.name, reason)
                log.info("recompiled `%s`: %s", self.name, reason)
            self.cache[key] = entry
            self.last_key = key
            seconds = time.perf_counter() - start
            counters.compiled(seconds)
            log.info("compiled `%s` (%d nodes) in %.2f s", self.name, len(self.nodes), seconds)
        else:
            counters.hit()
            self._launch(entry, [*call.buffers, *call.scalars], call.allocs, env)
        if keyed is not None:
            if len(self.native_cache) >= len(self.cache) * 4:  # a few native keys per entry at most
                self.native_cache.clear()
            self.native_cache[keyed[0]] = entry

    def _launch(self, entry: Compiled, args: list, allocs: list, env: dict) -> None:
        """Run `entry` on `args` and bind its outputs in `env`; `allocs`: the call's storages
        by slot. The results are the executable's outputs, then the new buffers of the storages
        it wrote, then its check flags if it has checks."""
        launch = profiler.now() if profiler.recording() else 0
        results = entry.fn(*args)
        if launch:
            profiler.launched(f"graph `{self.name}`", launch, results)
        if entry.large:
            spread_until_ready(results)
        end = len(results)
        if entry.checks:
            end -= 1
            device_checks.defer(results[end], entry.checks, f"compiled graph `{self.name}`")
        for slot, buf in zip(entry.mutated_slots, results[end - len(entry.mutated_slots) : end]):
            allocs[slot].buffer = buf
        buffers = iter(results)
        for node, (tree, specs) in zip(self.outputs, entry.outputs):
            leaves = [spec[1] if spec[0] == _STATIC else tensor_on_new_storage(*spec, next(buffers)) for spec in specs]
            env[node] = tree_unflatten(leaves, tree)

    # ---- tracing --------------------------------------------------------------------------

    def _traceable(self, key: tuple, entry: Compiled, writable: list[int]) -> Callable:
        unwritten, input_keys = key[-1], key[:-2]
        by_node = dict(zip(self.inputs, input_keys))

        def run(buffers: list, scalars: list) -> tuple:
            storage = load_storages(buffers, unwritten)
            scal = iter(scalars)
            env = {node: _load(k, storage, scal) for node, k in zip(self.inputs, input_keys)}
            keys = iter(device_keys(next(scal), next(scal), next(scal), self.random) if self.random else ())
            slots: list[int] = []
            checks = []
            for node in self.nodes:
                with collecting_checks() as made:
                    env[node] = self._apply(node, env, storage, by_node, keys, slots)
                checks += [(flag, error, f"{node.target}: {message}") for flag, error, message in made]
                if node in self.materialized:
                    env[node] = _computed_once(env[node])
            entry.checks = [(error, message) for _, error, message in checks]
            entry.mutated_slots = slots = with_donated(slots, writable, unwritten)
            flat, entry.outputs = [], []
            for node in self.outputs:
                leaves, tree = tree_flatten(env[node])
                fakes = tree_flatten(node.meta.get("val"))[0]
                specs = []
                for value, fake in zip(leaves, fakes if len(fakes) == len(leaves) else [None] * len(leaves)):
                    if isinstance(value, jax.Array):
                        buf, spec = _materialize(value, fake)
                        flat.append(buf)
                        specs.append(spec)
                    else:
                        specs.append((_STATIC, value))
                entry.outputs.append((tree, specs))
            return flat, [storage[s] for s in slots], jnp.stack([f for f, _, _ in checks]) if checks else None

        # The XLA module's name: the graph's kind, not its compile id, so that the same graph
        # compiled in another order or process still hits the persistent cache.
        run.__name__ = run.__qualname__ = f"neuron_{module_name(self.name.split()[0])}"
        return run

    def _apply(self, node: Node, env: dict, storage: list, by_node: dict, keys: Any, slots: list) -> Any:
        rule = self.rules[node]
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
        try:
            if rule.reads_storage:
                return _as_strided(storage, by_node[node.args[0]], *args[1:], **kwargs)
            if rule.random:
                value = rule.fn(args, kwargs, next(keys))
            else:
                value = rule.fn(args, kwargs)
            if rule.mutated:
                value = self._mutate(node, rule, value, env, storage, by_node, slots)
            _check(node, value)
        except LoweringError:
            raise
        except Exception as e:
            raise LoweringError(node, f"failed to lower ({type(e).__name__}: {e})") from e
        return value

    def _mutate(self, node: Node, rule: Rule, result: Any, env: dict, storage: list, by_node: dict, slots: list):
        """Write new values of mutated graph inputs into their storages; the node's value."""
        arguments = rule.arguments
        bound = arguments.bind(node.args, node.kwargs)
        pairs, fresh = arguments.mutations(result, bound)
        for target, value in pairs:
            value = jnp.broadcast_to(value, env[target].shape).astype(env[target].dtype)
            slot = write_tensor(storage, by_node[target], value)
            if slot not in slots:
                slots.append(slot)
            env[target] = value
        pending = iter(fresh if isinstance(fresh, (tuple, list)) else (fresh,))
        current = env.__getitem__
        results = [next(pending) if i is None else torch.fx.node.map_arg(bound[i], current) for i in arguments.returns]
        return results[0] if len(results) == 1 else tuple(results)


def _computed_once(x: Any) -> Any:
    """`x` itself, written to its own buffer rather than fused into (and recomputed by) each
    consumer. XLA:CPU drops optimization barriers before fusing, but it never fuses a reduction
    into the ops that read its result: so `x` is reduced with its identity element."""
    if not isinstance(x, jax.Array) or jnp.issubdtype(x.dtype, jnp.complexfloating):
        return x
    if x.dtype == jnp.bool_:
        return jnp.stack([x, jnp.zeros_like(x)]).any(0)
    low = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    return jax.lax.reduce_max(jnp.stack([x, jnp.full_like(x, low)]), axes=(0,))


def _mutation_targets(nodes: list[Node], rules: dict) -> set[Node]:
    """The nodes that mutating nodes write (their old buffers are donated to the executable)."""
    targets: set[Node] = set()
    for node in nodes:
        arguments = rules[node].arguments
        if rules[node].mutated and arguments is not None:
            bound = arguments.bind(node.args, node.kwargs)
            for i in arguments.mutated:
                torch.fx.node.map_arg(bound[i], targets.add)
    return targets


def _input_key(value: Any, node: Node, call: CallInputs) -> Any:
    if isinstance(value, torch.Tensor):
        return call.tensor(value, node.name)
    if isinstance(value, DYNAMIC_SCALARS):
        call.scalars.append(scalar_input(value))
        return type(value)
    return (_STATIC, value)


def _load(k: Any, storage: list, scal: Any) -> Any:
    if isinstance(k, type) or k[0] == "cpu0":
        return next(scal)
    if k[0] == _STATIC:
        return k[1]
    return read_tensor(storage, k)


def _as_strided(storage: list, source: tuple, size: Any, stride: Any, storage_offset: Any = None) -> Any:
    """as_strided of a graph input: its storage read with the given geometry, as eager does."""
    slot, dtype, _, _, offset, bits = source
    offset = offset if storage_offset is None else storage_offset
    return read_tensor(storage, (slot, dtype, tuple(size), tuple(stride), offset, bits))


def _check(node: Node, value: Any) -> None:
    """The lowering's result must have PyTorch's dtype and shape (as the meta kernel says)."""
    leaves = tree_flatten(value)[0]
    fakes = tree_flatten(node.meta.get("val"))[0]
    if len(leaves) != len(fakes):
        return
    for got, fake in zip(leaves, fakes):
        if not (isinstance(got, jax.Array) and isinstance(fake, torch.Tensor)):
            continue
        static = [s for s in fake.shape if isinstance(s, int)]
        shape_ok = len(got.shape) == fake.dim() and all(
            not isinstance(s, int) or s == g for s, g in zip(fake.shape, got.shape)
        )
        if np.dtype(got.dtype) != np.dtype(jax_dtype(fake.dtype)) or not shape_ok:
            raise LoweringError(
                node,
                f"has a lowering that returned {np.dtype(got.dtype)}{list(got.shape)} but PyTorch gives "
                f"{fake.dtype}{list(fake.shape) if len(static) == fake.dim() else '(symbolic)'}",
            )


def _materialize(value: Any, fake: Any) -> tuple[Any, tuple]:
    """The output's storage buffer and `tensor_on_new_storage`'s leading arguments (computed
    once per executable), laid out as the meta strides say."""
    shape = tuple(value.shape)
    dtype = torch_dtype(value)
    strides = output_strides(fake, shape)
    if strides == contiguous_strides(shape):
        return value.reshape(-1), (shape, dtype, strides, numel(shape) * dtype.itemsize)
    count = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    buf = write(jnp.zeros(count, value.dtype), Geometry(shape, strides, 0), value)
    return buf, (shape, dtype, strides, count * dtype.itemsize)


def output_strides(fake: Any, shape: tuple) -> tuple:
    """Strides of an output: the meta strides when static; for symbolic ones, dense strides in
    the same dimension order (judged on the size hints)."""
    if not isinstance(fake, torch.Tensor) or fake.dim() != len(shape):
        return contiguous_strides(shape)
    strides = fake.stride()
    if all(isinstance(s, int) for s in strides):
        return tuple(strides)
    order = sorted(range(len(shape)), key=lambda d: (-_hint(strides[d]), d))
    dense, acc = [0] * len(shape), 1
    for d in reversed(order):
        dense[d] = acc
        acc *= max(shape[d], 1)
    return tuple(dense)


def _hint(s: Any) -> int:
    if isinstance(s, int):
        return s
    try:
        return int(s.node.hint if s.node.hint is not None else s.node.shape_env.size_hint(s.node.expr))
    except Exception:
        return 0


def describe_change(names: list[Node], old: tuple, new: tuple) -> str:
    """Which input's signature changed between two executable keys, in words."""
    for node, a, b in zip(names, old, new):
        if a == b:
            continue
        if is_tensor_key(a) and is_tensor_key(b):
            if a[1] != b[1]:
                return f"input `{node.name}`: dtype {a[1]} -> {b[1]}"
            if tuple(a[2]) != tuple(b[2]):
                return f"input `{node.name}`: shape {tuple(a[2])} -> {tuple(b[2])}"
            if (a[3], a[4]) != (b[3], b[4]):
                return f"input `{node.name}`: strides/offset {a[3]}+{a[4]} -> {b[3]}+{b[4]}"
            if a[5] != b[5]:
                return f"input `{node.name}`: conjugate/negative bits {a[5]} -> {b[5]}"
            return f"input `{node.name}`: now shares its storage with another input"
        return f"input `{node.name}`: {_words(a)} -> {_words(b)}"
    return "an input storage changed size or dtype, or between never-written and written"


def _words(k: Any) -> str:
    if is_tensor_key(k):
        return f"tensor {k[1]}{list(k[2])}"
    if isinstance(k, type):
        return k.__name__
    if k[0] == "cpu0":
        return f"CPU scalar tensor {k[1]}"
    return repr(k[1])
