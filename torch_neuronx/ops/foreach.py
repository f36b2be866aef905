"""The `_foreach_*` family, derived from the single-tensor lowerings.

`_foreach_*` ops are not written one by one. Once every family is loaded, `derive_foreach`
walks the functional `_foreach_<op>` overloads and pairs each with the single-tensor overload
of `<op>` that PyTorch's own loop calls per element (`_foreach_add.List` -> `add.Tensor`,
`.Scalar`/`.ScalarList` -> `add.Scalar`, `.Tensor` -> `add.Tensor`): arguments are matched by
name, then by position, a `T[]` list feeds its i-th element, anything else is passed to every
element. Where that op has a lowering, the list op gets one that applies it to every element
inside one executable; without one it keeps PyTorch's composite loop (eager/dispatch.py). The
dispatcher derives the in-place forms (`_foreach_add_`) from these. The fused optimizer steps
live in optim.py, AMP's grad-scaling ops in amp.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import LOWERINGS, Lowering, derived, is_mutating
from ._common import fail_unless

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload

# `_foreach_<name>` whose per-element op has another name (PyTorch's loop calls these).
_RENAMED = {"norm": "linalg_vector_norm", "powsum": "linalg__powsum"}
_ELEMENT = {"List[Tensor]": "Tensor", "List[number]": "number"}


def _foreach_overloads() -> Iterator[OpOverload]:
    for qualified in torch._C._dispatch_get_all_op_names():
        if qualified.startswith("aten::_foreach_"):
            name, _, overload = qualified[len("aten::") :].partition(".")
            op = getattr(getattr(aten, name), overload or "default")
            if not is_mutating(op):
                yield op


def _compatible(given: str, wanted: str) -> int | None:
    """0: same type; 1: a Scalar where a Tensor is taken (a wrapped number); None: no match."""
    if wanted in (given, f"Optional[{given}]"):
        return 0
    if given == "number" and wanted == "Tensor":
        return 1
    return None


def _match(op: OpOverload, single: OpOverload) -> tuple[int, list] | None:
    """How `single` is called per element of `op`: (cost, per single argument either
    (index of op argument, takes its i-th element) or None for the default)."""
    params = op._schema.arguments
    wanted = single._schema.arguments
    names = [a.name for a in wanted]
    source: dict[int, int] = {}
    unnamed = []
    for i, a in enumerate(params):
        if a.name in names:
            source[names.index(a.name)] = i
        else:
            unnamed.append(i)
    free = [j for j in range(len(wanted)) if j not in source]
    if len(unnamed) > len(free):
        return None
    source.update(zip(free, unnamed))
    cost, plan = 0, []
    for j, a in enumerate(wanted):
        if j not in source:
            if not a.has_default_value():
                return None
            plan.append(None)
            continue
        given = str(params[source[j]].type)
        each = given in _ELEMENT
        step = _compatible(_ELEMENT.get(given, given), str(a.type))
        if step is None:
            return None
        cost += step
        plan.append((source[j], each))
    return cost, plan


def _mapped(name: str, fn: Callable[..., Any], plan: list, defaults: list, lists: list[int]) -> Callable[..., Any]:
    """The lowering of a list op: `fn` applied to each element, in one executable."""

    def lowered(*args: Any) -> list:
        sizes = [len(args[i]) for i in lists]
        fail_unless(len(set(sizes)) == 1, name, f"all lists must have the same length, got {sizes}")
        count = sizes[0]
        fail_unless(count > 0, name, "Tensor list must have at least one tensor.")
        results = []
        for k in range(count):
            call = [
                default if source is None else args[source[0]][k] if source[1] else args[source[0]]
                for source, default in zip(plan, defaults)
            ]
            results.append(fn(*call))
        return results

    return lowered


@derived
def derive_foreach() -> None:
    """Give every functional `_foreach_*` overload the lowering of its per-element op."""
    for op in _foreach_overloads():
        if op in LOWERINGS:
            continue
        base = op._schema.name.split("::")[1][len("_foreach_") :]
        packet = getattr(aten, _RENAMED.get(base, base), None)
        if packet is None:
            continue
        options = []
        for overload in packet.overloads():
            single = getattr(packet, overload)
            found = LOWERINGS.get(single)
            if found is None or found.random or is_mutating(single):
                continue
            match = _match(op, single)
            if match is not None:
                options.append((match[0], overload, single, found, match[1]))
        if not options:
            continue
        _, _, single, found, plan = min(options, key=lambda o: o[:2])
        defaults = [a.default_value if a.has_default_value() else None for a in single._schema.arguments]
        lists = [i for i, a in enumerate(op._schema.arguments) if str(a.type) in _ELEMENT]
        LOWERINGS[op] = Lowering(_mapped(str(op), found.fn, plan, defaults, lists))
