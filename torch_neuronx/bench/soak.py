"""Soak benchmark (for `torchneuron bench soak`): the tiny Llama trained for thousands of AdamW
steps, eager and then compiled, each in a fresh process; after every step the device memory
allocated, the executables held and the host's resident memory, so that anything a step leaves
behind shows as a curve that does not stay flat.

`python -m torch_neuronx.bench.soak [--quick] [--steps N]` prints the report; `run()` returns the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch

from .torch_compile import _python_json, make_train_step

STEPS, QUICK_STEPS = 2000, 200
CURVE_POINTS = 20  # rows of the printed curve
MODES = {"eager": None, "compiled": "neuron"}  # name -> torch.compile backend


def rss_bytes() -> int:
    """This process's resident host memory now (Linux: /proc/self/statm, in pages)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak(backend: str | None, steps: int, warmup: int) -> dict[str, Any]:
    """`steps` steps of the compile bench's tiny-Llama train step (batch 4, seq 128, AdamW) on
    neuron, through `torch.compile(backend=backend)` when one is given. After every step (which
    ends in `loss.item()`): `memory_allocated`, live eager executables, graph compiles, host RSS.
    The first `warmup` steps build executables and grow the host's heaps; the figures compare
    every later step with the end of warm-up."""
    import torch_neuronx

    step = make_train_step("neuron", backend)
    rows = []
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
        m = torch_neuronx.metrics()
        allocated = torch.neuron.memory_allocated()
        rows.append((loss, allocated, m["live_executables"], m["compile"]["compiles"], rss_bytes()))
    seconds = time.perf_counter() - start
    losses, allocated, live, compiles, rss = (list(column) for column in zip(*rows))
    base = warmup - 1  # the last warm-up step
    every = max(1, steps // CURVE_POINTS)
    return {
        "steps": steps,
        "warmup_steps": warmup,
        "seconds": seconds,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "allocated_after_warmup": allocated[base],
        "allocated_max_deviation": max(abs(a - allocated[base]) for a in allocated[base:]),
        "allocated_max": max(allocated),
        "live_executables_after_warmup": live[base],
        "live_executables_max": max(live),
        "live_executables_end": live[-1],
        "compiles_after_warmup": compiles[base],
        "compiles_end": compiles[-1],
        "rss_after_warmup": rss[base],
        "rss_end": rss[-1],
        "rss_max": max(rss[base:]),
        "rss_growth_pct": 100 * (rss[-1] / rss[base] - 1),
        "curve": [[i + 1, *rows[i]] for i in sorted({0, base, *range(every - 1, steps, every), steps - 1})],
    }


def run(quick: bool = False, steps: int | None = None) -> dict[str, Any]:
    """Eager then compiled, each in a fresh process (the second would otherwise start on the
    first's heap and caches); warm-up is the first 5% of the steps."""
    steps = steps or (QUICK_STEPS if quick else STEPS)
    warmup = max(1, steps // 20)
    code = "import json; from torch_neuronx.bench.soak import soak; print(json.dumps(soak({!r}, {}, {})))"
    return {name: _python_json(code.format(backend, steps, warmup)) for name, backend in MODES.items()}


def format_results(results: dict[str, Any]) -> str:
    mib = 2**20
    lines = []
    for name, r in results.items():
        lines.append(
            f"soak, tiny Llama {name} (batch 4, seq 128, AdamW, fresh process): {r['steps']} steps in "
            f"{r['seconds']:.1f} s ({r['seconds'] / r['steps'] * 1e3:.1f} ms/step), loss {r['first_loss']:.4f} -> "
            f"{r['last_loss']:.4f}; warm-up {r['warmup_steps']} steps"
        )
        lines.append(
            f"  memory_allocated after warm-up {r['allocated_after_warmup']} B, max deviation after it "
            f"{r['allocated_max_deviation']} B (max over the run {r['allocated_max']} B)"
        )
        lines.append(
            f"  live eager executables {r['live_executables_after_warmup']} after warm-up, max "
            f"{r['live_executables_max']}, {r['live_executables_end']} at the end; graph compiles "
            f"{r['compiles_after_warmup']} after warm-up, {r['compiles_end']} at the end"
        )
        lines.append(
            f"  host RSS {r['rss_after_warmup'] / mib:.1f} MiB after warm-up -> {r['rss_end'] / mib:.1f} MiB at the "
            f"end ({r['rss_growth_pct']:+.2f}%; max {r['rss_max'] / mib:.1f} MiB)"
        )
        header = ("step", "loss", "allocated B", "live exec", "compiles", "RSS MiB")
        lines.append("  " + " ".join(f"{h:>{w}s}" for h, w in zip(header, (6, 8, 12, 10, 9, 8))))
        for step, loss, allocated, live, compiles, rss in r["curve"]:
            lines.append(f"  {step:6d} {loss:8.4f} {allocated:12d} {live:10d} {compiles:9d} {rss / mib:8.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps instead of {STEPS}")
    parser.add_argument("--steps", type=int, help="steps per run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.quick, args.steps)
    print(json.dumps(results, indent=2) if args.json else format_results(results))


if __name__ == "__main__":
    main()
