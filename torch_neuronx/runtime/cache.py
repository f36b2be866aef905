"""The persistent cache directory (`TORCH_NEURONX_CACHE_DIR`): where it is, what is in it, and
keeping it under a size (`TORCH_NEURONX_CACHE_MAX_SIZE`).

Two writers share the directory; every entry is a file of theirs (any other file is left alone):

- the executable store (`eager/executable_store.py`): `executables/<sha256>`, one eager op
  executable per file (`executables/tmp*` while a write is unfinished);
- the executable store's sequences: `sequences/<sha256>`, the order in which one program (command
  line) used store entries, which its next run loads ahead on a background thread;
- XLA's persistent compilation cache (JAX's `jax_compilation_cache_dir`): `<module>-<key>-cache`,
  one compiled module per file (with `<module>-<key>-atime` where JAX's own eviction is on).
  Only the module's name says whose it is: a torch.compile graph's is `jit_neuron_<kind>`; a
  stored eager op's ends in `_<tag>`, the first 12 hex digits of its store entry's name (XLA's
  copy of that executable); an eager op compiled without a store entry is `jit_aten_<op>`; any
  other name (JAX computations outside this package's kernels and graphs) cannot be attributed.

An entry is what is removed as one: a store file with XLA's copies of its module, or one XLA
module. XLA's copy goes first: a copy left without its store file would answer the next compile
of that op from XLA's cache, which the store cannot save again, so every later process would
trace it. An entry's last use is the latest access or modification time of its files; access
times are as fresh as the filesystem keeps them (Linux's default `relatime` updates them about
daily, `noatime` never, and then least recently used means oldest written).

The size limit is kept by the processes that write: each write (a store save, or JAX's event
for a write to its cache) is counted, and a process that wrote measures the directory and
removes the least recently used entries until it fits, at its exit and every `_interval`
writes while it runs. Between checks the directory may exceed the limit by what was written
since. Unset means no limit and no measuring.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .debug import log

MAX_SIZE_VARIABLE = "TORCH_NEURONX_CACHE_MAX_SIZE"
STORE = "executables"  # the executable store's folder in the cache directory
SEQUENCES = "sequences"  # its sequences' folder
TAG_DIGITS = 12  # hex digits of a store entry's name that end its module's name in XLA's cache

# kind -> what it is; an entry has exactly one kind
KINDS = {
    "eager": "eager op executables (executables/<sha256>, with XLA's copy of each module)",
    "graph": "torch.compile graphs (XLA's cache, jit_neuron_*)",
    "eager_xla": "eager op modules in XLA's cache only (no store entry: an older version, or not storable)",
    "sequence": "orders in which a program used eager executables (sequences/<sha256>), loaded ahead by its next run",
    "other": "XLA modules of unknown origin (JAX computations outside this package) and unfinished writes",
}

_XLA_SUFFIXES = ("-cache", "-atime")  # of equal length
_STORE_NAME = re.compile(r"[0-9a-f]{64}")
_TAGGED_MODULE = re.compile(rf".*_([0-9a-f]{{{TAG_DIGITS}}})")
_XLA_WRITE = "/jax/compilation_cache/cache_misses"  # JAX records it as it writes an entry
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def directory() -> Path:
    """The cache directory: `TORCH_NEURONX_CACHE_DIR`, else `~/.cache/torchneuron/xla`."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchneuron" / "xla"
    return Path(os.environ.get("TORCH_NEURONX_CACHE_DIR", default))


def store_tag(entry_name: str) -> str:
    """What ends (after `_`) the name of the module stored as `executables/<entry_name>`."""
    return entry_name[:TAG_DIGITS]


