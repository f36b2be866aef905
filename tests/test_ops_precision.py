"""Float32 lowerings compute in float32, as PyTorch CPU does. With JAX's x64 on, a numpy float64
constant (`np.sqrt(0.5)`) is not weakly typed and silently widens a float32 computation to
float64 (several times slower on XLA:CPU, and numerically not what CPU computes); Python floats
and scalar arguments are weak and keep the input's dtype."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from torch_neuronx import ops

# Lowerings that compute part of their result in float64 on purpose, and why.
WIDENS_ON_PURPOSE = {
    "aten.histc.default": "bin edges in float64, then cast, so they fall where CPU's do",
    "aten.histogram.bin_ct": "outer edges as doubles, as CPU reads min/max with .item<double>()",
    "aten.hash_tensor.default": "hashes the bits of each value widened to float64, as CPU does",
}


def _strong_float64(jaxpr: Any) -> bool:
    """Whether any equation of `jaxpr` (or of a jaxpr inside it) makes a float64 value that is
    not weakly typed."""
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            aval = v.aval
            if getattr(aval, "dtype", None) == jnp.float64 and not getattr(aval, "weak_type", False):
                return True
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns") and _strong_float64(inner):
                return True
    return False


def _sample_arguments(op: torch._ops.OpOverload, x: Any) -> list | None:
    """Positional arguments for `op` after `self`: float32 arrays for tensors and 0.5 for
    scalars up to the first argument with a default; None where the schema needs others."""
    arguments = []
    for a in op._schema.arguments[1:]:
        if a.has_default_value():
            break
        if a.kwarg_only or str(a.type) not in ("Tensor", "Scalar", "float"):
            return None
        arguments.append(x if str(a.type) == "Tensor" else 0.5)
    return arguments


def test_float32_lowerings_stay_float32() -> None:
    torch.ones(1, device="neuron")  # configures JAX (x64 on) as every device op sees it
    x = jnp.linspace(0.1, 0.9, 64, dtype=jnp.float32).reshape(8, 8)
    widened, checked = [], 0
    for op, lowering in ops.load().items():
        arguments = op._schema.arguments
        if op.namespace != "aten":  # other tests register deliberately wrong lowerings of their own ops
            continue
        if not arguments or str(arguments[0].type) != "Tensor" or op._schema.is_mutable or lowering.random:
            continue
        rest = _sample_arguments(op, x)
        if rest is None:
            continue
        try:
            jaxpr = jax.make_jaxpr(lowering.fn)(x, *rest)
        except Exception:  # arguments this simple sampling cannot satisfy; OpInfo tests cover the op
            continue
        checked += 1
        if _strong_float64(jaxpr.jaxpr) and str(op) not in WIDENS_ON_PURPOSE:
            widened.append(str(op))
    assert checked > 150, checked
    assert not widened, f"float32 inputs computed in float64 by: {widened}"
