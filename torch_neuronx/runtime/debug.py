"""What a developer can turn on to see inside the backend.

`TORCH_NEURONX_LOG_LEVEL` (DEBUG, INFO, WARNING, ...) sets the level of the `torch_neuronx`
logger and prints its records to stderr: INFO reports each compiled graph executable and each
recompile with its reason, DEBUG each eager kernel built.

`TORCH_NEURONX_DEBUG_DIR` collects, per process, what was compiled: `graphs/` holds every FX
graph the torch.compile backend received (readable Python, with shapes), `xla/` XLA's own dumps
of every module it compiled, before and after optimisation. XLA reads its flags when the
backend starts, so the directory must be set before the first device use.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger("torch_neuronx")


def configure_logging() -> None:
    level = os.environ.get("TORCH_NEURONX_LOG_LEVEL", "").upper()
    if not level:
        return
    if not isinstance(logging.getLevelName(level), int):  # a warning: this runs inside `import torch`
        warnings.warn(
            f"TORCH_NEURONX_LOG_LEVEL={level!r} is not a logging level (DEBUG, INFO, WARNING, ERROR); ignored",
            stacklevel=2,
        )
        return
    log.setLevel(level)
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[torch_neuronx %(levelname)s] %(message)s"))
        log.addHandler(handler)


def debug_dir() -> Path | None:
    path = os.environ.get("TORCH_NEURONX_DEBUG_DIR")
    return Path(path) / str(os.getpid()) if path else None


def request_xla_dumps() -> None:
    """Ask XLA (before it starts) to dump every module it compiles into the debug directory."""
    path = debug_dir()
    flags = os.environ.get("XLA_FLAGS", "")
    if path is not None and "--xla_dump_to" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_dump_to={path / 'xla'} --xla_dump_hlo_as_text".strip()


def dump_graph(name: str, gm: Any) -> None:
    """Write an FX graph module's readable code under `graphs/`."""
    path = debug_dir()
    if path is None:
        return
    (path / "graphs").mkdir(parents=True, exist_ok=True)
    text = gm.print_readable(print_output=False, include_stride=True, include_device=True)
    (path / "graphs" / f"{module_name(name)}.py").write_text(text)


def module_name(name: str) -> str:
    """A name usable for files and XLA modules: `forward 0/1` -> `forward_0_1`."""
    return re.sub(r"\W+", "_", name).strip("_")
