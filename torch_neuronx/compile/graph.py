"""One AOTAutograd graph (forward, backward or inference) as runnable steps.

When every node has a rule the graph is ONE executable. A node whose tensors are all CPU
tensors (an optimizer's step counters) runs on the host in PyTorch CPU, as in eager, where it
writes an input or its CPU tensor is needed; otherwise (0-d values only, as bias corrections)
it is computed inside the executable that reads it. A node without a rule (no lowering yet, a
device transfer, a lowering that failed to trace) either makes compilation fail with an error
naming it, or, with `fallback_execution`, runs eagerly on neuron between compiled regions.
Nodes run outside executables that need no executable's result run first, so they do not split
the graph; the rest splits it, each maximal run of lowerable nodes one executable. Graph
outputs that are views are replayed eagerly (metadata only) on the real tensor they view, so
they alias inputs and each other exactly as in eager. Where tracing fixed their geometry, they
are made directly on that tensor's storage (as inductor's `reinterpret_tensor` does), without a
trip through the dispatcher.
"""

from __future__ import annotations

import operator
import warnings
from typing import Any

import torch
from torch.fx import GraphModule, Node

from ..eager.arguments import Binder
from ..runtime.debug import dump_graph, log
from . import counters
from .executable import Executable, LoweringError
from .nodes import OWN_KERNEL, Rule, is_view, rule_for, scalar_rule

_warned: set[str] = set()
# (base, size, stride, offset increment): a view of base's storage at base's offset plus the increment
_reinterpret = torch._C._dynamo.guards._reinterpret_tensor


class NeuronCompileError(RuntimeError):
    """A graph cannot be compiled for neuron and eager fallback is off."""


class _Outside:
    """A run of nodes outside any executable, called one by one through PyTorch: nodes
    without a rule (eagerly on neuron, counted) and host nodes (PyTorch CPU)."""

    def __init__(self, nodes: list[Node], counted: int) -> None:
        self.nodes, self.counted = nodes, counted
        self.calls = [_thunk(node) for node in nodes]

    def run(self, env: dict, done: set[Node] | None = None) -> None:
        for node, call in zip(self.nodes, self.calls):
            if done is None or node not in done:  # `done`: resuming after a node was demoted
                env[node] = call(env)
        if self.counted:
            counters.eager_calls(self.counted)


def _thunk(node: Node) -> Any:
    """`env -> value of node`; a getitem without the generic argument mapping."""
    if node.target is operator.getitem and isinstance(node.args[0], Node) and isinstance(node.args[1], int):
        source, index = node.args
        return lambda env: env[source][index]
    return lambda env: _evaluate(node, env)


def _evaluate(node: Node, env: dict) -> Any:
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
    return node.target(*args, **kwargs)


