"""`torchneuron profile [--out DIR] SCRIPT [ARGS...]`: run a script under `torch.profiler` with
device activity and write what a user looks at.

Into DIR: `trace.json`, the chrome trace (host ops, and each executable on the neuron row);
`summary.txt`, the top 20 ops by device time, the CPU fallbacks and the recompiles with their
reasons; `timeline.png`, the busiest stretch of the run (the window with the most device time)
drawn as two rows, host ops above and device executables below.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_neuronx

_WIDTH, _ROW, _TOP = 1640, 60, 40
_HOST, _DEVICE = (70, 120, 200), (220, 110, 40)


def run(script: str, args: list[str], out: Path) -> None:
    """Profile `script` run as `__main__` with `args` as its arguments; write the three files."""
    out.mkdir(parents=True, exist_ok=True)
    argv = sys.argv
    sys.argv = [script, *args]
    torch_neuronx.reset_metrics()
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            runpy.run_path(script, run_name="__main__")
            torch.neuron.synchronize()
    finally:
        sys.argv = argv
    prof.export_chrome_trace(str(out / "trace.json"))
    (out / "summary.txt").write_text(summary(prof, torch_neuronx.metrics()))
    timeline(list(prof.events()), out / "timeline.png")
    print(f"wrote {out / 'trace.json'}, {out / 'summary.txt'}, {out / 'timeline.png'}")


def summary(prof: Any, metrics: dict[str, Any]) -> str:
    """The top 20 ops by device time, then fallbacks and recompiles."""
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=20)
    lines = ["Top 20 ops by device time (self), from torch.profiler:", table, ""]
    fallbacks = metrics["fallbacks"]
    lines.append(f"CPU fallbacks: {sum(fallbacks.values())} calls" + (":" if fallbacks else ""))
    lines += [f"  {name}: {count}" for name, count in sorted(fallbacks.items(), key=lambda kv: -kv[1])]
    compiled = metrics["compile"]
    lines.append(f"eager executables built: {metrics['cache_misses']}; compiled graphs: {compiled['compiles']}")
    lines.append(f"recompiles: {compiled['recompiles']}" + (":" if compiled["recompiles"] else ""))
    lines += [f"  `{r['where']}`: {r['reason']}" for r in compiled["recompile_reasons"]]
    return "\n".join(lines) + "\n"


def _spans(events: list[Any]) -> tuple[list[tuple], list[tuple]]:
    """(start us, end us, name) of top-level host ops and of device executables."""
    host, device = [], []
    for e in events:
        span = (e.time_range.start, e.time_range.end, e.name)
        if e.device_type == DeviceType.PrivateUse1:
            device.append(span)
        elif e.device_type == DeviceType.CPU and e.cpu_parent is None and not e.is_async:
            host.append(span)
    return host, device


def busiest(device: list[tuple], width: float) -> float:
    """The start of the window of `width` us holding the most device time."""
    best, start = -1.0, device[0][0] if device else 0.0
    for s, _, _ in device:
        busy = sum(min(e, s + width) - max(b, s) for b, e, _ in device if b < s + width and e > s)
        if busy > best:
            best, start = busy, s
    return start


def timeline(events: list[Any], path: Path) -> None:
    """Draw the busiest stretch: a tenth of the run, at least 2 ms (all of it if shorter)."""
    host, device = _spans(events)
    spans = host + device
    first, last = (min(s for s, _, _ in spans), max(e for _, e, _ in spans)) if spans else (0.0, 1.0)
    width = min(last - first, max(2000.0, (last - first) / 10)) or 1.0
    start = busiest(device, width) if device else first
    width = max(min(e, start + width) for s, e, _ in spans if s < start + width and e > start) - start if spans else 1.0
    image = Image.new("RGB", (_WIDTH, _TOP + 2 * _ROW + 40), "white")
    draw = ImageDraw.Draw(image)
    draw.text(
        (10, 10), f"busiest {width / 1000:.1f} ms of the run (from {(start - first) / 1000:.1f} ms)", fill="black"
    )
    scale = (_WIDTH - 160) / width
    for row, (label, items, color) in enumerate([("host", host, _HOST), ("neuron", device, _DEVICE)]):
        top = _TOP + row * _ROW
        draw.text((10, top + _ROW // 2 - 6), label, fill="black")
        for s, e, name in items:
            if e < start or s > start + width:
                continue
            x0, x1 = 110 + max(0.0, s - start) * scale, 110 + min(width, e - start) * scale
            draw.rectangle([x0, top + 5, max(x1, x0 + 1), top + _ROW - 5], fill=color, outline="white")
            if x1 - x0 > 7 * len(name):
                draw.text((x0 + 3, top + _ROW // 2 - 6), name, fill="white")
    for tick in range(11):
        x = 110 + tick * (_WIDTH - 160) / 10
        draw.line([x, _TOP + 2 * _ROW, x, _TOP + 2 * _ROW + 6], fill="black")
        draw.text((x - 12, _TOP + 2 * _ROW + 10), f"{tick * width / 10000:.2f}", fill="black")
    draw.text((_WIDTH - 40, _TOP + 2 * _ROW + 24), "ms", fill="black")
    image.save(path)
