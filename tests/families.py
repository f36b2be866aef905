"""Op families' OpInfo entries, run natively: which entries each family's tests and sweeps
cover, and the rules a family's run follows (its own ops never fall back or decompose).

The test files and the sweeps import these; no test file imports another.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch
from opinfo import check_op, fallback_disabled, op_db, to_neuron
from torch.utils._pytree import tree_flatten

import torch_neuronx
from torch_neuronx import ops

# ---- the elementwise family (tests/test_ops_elementwise.py, test_ops_activation.py, sweep_elementwise.py)

ELEMENTWISE = {
    # arithmetic
    "abs", "add", "sub", "mul", "rsub", "div", "true_divide", "remainder", "fmod", "floor_divide",
    "pow", "float_power", "neg", "positive", "reciprocal", "sign", "sgn", "signbit", "copysign",
    "heaviside", "hypot", "atan2", "lerp", "addcmul", "addcdiv", "xlogy", "special.xlog1py",
    "logaddexp", "logaddexp2", "nextafter", "ldexp", "frexp", "clamp", "clamp_min", "clamp_max",
    "minimum", "maximum", "max", "min", "fmin", "fmax", "nan_to_num", "square", "gcd", "lcm",
    "__radd__", "__rdiv__", "__rmul__", "__rsub__", "__rpow__", "__rmod__", "__rand__", "__ror__",
    "__rxor__", "angle", "conj_physical", "complex", "polar",
    # rounding
    "ceil", "floor", "round", "trunc", "frac",
    # transcendental
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
    "erfinv", "lgamma", "digamma", "polygamma", "mvlgamma", "i0", "sinc", "deg2rad", "rad2deg",
    "logit", "sigmoid", "igamma", "igammac", "special.i0e", "special.i1", "special.i1e",
    "special.ndtr", "special.ndtri", "special.log_ndtr", "special.erfcx", "special.entr",
    "special.zeta", "special.polygamma", "special.modified_bessel_i0", "special.modified_bessel_i1",
    "special.spherical_bessel_j0",
    # comparisons and logic
    "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
    "isreal", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "where", "fill",
    "zero_", "masked_fill", "isclose", "clone",
    # activations
    "nn.functional.relu", "nn.functional.relu6", "nn.functional.leaky_relu", "nn.functional.elu",
    "nn.functional.selu", "nn.functional.celu", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.mish", "nn.functional.softplus", "nn.functional.softshrink",
    "nn.functional.hardshrink", "nn.functional.hardtanh", "nn.functional.hardsigmoid",
    "nn.functional.hardswish", "nn.functional.threshold", "nn.functional.logsigmoid",
    "nn.functional.glu", "nn.functional.prelu", "nn.functional.rrelu", "nn.functional.softsign",
    "nn.functional.tanhshrink",
}  # fmt: skip
ACTIVATIONS = {n for n in ELEMENTWISE if n.startswith("nn.functional.")}
EXCLUDE_VARIANTS = {("max", "reduction_with_dim"), ("max", "reduction_no_dim"), ("min", "reduction_with_dim"),
                    ("min", "reduction_no_dim")}  # fmt: skip


def elementwise_entries(only: list[str] | None = None, activations: bool | None = None) -> list[Any]:
    """The family's OpInfo entries: all, only the activations (True) or none of them (False)."""
    chosen = []
    for o in op_db:
        if o.name not in ELEMENTWISE or (o.name, o.variant_test_name) in EXCLUDE_VARIANTS:
            continue
        if activations is not None and (o.name in ACTIVATIONS) != activations:
            continue
        if only and o.name not in only:
            continue
        chosen.append(o)
    return chosen


# Ops of other families that this family's forward or backward passes need (the backward of a
# broadcasting binary op reduces with `sum`, ...): a failure for want of them is "needs <op>".
FOREIGN = {
    "aten.sum.dim_IntList",
    "aten.masked_select.default",
    "aten.arange.start_out",
    "aten._efficientzerotensor.default",
}
_MISSING = re.compile(r"no lowering for (\S+) and")


def foreign_op(error: BaseException) -> str | None:
    """The other family's op whose missing lowering caused `error`, if that is what it was."""
    match = _MISSING.search(str(error))
    return match.group(1) if match and match.group(1) in FOREIGN else None


# mode -> (dtype, gradients too, samples per entry) for the elementwise tests.
MODES = {"float32": (torch.float32, False, 3), "bfloat16": (torch.bfloat16, False, 1), "grad": (torch.float32, True, 2)}


