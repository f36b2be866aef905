"""The native module (`torch_neuronx/csrc/native.cpp`): device memory and the eager hot path.

Built once per source text, torch and Python version into `~/.cache/torchneuron/native/<tag>`
(`./dev` builds it ahead of time with `native.build()`) and loaded on
first device use. `TORCH_NEURONX_NATIVE=0` keeps the pure-Python path; where the module cannot
build, one warning says why and the pure-Python path runs.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

import torch

NAME = "torch_neuronx_native"
SOURCE = Path(__file__).resolve().parent.parent / "csrc" / "native.cpp"
_FLAGS = ["-O2", "-std=c++17", "-DUSE_KINETO"]  # USE_KINETO: the profiler plugin's headers
_INCLUDES = [str(Path(torch.__file__).parent / "include" / "kineto")]
_failure: list[str] = []


def requested() -> bool:
    """Whether `TORCH_NEURONX_NATIVE` allows the native module (default: yes)."""
    return os.environ.get("TORCH_NEURONX_NATIVE", "1") not in ("0", "false", "False", "")


@functools.cache
def build_dir() -> Path:
    """Where this source, torch and Python build to (a new tag whenever one of them changes);
    computed once, since `import torch` asks (`built`) and loading asks again."""
    tag = hashlib.sha256(
        b"\0".join([SOURCE.read_bytes(), torch.__version__.encode(), sys.version.encode(), " ".join(_FLAGS).encode()])
    ).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchneuron" / "native"
    return root / tag


def build() -> Path:
    """Build the module if this tag has none yet; the path of the built library."""
    from torch.utils import cpp_extension

    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        NAME,
        [str(SOURCE)],
        extra_cflags=_FLAGS,
        extra_include_paths=_INCLUDES,
        build_directory=str(directory),
        verbose=False,
    )
    return directory / f"{NAME}.so"


def built() -> bool:
    """Whether this tag's module is built and may be loaded without building."""
    library = build_dir() / f"{NAME}.so"
    return requested() and library.exists() and not (library.parent / "lock").exists()


@functools.cache
def module() -> ModuleType | None:
    """The loaded native module, or None on the pure-Python path (see `status`)."""
    if not requested():
        return None
    try:
        library = build_dir() / f"{NAME}.so"
        if not library.exists() or (library.parent / "lock").exists():
            library = build()
        loader = importlib.machinery.ExtensionFileLoader(NAME, str(library))
        spec = importlib.util.spec_from_file_location(NAME, library, loader=loader)
        loaded = importlib.util.module_from_spec(spec)
        loader.exec_module(loaded)
        return loaded
    except Exception as error:  # any build or load failure leaves the pure-Python path working
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        _failure.append(reason)
        warnings.warn(
            f"neuron: the native eager path could not be built or loaded ({reason}); eager ops run on the "
            "pure-Python path. Install gcc and ninja, or set TORCH_NEURONX_NATIVE=0 to silence this.",
            stacklevel=2,
        )
        return None


def status() -> str:
    """Which eager path runs, in words (`torchneuron info`)."""
    if not requested():
        return "pure Python (TORCH_NEURONX_NATIVE=0)"
    if module() is None:
        return f"pure Python (native module unavailable: {_failure[0] if _failure else 'unknown'})"
    return f"native ({build_dir()})"