def parse_size(text: str) -> int:
    """Bytes in a size such as `2G`, `500M`, `1.5GiB` or `4096` (binary units: 1K = 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if match is None:
        raise ValueError(f"{text!r} is not a size: write a number with an optional K, M, G or T suffix, such as 10G")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_size(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if size >= _UNITS[unit]:
            return f"{size / _UNITS[unit]:.1f} {unit}iB"
    return f"{size} B"


def max_size() -> int | None:
    """`TORCH_NEURONX_CACHE_MAX_SIZE` in bytes; None where it is unset (no limit)."""
    text = os.environ.get(MAX_SIZE_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return parse_size(text)
    except ValueError as error:
        raise ValueError(f"{MAX_SIZE_VARIABLE}: {error}") from None


@dataclass(frozen=True)
class Entry:
    kind: str
    paths: tuple[str, ...]  # in removal order: XLA's files before the store's
    size: int
    last_used: float  # seconds since the epoch


@dataclass
class Contents:
    root: Path
    entries: list[Entry] = field(default_factory=list)
    unrecognized: list[str] = field(default_factory=list)  # neither writer's: never removed

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """kind -> (entries, bytes), every kind present."""
        totals = dict.fromkeys(KINDS, (0, 0))
        for e in self.entries:
            count, size = totals[e.kind]
            totals[e.kind] = (count + 1, size + e.size)
        return totals


class _Group:
    """The files of one entry as the scan finds them (plain strings: a cache holds 1e5 files)."""

    __slots__ = ("first", "kind", "last", "last_used", "size")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.first: list[str] = []  # removed first (XLA's files)
        self.last: list[str] = []
        self.size = 0
        self.last_used = 0.0

    def add(self, file: tuple[str, str, os.stat_result], first: bool) -> None:
        path, _, stat = file
        (self.first if first else self.last).append(path)
        self.size += stat.st_size
        self.last_used = max(self.last_used, stat.st_atime, stat.st_mtime)

    def entry(self) -> Entry:
        return Entry(self.kind, (*self.first, *self.last), self.size, self.last_used)


def _files(folder: Path) -> Iterable[tuple[str, str, os.stat_result]]:
    """(path, name, stat) of each file in `folder`."""
    try:
        with os.scandir(folder) as found:
            for item in found:
                try:
                    if item.is_file(follow_symlinks=False):
                        yield item.path, item.name, item.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed by another process since the listing
                    continue
    except FileNotFoundError:
        return


def scan(root: Path | None = None) -> Contents:
    """Every entry in the cache directory (`directory()` unless given), with its kind."""
    root = directory() if root is None else root
    contents = Contents(root)
    stored: dict[str, _Group] = {}  # store tag -> its entry
    groups: list[_Group] = []
    for file in _files(root / STORE):
        name = file[1]
        if _STORE_NAME.fullmatch(name):
            group = stored.setdefault(store_tag(name), _Group("eager"))
        elif name.startswith("tmp"):
            group = _Group("other")
            groups.append(group)
        else:
            contents.unrecognized.append(file[0])
            continue
        group.add(file, first=False)
    for file in _files(root / SEQUENCES):
        group = _Group("sequence" if _STORE_NAME.fullmatch(file[1]) else "other")
        group.add(file, first=False)
        groups.append(group)
    modules: dict[str, list[tuple[str, str, os.stat_result]]] = {}  # XLA's key -> its files
    for file in _files(root):
        if file[1].endswith(_XLA_SUFFIXES):
            modules.setdefault(file[1][: -len("-cache")], []).append(file)
        else:
            contents.unrecognized.append(file[0])
    for key, files in modules.items():
        module = key.rpartition("-")[0]
        tagged = _TAGGED_MODULE.fullmatch(module)
        if tagged and tagged.group(1) in stored:
            group = stored[tagged.group(1)]
        else:
            if module.startswith("jit_neuron_"):
                kind = "graph"
            elif module.startswith("jit_aten_"):
                kind = "eager_xla"
            else:
                kind = "other"
            group = _Group(kind)
            groups.append(group)
        for file in files:
            group.add(file, first=True)
    contents.entries = [group.entry() for group in [*stored.values(), *groups]]
    return contents


def remove(entries: Iterable[Entry]) -> tuple[int, int]:
    """Delete `entries` (each file in its order); the number of entries and bytes removed.
    A file another process removed first counts as removed."""
    count = size = 0
    for entry in entries:
        for path in entry.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        count += 1
        size += entry.size
    return count, size


def clear(root: Path | None = None) -> tuple[int, int]:
    """Remove every entry; files neither writer made stay."""
    return remove(scan(root).entries)


def prune(max_bytes: int, root: Path | None = None, contents: Contents | None = None) -> tuple[int, int]:
    """Remove the least recently used entries until the entries total at most `max_bytes`."""
    contents = scan(root) if contents is None else contents
    excess = contents.size - max_bytes
    chosen = []
    for entry in sorted(contents.entries, key=lambda e: e.last_used):
        if excess <= 0:
            break
        chosen.append(entry)
        excess -= entry.size
    return remove(chosen)


# ---- the limit, kept by the processes that write ---------------------------------------------

_lock = threading.Lock()
_unchecked = 0  # writes by this process since its last check
_interval = 64  # writes between checks: at least 64, and 1% of the files the last check found


def note_write() -> None:
    """One file was written to the cache directory: keep it under `TORCH_NEURONX_CACHE_MAX_SIZE`.
    A check reads the whole directory (7 to 15 us per file measured), so while the process runs
    it comes every `_interval` writes, 1% of a scan per write (about 1 ms beside a compile of
    10 ms or more), and once more when the process exits."""
    global _unchecked
    limit = max_size()
    if limit is None:
        return
    with _lock:
        _unchecked += 1
        if _unchecked >= _interval:
            _check(limit)


def on_jax_event(event: str, **_: Any) -> None:
    """A `jax.monitoring` listener: counts JAX's writes to its persistent cache."""
    if event == _XLA_WRITE:
        note_write()


def _check_at_exit() -> None:
    limit = max_size()
    with _lock:
        if limit is not None and _unchecked:
            _check(limit)


# Registered first, so it runs after the exit handlers of the writers (atexit runs last-in first-out),
# which may still write (the executable store's sequence).
atexit.register(_check_at_exit)


def _check(limit: int) -> None:
    """Prune to `limit` (the caller holds `_lock`). A failure costs disk space, never an op."""
    global _unchecked, _interval
    _unchecked = 0
    try:
        contents = scan()
        count, size = prune(limit, contents=contents)
    except OSError as error:
        log.warning("cache: could not keep %s under %s (%s)", directory(), format_size(limit), error)
        return
    files = sum(len(e.paths) for e in contents.entries) + len(contents.unrecognized)
    _interval = max(64, files // 100)
    if count:
        log.info("cache: removed %d least recently used entries (%s) to stay under %s=%s",
                 count, format_size(size), MAX_SIZE_VARIABLE, format_size(limit))  # fmt: skip
