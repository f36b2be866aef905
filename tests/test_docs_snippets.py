"""Every ```python block of docs/migrating.md and docs/troubleshooting.md runs, and every ```output
block shows what the python block before it prints.

Each document runs in one fresh process, in a temporary working directory and with the
environment torchrun gives a one-process job (so `init_process_group` works), its blocks in
order, each as its own script: a fresh namespace, the environment restored, no process group
and no Dynamo state left behind. Blocks in other fences (```text: code for torch-xla or Optimum
Neuron, which are not installed) are not run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist_workers"))

from launch import REPO, free_port

DOCS = ["docs/migrating.md", "docs/troubleshooting.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.S | re.M)

_RUNNER = """
import contextlib, io, json, os, sys, traceback, warnings
import torch, torch.distributed as dist

results = []
for name, code in json.loads(sys.stdin.read()):
    saved, out = dict(os.environ), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), warnings.catch_warnings():
            warnings.simplefilter("always")
            exec(compile(code, name, "exec"), {"__name__": "__main__"})
        results.append({"ok": True, "output": out.getvalue()})
    except BaseException:
        results.append({"ok": False, "output": out.getvalue() + traceback.format_exc()})
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if dist.is_initialized():
            dist.destroy_process_group()
        torch._dynamo.reset()
print("RESULTS " + json.dumps(results))
"""


def blocks(doc: str) -> list[tuple[str, str, int]]:
    """(fence info, code, line of the fence) for every fenced block of `doc`, in order."""
    text = (REPO / doc).read_text()
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def snippets(doc: str) -> list[tuple[str, str, int]]:
    return [block for block in blocks(doc) if block[0] == "python"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """doc -> the result of each of its python blocks."""
    results = {}
    for doc in DOCS:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            **{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
            **{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo"},
        }
        code = [(f"{doc}:{line}", source) for _, source, line in snippets(doc)]
        out = subprocess.run(
            [sys.executable, "-c", _RUNNER],
            input=json.dumps(code),
            cwd=tmp_path_factory.mktemp("docs"),
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-5000:]
        results[doc] = json.loads(out.stdout.rpartition("RESULTS ")[2])
    return results


CASES = [(doc, i, line) for doc in DOCS for i, (_, _, line) in enumerate(snippets(doc))]


@pytest.mark.parametrize(("doc", "index", "line"), CASES, ids=[f"{d.split('/')[1]}:{n}" for d, _, n in CASES])
def test_python_block_runs(ran: dict, doc: str, index: int, line: int) -> None:
    result = ran[doc][index]
    assert result["ok"], f"{doc}, the python block at line {line}:\n{result['output'][-4000:]}"


@pytest.mark.parametrize("doc", DOCS)
def test_output_blocks_show_what_the_code_prints(ran: dict, doc: str) -> None:
    """An ```output block follows a python block; each of its lines appears in what that
    block printed, in order (so it may leave lines out, never invent them)."""
    index, checked = -1, 0
    for info, text, line in blocks(doc):
        if info == "python":
            index += 1
        elif info == "output":
            assert index >= 0, f"{doc}:{line}: an output block before any python block"
            printed = ran[doc][index]["output"]
            position = 0
            for expected in text.strip().splitlines():
                found = printed.find(expected.strip(), position)
                assert found >= 0, f"{doc}:{line}: {expected.strip()!r} is not in what the block printed:\n{printed}"
                position = found + len(expected.strip())
            checked += 1
    assert checked or doc == "docs/migrating.md", f"{doc} shows no output to check"


def test_every_doc_has_runnable_blocks() -> None:
    for doc in DOCS:
        assert snippets(doc), doc
        fences = {info for info, _, _ in blocks(doc)}
        assert fences <= {"python", "output", "text", "bash"}, f"{doc}: fences {fences}"
