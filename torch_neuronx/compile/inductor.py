"""Graphs on neuron that reach Inductor are compiled by the neuron backend instead.

`torch.compile(model)` (any `mode`, `options`, `fullgraph`, `dynamic`), `backend="inductor"`,
and the libraries that default to it (Transformers' `CompileConfig`, `Trainer(torch_compile=True)`,
Accelerate's dynamo plugin) all hand Dynamo's graph to `torch._inductor.compile_fx.compile_fx`.
Inductor has no code generator for `neuron`, and PyTorch has no extension point that gives a
device's whole graph to another compiler: `register_backend_for_device` plugs kernel code
generators in under Inductor's own lowering and scheduling. So that one entry function is
wrapped, the narrowest place every Inductor path passes: a graph with a tensor on neuron goes to
the neuron backend (one INFO line says so), any other graph to Inductor untouched. AOTInductor
(`cpp_wrapper`, a C++ artifact to load elsewhere) is left to Inductor.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from ..runtime.debug import log
from . import neuron_backend


def route(module: Any) -> None:
    """Wrap `module.compile_fx` (module: `torch._inductor.compile_fx`) once."""
    inductor = module.compile_fx
    if getattr(inductor, "routes_neuron", False):
        return

    @functools.wraps(inductor)
    def compile_fx(model_: Any, example_inputs_: Any, *args: Any, **kwargs: Any) -> Any:
        patches = kwargs.get("config_patches") or {}
        if not on_neuron(model_, example_inputs_) or _ahead_of_time(module, patches):
            return inductor(model_, example_inputs_, *args, **kwargs)
        log.info(
            "torch.compile: the graph's tensors are on neuron, so the neuron backend compiles it instead of Inductor%s",
            f" (Inductor options {patches} do not apply)" if patches else "",
        )
        return neuron_backend(model_, list(example_inputs_))

    compile_fx.routes_neuron = True  # type: ignore[attr-defined]
    module.compile_fx = compile_fx


def on_neuron(gm: Any, example_inputs: Iterable) -> bool:
    """Whether any graph input, or any value the graph computes, is a tensor on neuron."""
    values: list = list(example_inputs)
    if isinstance(gm, torch.fx.GraphModule):
        values += [node.meta.get("example_value", node.meta.get("val")) for node in gm.graph.nodes]
    return any(isinstance(v, torch.Tensor) and v.device.type == "neuron" for v in tree_leaves(values))


def _ahead_of_time(module: Any, patches: dict) -> bool:
    return bool(patches.get("cpp_wrapper", module.config.cpp_wrapper))
