"""Hook torch_neuronx into TorchDynamo without importing torch._dynamo at `import torch`
(that import is slow).

When Dynamo's and Inductor's modules are first imported:
- its backend registry gains a lazy entry for "neuron" (the installed package also declares it
  as a `torch_dynamo_backends` entry point; this covers a checkout that is not installed);
- Inductor's entry routes graphs on neuron to the neuron backend (`inductor.py`);
- its trace rules skip torch_neuronx and JAX: our eager kernels are Python functions called
  from the dispatcher, and Dynamo must run them, not trace them, when they execute inside
  compiled code (between graphs, or in nodes that run eagerly). Each frame is judged on its
  own, so JAX's frames need the rule too: traced by Dynamo, a JAX tracer stops being an array
  to `jnp.take`.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint
from typing import Any

from .inductor import route

_ENTRY = EntryPoint(name="neuron", value="torch_neuronx.compile:neuron_backend", group="torch_dynamo_backends")


def _register_backend(registry: Any) -> None:
    registry._BACKENDS.setdefault("neuron", _ENTRY)


def _skip_tracing(trace_rules: Any) -> None:
    for package in ("torch_neuronx", "jax", "jaxlib"):
        trace_rules.add(package)


_HOOKS: dict[str, Callable[[Any], None]] = {
    "torch._dynamo.backends.registry": _register_backend,
    "torch._dynamo.trace_rules": _skip_tracing,
    "torch._inductor.compile_fx": route,
}


def install() -> None:
    """Apply each hook now if its module is loaded, else as soon as it is."""
    pending = {}
    for name, hook in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None:
            hook(module)
        else:
            pending[name] = hook
    if pending and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(pending))


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for the hooked modules' imports; runs each hook once its module has executed."""

    def __init__(self, pending: dict[str, Callable[[Any], None]]) -> None:
        self.pending = pending

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        hook = self.pending.pop(fullname, None)
        if hook is None:
            return None
        if not self.pending:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = (
                finder.find_spec(fullname, path, target)
                if finder is not self and hasattr(finder, "find_spec")
                else None
            )
            if spec is not None:
                spec.loader = _Loader(spec.loader, hook)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any, hook: Callable[[Any], None]) -> None:
        self.loader, self.hook = loader, hook

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        self.hook(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