class CompiledGraph:
    """Runs one FX graph; called with the boxed list of graph inputs (released as consumed)."""

    def __init__(self, gm: GraphModule, name: str, fallback: bool) -> None:
        self.name, self.fallback = name, fallback
        self._boxed_call = True  # an instance attribute: Dynamo's wrappers copy __dict__
        dump_graph(name, gm)
        graph_nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in graph_nodes if n.op == "placeholder"]
        self.output = next(n for n in graph_nodes if n.op == "output")
        self.constants = {n: _constant(gm, n) for n in graph_nodes if n.op == "get_attr"}
        self.body = [n for n in graph_nodes if n.op == "call_function"]
        self.rules: dict[Node, Rule | str] = {n: rule_for(n) for n in self.body}
        self.tail = self._output_views()
        tail, outputs = set(self.tail), set(self.output.all_input_nodes)
        self.view_plans = {node: _alias_plan(node, tail) for node in self.tail}
        self.view_outputs = [node for node in self.tail if node in outputs]
        self.eager: set[Node] = set()
        missing = [n for n in self.body if isinstance(self.rules[n], str)]
        refused = [n for n in missing if self.rules[n] != OWN_KERNEL]
        if refused and not fallback:
            others = sorted({str(n.target) for n in refused[1:]} - {str(refused[0].target)})
            raise NeuronCompileError(_refusal(self.name, refused[0], self.rules[refused[0]], others))
        for node in missing:
            self._demote(node, self.rules[node])
        self.host = self._kept_on_host()
        self.order = self._hoisted(self.body)  # kept when a node is demoted while running
        self.executables: dict[tuple, Executable] = {}
        self._partition()

    def __call__(self, args: list) -> Any:
        env: dict[Node, Any] = dict(zip(self.placeholders, args))
        env.update(self.constants)
        args.clear()
        done: set[Node] = set()
        index, resumed = 0, False
        while index < len(self.steps):
            step = self.steps[index]
            try:
                if resumed and isinstance(step, _Outside):
                    step.run(env, done)
                else:
                    step.run(env)
            except LoweringError as e:
                if not self.fallback:
                    raise NeuronCompileError(_refusal(self.name, e.node, e.problem, [])) from e
                self._demote(e.node, e.problem)
                self._partition()
                # Executables only split, so each is wholly done or not; an outside run may now
                # join done nodes to the demoted one, and skips the done ones.
                index = next(i for i, s in enumerate(self.steps) if any(n not in done for n in s.nodes))
                resumed = True
                continue
            for node in self.releases[index]:
                env.pop(node, None)  # free device memory as soon as nothing later reads it
            done.update(step.nodes)
            index += 1
        made: set[Node] = set()
        for node in self.view_outputs:
            _make_view(node, self.view_plans, env, made)
        return list(torch.fx.node.map_arg(self.output.args[0], env.__getitem__))

    # ---- planning -------------------------------------------------------------------------

    def _demote(self, node: Node, reason: str) -> None:
        """Run `node` eagerly (its getitems with it), or fail if fallback is off."""
        name = str(node.target)
        self.rules[node] = reason
        self.eager.add(node)
        self.eager.update(u for u in node.users if u.target is operator.getitem)
        counters.eager_nodes[name] += 1
        if name not in _warned and reason == OWN_KERNEL:
            _warned.add(name)
            log.info(
                "neuron compile: %s %s; torch_neuronx.custom_op with a JAX body compiles into the graph", name, reason
            )
        elif name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"neuron compile: {name} {reason}; the graph is split there and the node runs eagerly "
                "(options={'fallback_execution': False} makes this an error)",
                stacklevel=2,
            )

    def _kept_on_host(self) -> set[Node]:
        """The host nodes that run on the host: those writing a graph input or needed as CPU
        tensors (graph outputs, read outside executables, not 0-d), and what they read. The
        others (an optimizer's bias corrections from its step counters) are computed inside the
        executables that read them."""
        host = {n for n, rule in self.rules.items() if isinstance(rule, Rule) and rule.host}
        inside = {node: scalar_rule(node) for node in host}
        outside = self.eager | set(self.tail)
        needed = {n for n in host if any(u not in self.rules or u in outside for u in n.users)}
        kept = {n for n in host if inside[n] is None or _written(n) or n in needed}
        pending = list(kept)
        while pending:  # what a kept node reads, and its getitems (executables take no lists)
            node = pending.pop()
            for other in (*node.all_input_nodes, *(u for u in node.users if u.target is operator.getitem)):
                if other in host and other not in kept:
                    kept.add(other)
                    pending.append(other)
        for node in host - kept:
            self.rules[node] = inside[node]
        return kept

    def _output_views(self) -> list[Node]:
        """View nodes (and getitems of views) that only feed graph outputs through views: run
        eagerly after everything else, on the tensors they view."""
        tail: set[Node] = set()
        pending = list(self.output.all_input_nodes)
        while pending:
            node = pending.pop()
            if node in tail or node.op != "call_function" or not _is_view_like(node):
                continue
            tail.add(node)
            pending.append(node.args[0])
        return [n for n in self.body if n in tail]

    def _partition(self) -> None:
        """Steps: maximal runs of nodes with a rule as executables, the rest eager; and per step
        the values no later step, output or output view needs."""
        tail = set(self.tail)
        needed: set[Node] = set()
        for node in reversed(self.body):  # tail views that graph nodes (not just outputs) use
            if node not in tail or any(u in needed for u in node.users):
                needed.add(node)
        inside = [n for n in self.order if n in needed]
        steps: list = []
        run: list[Node] = []
        outside = self.eager | self.host
        for node in inside:
            if (node in outside) != bool(run and run[-1] in outside):
                steps.extend([self._step(run)] if run else [])
                run = []
            run.append(node)
        steps.extend([self._step(run)] if run else [])
        kept = set(self.output.all_input_nodes).union(*(n.all_input_nodes for n in self.tail))
        last = {arg: i for i, step in enumerate(steps) for node in step.nodes for arg in node.all_input_nodes}
        self.releases: list[list[Node]] = [[] for _ in steps]
        for node, i in last.items():
            if node not in kept and node.op != "get_attr":
                self.releases[i].append(node)
        self.steps = steps

    def _hoisted(self, nodes: list[Node]) -> list[Node]:
        """`nodes` with the nodes run outside executables that depend on no executable's result
        moved first, so that they do not split the executables (an optimizer's CPU step counters
        and the bias corrections computed from them). A node writing a graph input stays where
        it is if a node left behind reads that input before it."""
        first: set[Node] = set()
        outside = self.eager | self.host
        position = {node: i for i, node in enumerate(nodes)}
        for node in nodes:
            if node not in outside or any(a in position and a not in first for a in node.all_input_nodes):
                continue
            readers = [u for w in _written(node) for u in w.users if u is not node and u not in first]
            if all(position.get(u, len(nodes)) > position[node] for u in readers):  # output: last
                first.add(node)
        return [n for n in nodes if n in first] + [n for n in nodes if n not in first]

    def _step(self, nodes: list[Node]) -> Executable | _Outside:
        if nodes[0] in self.eager or nodes[0] in self.host:
            return _Outside(nodes, sum(1 for node in nodes if node in self.eager))
        return self._executable(nodes)

    def _executable(self, nodes: list[Node]) -> Executable:
        """The executable for exactly these nodes (kept across re-partitioning, with its cache)."""
        key = tuple(nodes)
        if key not in self.executables:
            members = set(nodes)
            inputs: list[Node] = []
            for node in nodes:
                for arg in node.all_input_nodes:
                    if arg not in members and arg not in inputs:
                        inputs.append(arg)
            replayed = set(self.tail)  # output views are replayed eagerly on their sources
            outputs = [n for n in nodes if any(u not in members or u in replayed for u in n.users)]
            part = f"{self.name}" if len(self.executables) == 0 else f"{self.name}[{len(self.executables)}]"
            self.executables[key] = Executable(part, nodes, self.rules, inputs, outputs)
        return self.executables[key]


