"""The `neuron` TorchDynamo backend: Dynamo graph -> AOTAutograd (functionalized forward and
backward graphs, core ATen decompositions for ops without a lowering) -> `CompiledGraph`.

Shapes: Dynamo's graph may be static (`dynamic=False`, what Transformers asks for) or
symbolic (`dynamic=True`, or automatic dynamic after a shape change). Either way each
executable is specialised on the concrete shapes it sees (XLA needs static shapes) and cached
per input signature, so a symbolic graph is traced once by Dynamo and compiled by XLA once
per distinct shape; every such compile is counted as a recompile with its reason.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import GraphModule

from .. import ops
from ..eager.dispatch import fallback_disabled
from ..runtime import platform
from ..runtime.debug import log
from . import counters
from .graph import CompiledGraph

OPTIONS = {"fallback_execution"}
_logged_modes: set[str] = set()
_signatures: dict[int, list[tuple[str, str]]] = {}


def compile_graph(gm: GraphModule, example_inputs: list, mode: str | None = None, options: dict | None = None) -> Any:
    """The backend function Dynamo calls (`torch.compile(backend="neuron")`)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    fallback = _options(options or {})
    _check_mode(mode)
    platform.jax()
    _note_recompile(gm, example_inputs)
    counters.graph()
    name = _compile_id()

    def compiler(kind: str) -> Any:
        return lambda graph, inputs: CompiledGraph(graph, f"{kind} {name}", fallback)

    return aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
        # As inductor: save what is costly to recompute, recompute cheap elementwise chains in
        # the backward. Fewer saved activations means far fewer forward outputs to write.
        partition_fn=min_cut_rematerialization_partition,
    )(gm, example_inputs)


def _options(options: dict) -> bool:
    unknown = set(options) - OPTIONS
    if unknown:
        raise ValueError(
            f"neuron compile: unknown option(s) {sorted(unknown)}; supported: {sorted(OPTIONS)} "
            "(e.g. torch.compile(m, backend='neuron', options={'fallback_execution': False}))"
        )
    return bool(options.get("fallback_execution", not fallback_disabled()))


def _check_mode(mode: str | None) -> None:
    """Every mode Inductor knows compiles the same here (README, "torch.compile"): each graph is
    one XLA executable launched in one call, which is what `reduce-overhead`'s CUDA graphs buy
    on GPU, and kernel tuning is XLA's own. An unknown mode gets Inductor's error."""
    from torch._inductor import list_mode_options

    if mode is None:
        return
    list_mode_options(mode)  # raises RuntimeError("Unrecognized mode=...") as torch.compile does
    if mode not in _logged_modes:
        _logged_modes.add(mode)
        log.info("neuron compile: mode=%r compiles each graph as one XLA executable, as every mode does", mode)


def decompositions() -> dict:
    """Core ATen decompositions of the ops without a lowering (our own lowerings win)."""
    from torch._decomp import core_aten_decompositions

    lowered = ops.load()
    return {op: fn for op, fn in core_aten_decompositions().items() if op not in lowered}


def _compile_id() -> str:
    compile_id = torch._guards.CompileContext.current_compile_id()
    return str(compile_id) if compile_id is not None else "?"


def _note_recompile(gm: GraphModule, example_inputs: list) -> None:
    """Dynamo compiled a frame again: record which input's shape or dtype changed."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is None:
        return
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    signature = [(str(name), _describe(x)) for name, x in zip(names, example_inputs)]
    previous = _signatures.get(compile_id.frame_id)
    _signatures[compile_id.frame_id] = signature
    if previous is None or not compile_id.frame_compile_id:
        return
    changes = [f"{name}: {old} -> {new}" for (name, old), (_, new) in zip(previous, signature) if old != new]
    if len(previous) != len(signature):
        changes.append(f"{len(previous)} -> {len(signature)} graph inputs")
    reason = "; ".join(changes) or "guards failed on something other than input shapes/dtypes (TORCH_LOGS=recompiles)"
    where = f"frame {compile_id.frame_id} (Dynamo, compile {compile_id})"
    counters.recompile(where, reason)
    log.info("recompiled %s: %s", where, reason)


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).removeprefix('torch.')}{[str(s) if not isinstance(s, int) else s for s in x.shape]}"
    return f"{type(x).__name__} {x}"
