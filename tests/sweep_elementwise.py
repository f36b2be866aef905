"""Sweep the elementwise/activation family's OpInfo entries natively (fallback disabled).

    python sweep_elementwise.py [--max-samples N] [--only NAME ...] [--dtypes float32,bfloat16]
                                [--no-grad] [--foreign-on-cpu]

Prints one line per (entry, dtype) that is not fully native -- `decomposed` (PyTorch's
decomposition ran), `needs` (a FOREIGN op of another family has no lowering yet), `fail` --
then per dtype the number of entries that pass natively with all (or the first N) samples.
`--foreign-on-cpu` runs the FOREIGN ops through the CPU fallback so that the family's own
lowerings are measured before the other families land. The test files import the family list
(`entries`) and `foreign_op` from here.
"""

from __future__ import annotations

import argparse
import os
import re
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from opinfo import check_op, fallback_disabled, op_db

import torch_neuronx

FAMILY = {
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
ACTIVATIONS = {n for n in FAMILY if n.startswith("nn.functional.")}
EXCLUDE_VARIANTS = {("max", "reduction_with_dim"), ("max", "reduction_no_dim"), ("min", "reduction_with_dim"),
                    ("min", "reduction_no_dim")}  # fmt: skip
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
}


def entries(only: list[str] | None = None, activations: bool | None = None) -> list:
    chosen = []
    for o in op_db:
        if o.name not in FAMILY or (o.name, o.variant_test_name) in EXCLUDE_VARIANTS:
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


def run_foreign_on_cpu() -> None:
    """Let FOREIGN ops use the CPU fallback even while it is disabled, so that a sweep measures
    this family's own lowerings before the other families land."""
    from torch_neuronx import ops
    from torch_neuronx.eager import dispatch

    class ForeignOnCpu(dispatch.CpuFallback):
        def __call__(self, *args: object, **kwargs: object) -> object:
            with fallback_enabled():
                return super().__call__(*args, **kwargs)

    for name in FOREIGN:
        packet, overload = name.removeprefix("aten.").rsplit(".", 1)
        op = getattr(getattr(torch.ops.aten, packet), overload)
        if op not in ops.load():
            dispatch.KERNELS[op] = ForeignOnCpu(op)


@contextmanager
def fallback_enabled() -> Iterator[None]:
    old = os.environ.pop("TORCH_NEURONX_DISABLE_FALLBACK", None)
    try:
        yield
    finally:
        if old is not None:
            os.environ["TORCH_NEURONX_DISABLE_FALLBACK"] = old


def run_one(opinfo: object, dtype: torch.dtype, grad: bool, max_samples: int | None) -> tuple[str, str]:
    torch_neuronx.reset_metrics()
    try:
        with fallback_disabled():
            count = check_op(opinfo, dtype, grad=grad, max_samples=max_samples)
    except Exception as e:
        if foreign_op(e):
            return "needs", foreign_op(e)
        last = traceback.extract_tb(e.__traceback__)[-1]
        return "fail", f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''} @{last.name}"
    if not count:
        return "no-samples", ""
    if torch_neuronx.metrics()["decompositions"]:
        return "decomposed", str(sorted(torch_neuronx.metrics()["decompositions"]))
    return "native", f"{count} samples"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--dtypes", default="float32,bfloat16,float16,int64,int32,uint8,bool,complex64")
    parser.add_argument("--grad", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--foreign-on-cpu", action="store_true", help="run FOREIGN ops through the CPU fallback")
    args = parser.parse_args()
    if args.foreign_on_cpu:
        run_foreign_on_cpu()
    modes = [(name, DTYPES[name], False) for name in args.dtypes.split(",")]
    if args.grad:
        modes.append(("float32-grad", torch.float32, True))
    counts: dict[str, Counter] = {label: Counter() for label, _, _ in modes}
    start = time.time()
    for opinfo in entries(args.only):
        entry = f"{opinfo.name}.{opinfo.variant_test_name}".rstrip(".")
        supported = opinfo.supported_dtypes("cpu")
        for label, dtype, grad in modes:
            if dtype not in supported or (grad and not opinfo.supports_autograd):
                continue
            status, detail = run_one(opinfo, dtype, grad, args.max_samples)
            counts[label][status] += 1
            counts[label]["total"] += 1
            if status != "native" or args.verbose:
                print(f"{entry:40s} {label:13s} {status:10s} {detail}", flush=True)
    print(f"\n{time.time() - start:.0f}s")
    for label, c in counts.items():
        print(f"{label:13s} native {c['native']}/{c['total']}  ({dict(c)})")


if __name__ == "__main__":
    main()