def run_elementwise(opinfo: Any, mode: str) -> None:
    """check_op for one entry of the elementwise family natively; skipped where the dtype or
    autograd is unsupported on CPU, or where an op of another family (FOREIGN) is missing."""
    dtype, grad, samples = MODES[mode]
    if dtype not in opinfo.supported_dtypes("cpu") or (grad and not opinfo.supports_autograd):
        pytest.skip(f"{opinfo.name} does not support {mode}")
    try:
        with fallback_disabled():
            assert check_op(opinfo, dtype, grad=grad, max_samples=samples) > 0
    except NotImplementedError as error:
        if foreign_op(error) is None:
            raise
        pytest.skip(f"needs {foreign_op(error)} from another family")


# ---- families whose composites call other families' ops (nn, conv, linalg, fft) ------------

MAX_SAMPLES = 3


def own_packets(family: Iterable[str]) -> set[str]:
    """ATen op names (packets) lowered in the `family` modules of torch_neuronx.ops ("nn", ...)."""
    modules = {importlib.import_module(f"torch_neuronx.ops.{name}").__name__ for name in family}  # none stale
    return {op.name().split("::")[1].split(".")[0] for op, low in ops.load().items() if low.fn.__module__ in modules}


def natively(family: Iterable[str], run: Callable[[], int]) -> int:
    """`run()` with the CPU fallback disabled; if an op of another family lacks a lowering,
    rerun it with the fallback allowed and require that no op of `family` fell back or
    decomposed."""
    try:
        with fallback_disabled():
            return run()
    except NotImplementedError as error:
        if "no lowering for" not in str(error):
            raise
    torch_neuronx.reset_metrics()
    count = run()
    metrics = torch_neuronx.metrics()
    own = own_packets(family)
    served_elsewhere = [*metrics["fallbacks"], *metrics["decompositions"]]
    mine = [op for op in served_elsewhere if op.split(".")[1] in own]
    assert not mine, f"ops of this family not run natively: {mine}"
    return count


def check_family(
    family: Iterable[str],
    opinfo: Any,
    dtype: torch.dtype,
    grad: bool,
    max_samples: int | None = MAX_SAMPLES,
    loose: bool = False,
) -> int:
    """check_op (outputs and gradients equal CPU's), natively for `family`."""
    return natively(family, lambda: check_op(opinfo, dtype, grad=grad, max_samples=max_samples, loose=loose))


def _run(opinfo: Any, sample: Any, grad: bool) -> list[torch.Tensor]:
    """The sample's output tensors, then (with `grad`) the input gradients for all-ones cotangents."""
    out = opinfo(sample.input, *sample.args, **sample.kwargs)
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    if not grad:
        return outs
    inputs = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0] if _needs_grad(t)]
    diff = [t for t in outs if t.requires_grad]
    grads = torch.autograd.grad(diff, inputs, [torch.ones_like(t) for t in diff], allow_unused=True)
    return [t.detach() for t in outs] + [g for g in grads if g is not None]


def _needs_grad(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad


def check_accuracy(
    family: Iterable[str],
    opinfo: Any,
    dtype: torch.dtype,
    wide: torch.dtype,
    grad: bool = False,
    max_samples: int | None = MAX_SAMPLES,
) -> int:
    """For ops whose PyTorch CPU kernel at `dtype` rounds intermediate results (neuron computes
    in float32 and rounds once): every output (and gradient) on neuron is no farther from the
    CPU result computed at the `wide` dtype than PyTorch CPU's own `dtype` result is, or
    within two `dtype` epsilons of the output's scale. Natively for `family`."""

    def widen(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.detach().to(wide).requires_grad_(t.requires_grad)
        return t

    def run() -> int:
        count = 0
        for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=grad):
            if max_samples is not None and count >= max_samples:
                break
            cpu = _run(opinfo, sample, grad)
            dev = _run(opinfo, sample.transform(to_neuron), grad)
            ref = _run(opinfo, sample.transform(widen), grad)
            assert len(cpu) == len(dev) == len(ref)
            for c, d, r in zip(cpu, dev, ref):
                assert d.device.type == "neuron" and d.dtype == c.dtype and d.shape == c.shape
                if r.numel():
                    r = r.double()
                    dev_error = (d.cpu().double() - r).abs().max().item()
                    cpu_error = (c.double() - r).abs().max().item()
                    floor = 2 * torch.finfo(dtype).eps * r.abs().max().item()
                    assert dev_error <= max(cpu_error, floor), (dev_error, cpu_error, floor)
            count += 1
        return count

    return natively(family, run)
