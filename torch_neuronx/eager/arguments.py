"""What a kernel reads from an overload's schema: how a call binds in schema order, the kind of
each argument (how it joins an executable's cache key), which arguments it writes, and what
each return aliases. Shared by eager kernels and compiled graphs' mutating nodes.
"""

from __future__ import annotations

from typing import Any

import torch

from ..ops import Lowering

TENSOR, OPT_TENSOR, TENSOR_LIST, SCALAR, STATIC, SCALAR_LIST = range(6)
_KINDS = {
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


class ArgumentPlan:
    """An overload's arguments and returns as a kernel running `lowering` sees them."""

    def __init__(self, op: torch._ops.OpOverload, lowering: Lowering) -> None:
        schema = op._schema
        self.op = op
        self.name = str(op)
        self.bind = Binder(schema)
        self.kinds = [
            STATIC if a.name in lowering.static else _KINDS.get(str(a.type), STATIC) for a in schema.arguments
        ]
        self.mutated = [
            i
            for i, a in enumerate(schema.arguments)
            if (a.alias_info is not None and a.alias_info.is_write) or a.name in lowering.mutates
        ]
        self.returns = _aliased_arguments(schema)
        self.item_returns = bool(schema.returns) and all("Tensor" not in str(r.type) for r in schema.returns)
        # Advanced-indexing index tensors may live on the host, as PyTorch allows for CUDA.
        self.host_indices = [
            i for i, a in enumerate(schema.arguments) if a.name == "indices" and self.kinds[i] == TENSOR_LIST
        ]

    def mutations(self, result: Any, args: list) -> tuple[list, Any]:
        """Split a mutating lowering's result into (written argument, new value) pairs, one per
        tensor (lists unrolled, None skipped), and the fresh results (None if the op has none).
        `args` holds the call's arguments in schema order, in whatever form the caller keeps them."""
        fresh_results = None
        if any(source is None for source in self.returns):
            result, fresh_results = result
        if len(self.mutated) == 1 or not isinstance(result, (tuple, list)):
            result = (result,)
        pairs = []
        for index, value in zip(self.mutated, result):
            targets = args[index] if self.kinds[index] == TENSOR_LIST else (args[index],)
            values = value if self.kinds[index] == TENSOR_LIST else (value,)
            pairs.extend((t, v) for t, v in zip(targets, values) if t is not None and v is not None)
        return pairs, fresh_results


def _aliased_arguments(schema: torch.FunctionSchema) -> list:
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