def _refusal(graph: str, node: Node, reason: str, others: list[str]) -> str:
    more = f" (also without a rule: {', '.join(others)})" if others else ""
    return (
        f"neuron compile: graph `{graph}`: node `{node.name}` ({node.target}) {reason}{more}; it cannot be part of "
        "a compiled neuron executable. Pass options={'fallback_execution': True} to torch.compile to run such nodes "
        "eagerly between compiled regions (TORCH_NEURONX_DISABLE_FALLBACK=1 makes False the default)."
    )


def _written(node: Node) -> list[Node]:
    """The graph values `node` mutates (the arguments its schema marks as written)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return []
    schema = target._schema
    written: list[Node] = []
    for arg, value in zip(schema.arguments, Binder(schema)(node.args, node.kwargs)):
        if arg.alias_info is not None and arg.alias_info.is_write:
            torch.fx.node.map_arg(value, written.append)
    return written


def _is_view_like(node: Node) -> bool:
    """A view op (served as metadata in eager), or a getitem of one."""
    if node.target is operator.getitem:
        source = node.args[0]
        return isinstance(source, Node) and source.op == "call_function" and _is_view_like(source)
    return isinstance(node.target, torch._ops.OpOverload) and is_view(node.target)


def _alias_plan(node: Node, inside: set[Node]) -> tuple | None:
    """How to make an output view on its root's storage directly: (root, size, stride, offset
    from the root's, root stride); None where only replaying the op is exact."""
    root = node
    while root in inside:
        root = root.args[0]
    view, base = node.meta.get("val"), root.meta.get("val")
    if node.target is torch.ops.aten.as_strided.default or root.op not in ("placeholder", "call_function"):
        return None  # as_strided may reach outside its root's extent
    if not (isinstance(view, torch.Tensor) and isinstance(base, torch.Tensor)) or view.dtype != base.dtype:
        return None
    if (view.is_conj(), view.is_neg()) != (base.is_conj(), base.is_neg()):
        return None
    geometry = (*view.shape, *view.stride(), view.storage_offset(), *base.stride(), base.storage_offset())
    if not all(isinstance(g, int) for g in geometry):
        return None
    offset = view.storage_offset() - base.storage_offset()
    return root, tuple(view.shape), tuple(view.stride()), offset, tuple(base.stride())


def _make_view(node: Node, plans: dict[Node, tuple | None], env: dict, made: set[Node]) -> None:
    """An output view: on its root's storage when the root has the traced strides, else replayed
    on the view it is made from (made first, once per call)."""
    plan = plans[node]
    if plan is not None:
        root = env[plan[0]]
        if isinstance(root, torch.Tensor) and root.stride() == plan[4]:
            env[node] = _reinterpret(root, plan[1], plan[2], plan[3])
            made.add(node)
            return
    source = node.args[0]
    if source in plans and source not in made:
        _make_view(source, plans, env, made)
    env[node] = _evaluate(node, env)
    made.add(node)


def _constant(gm: GraphModule, node: Node) -> Any:
    """A get_attr constant: CPU tensors (other than 0-d scalars) are moved to neuron once."""
    value = gm
    for part in str(node.target).split("."):
        value = getattr(value, part)
    if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() > 0:
        value = value.to("neuron")
    return value
