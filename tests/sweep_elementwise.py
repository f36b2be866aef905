"""Sweep the elementwise/activation family's OpInfo entries natively (fallback disabled).

    python sweep_elementwise.py [--max-samples N] [--only NAME ...] [--dtypes float32,bfloat16]
                                [--no-grad] [--foreign-on-cpu]

Prints one line per (entry, dtype) that is not fully native -- `decomposed` (PyTorch's
decomposition ran), `needs` (a FOREIGN op of another family has no lowering yet), `fail` --
then per dtype the number of entries that pass natively with all (or the first N) samples.
`--foreign-on-cpu` runs the FOREIGN ops through the CPU fallback so that the family's own
lowerings are measured before the other families land. The family's entries and its FOREIGN
ops are those of tests/families.py, which the family's test files run too.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from families import FOREIGN, elementwise_entries, foreign_op
from opinfo import check_op, fallback_disabled

import torch_neuronx

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
    for opinfo in elementwise_entries(args.only):
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
