"""Executables kept on disk under our own signature, in front of XLA's persistent cache.

XLA's cache is keyed on the lowered module, so a new process still traces and lowers every op
signature it meets before XLA can answer. This store is keyed on what decides the module before
any tracing (the caller's signature: op, argument kinds, geometry, dtypes), so a warm process
loads each executable (and what the caller needs to know about it) without tracing, lowering or
compiling. Every entry sits under a fingerprint of everything else the module depends on: the
platform and device, the JAX, jaxlib and torch versions, XLA's flags, and the source of
this package, so a change to any of them makes the old entries unreachable instead of wrong.

Entries are files `<cache dir>/executables/<sha256>`, written atomically (`runtime/cache.py`
lists, prunes and limits them with XLA's entries); each holds its full signature (checked on
load) and a pickle, so only a cache directory the user trusts is read, as with XLA's own. A
missing, unreadable or stale entry is a miss; a failed write is ignored. Only executables XLA
compiled in this process are saved: one it loaded from its own persistent cache serializes
without its compiled functions on the CPU platform. So that XLA's cache never answers a compile
this store missed, each stored executable's module is named after its entry (`module_suffix`);
the check stays for two processes compiling one module at once.

Loading an entry costs milliseconds (XLA deserializes it), which a warm process would pay op by op
as it meets them. So each process writes down, at exit, the order in which it used entries
(`sequences/<sha256>`, one per command line and fingerprint), and the next run of the same
command loads those entries ahead, in that order, on a background thread (XLA releases the GIL
while it deserializes): by the time an op needs its executable it is usually there.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.metadata
import os
import pickle
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jax
from jax._src.lax import linalg
from jax.experimental import serialize_executable

from ..runtime import cache
from ..runtime.debug import debug_dir, log
from ..runtime.platform import device, platform_name

_PACKAGE = Path(__file__).resolve().parents[1]
_XLA_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_thread = threading.local()
SEQUENCE_LIMIT = 512  # entries a sequence keeps, so a run loads at most this many ahead
_used: dict[str, None] = {}  # entries this process used, in first-use order: its sequence
_ahead: dict[str, Future] = {}  # entries the background thread is to load, by name
_ahead_lock = threading.Lock()
_ahead_started = False


def _count_xla_cache_hit(event: str, **_: Any) -> None:
    if event == _XLA_CACHE_HIT:
        _thread.xla_cache_hits = getattr(_thread, "xla_cache_hits", 0) + 1


jax.monitoring.register_event_listener(_count_xla_cache_hit)


def compile_storable(lowered: Any) -> tuple[Any, bool]:
    """`lowered.compile()`, and whether the executable may be saved (XLA compiled it here
    rather than loading it from its persistent cache)."""
    before = getattr(_thread, "xla_cache_hits", 0)
    compiled = lowered.compile()
    return compiled, getattr(_thread, "xla_cache_hits", 0) == before


def enabled() -> bool:
    """Off while XLA dumps are collected (`TORCH_NEURONX_DEBUG_DIR`): a loaded executable is
    not compiled, so it would not be dumped."""
    return debug_dir() is None


@functools.cache
def _fingerprint() -> bytes:
    """What an executable depends on besides its signature."""
    digest = hashlib.sha256()
    versions = [importlib.metadata.version(name) for name in ("jax", "jaxlib", "torch")]
    here = device()  # an executable runs on the device it was compiled for
    for part in (platform_name(), here.device_kind, str(here.id), *versions, os.environ.get("XLA_FLAGS", "")):
        digest.update(part.encode() + b"\0")
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.digest()


def module_suffix(signature: str) -> str:
    """Appended to the name of the module stored under `signature`: XLA's cache key then names
    one entry of this store, and changes with its fingerprint."""
    return "_" + cache.store_tag(_name(signature))


def _name(signature: str) -> str:
    return hashlib.sha256(_fingerprint() + signature.encode()).hexdigest()


def _path(signature: str) -> Path:
    return cache.directory() / cache.STORE / _name(signature)


def load(signature: str) -> tuple[Any, Any] | None:
    """The executable (a `jax.stages.Compiled`) and metadata saved under `signature`, or None."""
    _load_ahead()
    name = _name(signature)
    _used.setdefault(name)
    future = _ahead.pop(name, None)
    found = future.result() if future is not None and not future.cancel() else _read(name)
    if found is None or found[0] != signature:
        return None
    return found[1], found[2]


def _read(name: str) -> tuple[str, Any, Any] | None:
    """(signature, executable, metadata) of entry `name`, or None where it is missing or unusable."""
    try:
        stored, payload, in_tree, out_tree, meta = pickle.loads((cache.directory() / cache.STORE / name).read_bytes())
        _custom_calls_ready()
        compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree, execution_devices=[device()])
    except FileNotFoundError:
        return None
    except Exception as error:  # a stale or damaged entry: build the executable instead
        log.debug("executable store: ignoring entry %s (%s)", name, error)
        return None
    return stored, compiled, meta


def _sequence_path() -> Path:
    """This program's sequence: one per command line (the interpreter's, so `python -c` scripts
    differ by their code), under the fingerprint."""
    program = hashlib.sha256(_fingerprint() + "\0".join(sys.orig_argv).encode()).hexdigest()
    return cache.directory() / cache.SEQUENCES / program


def _load_ahead() -> None:
    """On the process's first look-up: start loading the entries its program's last run used."""
    global _ahead_started
    with _ahead_lock:
        if _ahead_started:
            return
        _ahead_started = True
    try:
        names = _sequence_path().read_text().split()[:SEQUENCE_LIMIT]
    except OSError:
        names = []
    _ahead.update((name, Future()) for name in names)
    thread = threading.Thread(target=_load_in_order, args=(names,), name="torchneuron-load-ahead", daemon=True)
    thread.start()
    atexit.register(_at_exit, thread, names)


def _load_in_order(names: list[str]) -> None:
    for name in names:
        future = _ahead.get(name)
        if future is not None and future.set_running_or_notify_cancel():
            future.set_result(_read(name))


def _at_exit(thread: threading.Thread, previous: list[str]) -> None:
    """Stop loading ahead, and keep this run's sequence for the next."""
    for future in list(_ahead.values()):
        future.cancel()
    thread.join()
    _ahead.clear()
    used = list(_used)[:SEQUENCE_LIMIT]
    if used and used != previous and _write_atomically(_sequence_path(), "\n".join(used).encode()):
        cache.note_write()


@functools.cache
def _custom_calls_ready() -> None:
    """Bind jaxlib's LAPACK kernels, as JAX's own deserialization does (`jax.export`): a process
    binds them when it first lowers a linear-algebra op, and a loaded executable that calls
    them (cholesky, eigh, qr, ...) before that would jump to an unbound kernel."""
    linalg.initialize_lapack()


def save(signature: str, compiled: Any, meta: Any) -> None:
    """Keep `compiled` (a `jax.stages.Compiled`) and `meta` (picklable) under `signature`."""
    _used.setdefault(_name(signature))
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        data = pickle.dumps((signature, payload, in_tree, out_tree, meta), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:
        log.debug("executable store: could not serialize %s (%s)", signature, error)
        return
    if _write_atomically(_path(signature), data):
        cache.note_write()


def _write_atomically(path: Path, data: bytes) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)
    except OSError as error:  # a full or read-only disk costs the next process a compile, nothing more
        log.debug("executable store: could not write %s (%s)", path, error)
        return False
    return True
