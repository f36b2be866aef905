"""torch.compile benchmarks (for `torchneuron bench`): the train step of a tiny and of a larger
Llama, eager vs compiled on neuron next to CPU eager and CPU inductor; static-cache decode
tokens/s; and time to the first compiled result in a fresh process with a cold vs a warm
persistent cache.

`python -m torch_neuronx.bench.torch_compile [--quick]` prints a table; `run()` returns the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from .models import LARGER_LLAMA, LLAMA, MID_LLAMA, tiny_llama

MODELS = {"tiny": LLAMA, "larger": LARGER_LLAMA}


def _sync(device: str) -> None:
    if device == "neuron":
        torch.neuron.synchronize()


def make_train_step(
    device: str,
    backend: str | None,
    compile_optimizer: bool = False,
    batch: int = 4,
    seq: int = 128,
    config: dict | None = None,
) -> Callable[[], float]:
    """A fresh Llama of `config` (default `LLAMA`, seed-0 weights) with AdamW on `device`, and one
    training step over a fixed seed-0 batch of `batch` x `seq` tokens: forward (through
    `torch.compile(backend=backend)` when a backend is given), backward, `opt.step`, `zero_grad`;
    it returns `loss.item()`. `compile_optimizer` also compiles `opt.step` with the same backend
    (PyTorch's compiled-optimizer recipe)."""
    torch._dynamo.reset()
    config = config or LLAMA
    llama = tiny_llama(device, config).train()
    opt = torch.optim.AdamW(llama.parameters(), lr=1e-3)
    ids = torch.randint(0, config["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0)).to(device)
    forward = torch.compile(llama, backend=backend) if backend else llama
    update = torch.compile(opt.step, backend=backend) if backend and compile_optimizer else opt.step

    def step() -> float:
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        update()
        opt.zero_grad()
        return loss.item()

    return step


def train_step(
    device: str,
    backend: str | None,
    steps: int = 5,
    compile_optimizer: bool = False,
    batch: int = 4,
    seq: int = 128,
    model: str = "tiny",
) -> dict[str, Any]:
    """Seconds per AdamW step of `make_train_step` after one warm-up step: the median of `steps`
    steps each synced to the device, and the mean of `steps` more run back to back with one sync
    at the end, as a training loop runs (the host prepares a step while the device finishes the
    last one); and the warm-up (first, compiling) step's seconds. `model`: a key of MODELS."""
    step = make_train_step(device, backend, compile_optimizer, batch, seq, MODELS[model])
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    back_to_back = (time.perf_counter() - start) / steps
    return {"step_s": statistics.median(times), "back_to_back_step_s": back_to_back, "first_step_s": first}


GENERATE_RUNS = 3  # timed generate calls per measurement, after one warm-up call


def _generate_tokens_per_s(model: torch.nn.Module, tokens: int, **kwargs: Any) -> float:
    """Greedy `generate` tokens/s (median of GENERATE_RUNS) after an identical warm-up
    generate, which compiles what it needs: the decode graph, and eager kernels for each new
    length of the growing `input_ids`."""
    ids = torch.randint(0, LLAMA["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(0)).to(model.device)
    model.generate(ids, max_new_tokens=tokens + 1, do_sample=False, **kwargs)
    seconds = []
    for _ in range(GENERATE_RUNS):
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=tokens + 1, do_sample=False, **kwargs)
        seconds.append(time.perf_counter() - start)
    return tokens / statistics.median(seconds)


def decode(tokens: int = 32) -> dict[str, Any]:
    """Static-cache greedy decoding on neuron (generate compiles the decode step with the
    neuron backend): tokens/s of the whole generate loop and of the compiled step alone, next
    to PyTorch CPU eager generate (dynamic cache); the eager ops generate runs per token around
    the compiled step (Transformers' mask, stopping and bookkeeping ops, the eager prefill spread
    over the tokens); neuron's default dynamic-cache generate (every op eager); and both
    generate loops for MID_LLAMA."""
    import torch_neuronx
    from torch_neuronx import compile as compiled

    def eager_ops() -> int:
        return sum(torch_neuronx.metrics()["op_calls"].values())

    torch._dynamo.reset()
    cpu = _generate_tokens_per_s(tiny_llama("cpu").eval(), tokens)
    model = tiny_llama("neuron").eval()
    before, ops_before = compiled.metrics(), eager_ops()
    neuron = _generate_tokens_per_s(model, tokens, cache_implementation="static", max_cache_len=64)
    after, ops_after = compiled.metrics(), eager_ops()
    step = _compiled_step_seconds(model)
    dynamic = _generate_tokens_per_s(model, tokens)
    mid_cpu = _generate_tokens_per_s(tiny_llama("cpu", MID_LLAMA).eval(), tokens)
    mid = tiny_llama("neuron", MID_LLAMA).eval()
    mid_neuron = _generate_tokens_per_s(mid, tokens, cache_implementation="static", max_cache_len=64)
    return {
        "cpu_eager_tokens_per_s": cpu,
        "generate_tokens_per_s": neuron,
        "compiled_step_tokens_per_s": 1 / step,
        "dynamic_generate_tokens_per_s": dynamic,
        "compiles_in_warmup_and_run": after["compiles"] - before["compiles"],
        "eager_ops_per_token": (ops_after - ops_before) / ((1 + GENERATE_RUNS) * (tokens + 1)),
        "mid_cpu_eager_tokens_per_s": mid_cpu,
        "mid_generate_tokens_per_s": mid_neuron,
    }


def _compiled_step_seconds(model: torch.nn.Module, repeat: int = 20) -> float:
    """One compiled decode step (a token into a static cache), timed on its own."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=64)
    step = torch.compile(model, backend="neuron", dynamic=False)
    token = torch.zeros(1, 1, dtype=torch.long, device="neuron")
    positions = [torch.tensor([i], device="neuron") for i in range(repeat + 2)]  # uploads stay out of the timing
    times = []
    with torch.no_grad():
        for position in positions:
            start = time.perf_counter()
            step(input_ids=token, past_key_values=cache, cache_position=position, use_cache=True)
            torch.neuron.synchronize()
            times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


_FIRST_RESULT = """
import json, time, torch, torch_neuronx, transformers.models.llama.modeling_llama
from torch_neuronx.bench.models import tiny_llama
t0 = time.perf_counter()
model = tiny_llama("neuron").eval()
ids = torch.zeros(1, 16, dtype=torch.long, device="neuron")
with torch.no_grad():
    torch.compile(model, backend="neuron")(ids).logits.cpu()
m = torch_neuronx.metrics()
print(json.dumps([time.perf_counter() - t0, m["compile"]["compile_seconds"], m["compile_seconds"]]))
"""


def persistent_cache() -> dict[str, Any]:
    """Two fresh processes sharing a new TORCH_NEURONX_CACHE_DIR, cold then warm: seconds from
    process start, and from after the imports, to the first compiled result of the tiny Llama
    forward; and the seconds spent building executables (graph executables, eager kernels),
    which is what the persistent cache serves (Dynamo/AOTAutograd tracing is redone per process)."""
    with tempfile.TemporaryDirectory() as cache_dir:
        env = {**os.environ, "TORCH_NEURONX_CACHE_DIR": cache_dir}
        runs = []
        for _ in ("cold", "warm"):
            start = time.perf_counter()
            printed = _python_json(_FIRST_RESULT, env)
            runs.append((time.perf_counter() - start, *printed))
    result: dict[str, Any] = {}
    for name, (total, after_imports, graph_s, eager_s) in zip(("cold", "warm"), runs):
        result[name] = {
            "total_s": total,
            "after_imports_s": after_imports,
            "graph_executables_s": graph_s,
            "eager_kernels_s": eager_s,
        }
    result["speedup"] = {k: result["cold"][k] / result["warm"][k] for k in result["cold"]}
    return result


def train_step_in_new_process(
    device: str, backend: str | None, steps: int, compile_optimizer: bool, model: str = "tiny", env: dict | None = None
) -> dict[str, Any]:
    """`train_step` in a fresh process (with `env` added to its environment), as a user runs it:
    the configurations measured one after another would otherwise inherit each other's heap,
    caches and compiled state."""
    code = (
        "import json; from torch_neuronx.bench.torch_compile import train_step; "
        f"print(json.dumps(train_step({device!r}, {backend!r}, {steps}, {compile_optimizer}, model={model!r})))"
    )
    return _python_json(code, {**os.environ, **env} if env else None)


def _python_json(code: str, env: dict | None = None) -> Any:
    """Run `code` in a fresh Python; the JSON value its last printed line holds."""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# name -> (device, backend, compile_optimizer, environment). "every core to XLA" is the other
# split of the host's cores (runtime/cores.py), for comparison with the default.
EVERY_CORE = {"TORCH_NEURONX_HOST_CORES": "0"}
TRAIN_CONFIGURATIONS = {
    "cpu eager": ("cpu", None, False, None),
    "cpu inductor": ("cpu", "inductor", False, None),
    "cpu inductor+opt": ("cpu", "inductor", True, None),
    "neuron eager": ("neuron", None, False, None),
    "neuron compiled": ("neuron", "neuron", False, None),
    "neuron compiled+opt": ("neuron", "neuron", True, None),
    "  every core to XLA": ("neuron", "neuron", False, EVERY_CORE),
}
LARGER_CONFIGURATIONS = {
    name: TRAIN_CONFIGURATIONS[name]
    for name in ("cpu eager", "cpu inductor", "neuron eager", "neuron compiled", "  every core to XLA")
}


def train_steps(steps: int, rounds: int, model: str = "tiny", configurations: dict | None = None) -> dict[str, Any]:
    """Every configuration once per round, each in a fresh process, the rounds one after another:
    a host's speed drifts over minutes, so configurations are compared within a round. Per
    configuration: the median over rounds of its synced, back-to-back and first-step seconds,
    every round's synced step, and the median over rounds of its step times relative to CPU
    eager's in that round."""
    configurations = configurations or TRAIN_CONFIGURATIONS
    runs: dict[str, list] = {name: [] for name in configurations}
    for _ in range(rounds):
        for name, (device, backend, compile_optimizer, env) in configurations.items():
            runs[name].append(train_step_in_new_process(device, backend, steps, compile_optimizer, model, env))
    baseline = runs["cpu eager"]

    def median(results: list, key: str, relative: bool = False) -> float:
        return statistics.median(r[key] / (b[key] if relative else 1) for r, b in zip(results, baseline))

    return {
        name: {
            "step_s": median(results, "step_s"),
            "back_to_back_step_s": median(results, "back_to_back_step_s"),
            "first_step_s": median(results, "first_step_s"),
            "rounds_step_s": [r["step_s"] for r in results],
            "vs_cpu_eager": median(results, "step_s", relative=True),
            "back_to_back_vs_cpu_eager": median(results, "back_to_back_step_s", relative=True),
        }
        for name, results in runs.items()
    }


def run(quick: bool = False) -> dict[str, Any]:
    steps, rounds = (2, 1) if quick else (20, 5)
    return {
        "train_step": train_steps(steps, rounds),
        "train_step_larger": train_steps(steps, (rounds + 1) // 2, "larger", LARGER_CONFIGURATIONS),
        "decode": decode(8 if quick else 32),
        "persistent_cache": persistent_cache(),
    }


def _train_table(title: str, train: dict[str, Any]) -> list[str]:
    lines = [
        f"{title} (batch 4, seq 128, AdamW; each run in a fresh process, configurations alternated over "
        f"{len(train['cpu eager']['rounds_step_s'])} round(s); +opt: opt.step compiled too; medians; "
        "synced: each step synced; back to back: one sync after all steps)",
        f"{'':20s} {'synced ms':>10s} {'x cpu eager':>12s} {'back to back ms':>16s} {'x cpu eager':>12s} "
        f"{'first step s':>13s}  synced per round ms",
    ]
    for name, r in train.items():
        rounds = ", ".join(f"{s * 1e3:.2f}" for s in r["rounds_step_s"])
        lines.append(
            f"{name:20s} {r['step_s'] * 1e3:10.2f} {r['vs_cpu_eager']:12.2f} {r['back_to_back_step_s'] * 1e3:16.2f} "
            f"{r['back_to_back_vs_cpu_eager']:12.2f} {r['first_step_s']:13.2f}  {rounds}"
        )
    return lines


def format_results(results: dict[str, Any]) -> str:
    lines = _train_table("tiny Llama train step", results["train_step"])
    lines += _train_table("4-layer 256-wide Llama train step", results["train_step_larger"])
    d = results["decode"]
    lines.append(
        f"greedy decode tokens/s: CPU eager generate {d['cpu_eager_tokens_per_s']:.1f}; neuron static-cache "
        f"generate {d['generate_tokens_per_s']:.1f}, its compiled step alone {d['compiled_step_tokens_per_s']:.1f} "
        f"({d['compiles_in_warmup_and_run']} graph compiles for warm-up and run; "
        f"{d['eager_ops_per_token']:.0f} eager ops per token around it); neuron dynamic-cache generate "
        f"{d['dynamic_generate_tokens_per_s']:.1f} (every op eager)"
    )
    lines.append(
        f"  58M-parameter Llama: CPU eager generate {d['mid_cpu_eager_tokens_per_s']:.1f}; neuron static-cache "
        f"generate {d['mid_generate_tokens_per_s']:.1f}"
    )
    p = results["persistent_cache"]
    lines.append("first compiled result in a new process (cold -> warm persistent cache, seconds):")
    for key, label in (
        ("total_s", "process total"),
        ("after_imports_s", "after imports"),
        ("graph_executables_s", "graph executables built"),
        ("eager_kernels_s", "eager kernels built"),
    ):
        lines.append(f"  {label:24s} {p['cold'][key]:7.2f} -> {p['warm'][key]:7.2f}  ({p['speedup'][key]:.1f}x)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.quick)
    print(json.dumps(results, indent=2) if args.json else format_results(results))


if __name__ == "__main__":
    main()
