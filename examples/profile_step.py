"""Profile a training step: where the host time and the device time go.

`torch.profiler` with `ProfilerActivity.PrivateUse1` records each executable the step runs on
`neuron` as a device event of the op (or compiled graph) that launched it: the table's "Self
NEURON" column is device time, and the chrome trace (open it in https://ui.perfetto.dev or
chrome://tracing) shows the executables on a `neuron` row under the host ops. The same step's
loss is checked against CPU. `torchneuron profile SCRIPT` does this for any script.

    python examples/profile_step.py --out /tmp/trace.json
    python examples/profile_step.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 10))


def step(net: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the chrome trace")
    parser.add_argument("--quick", action="store_true", help="fewer warm-up steps")
    args = parser.parse_args()
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    losses = {}
    for device in ("cpu", "neuron"):
        net = model().to(device)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
        inputs = (x.to(device), y.to(device))
        for _ in range(1 if args.quick else 3):  # warm up: every executable built before profiling
            step(net, optimizer, *inputs)
        if device == "neuron":
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
                losses[device] = step(net, optimizer, *inputs).cpu()
        else:
            losses[device] = step(net, optimizer, *inputs)
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))
    out = args.out or Path(tempfile.mkdtemp()) / "trace.json"
    prof.export_chrome_trace(str(out))
    executables = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    device_ms = sum(e.time_range.elapsed_us() for e in executables) / 1000
    print(f"chrome trace: {out}; the step ran {len(executables)} executables, {device_ms:.2f} ms of device time")
    difference = ((losses["neuron"] - losses["cpu"]).abs() / losses["cpu"].abs()).item()
    print(f"loss vs CPU: relative difference = {difference:.2e}")


if __name__ == "__main__":
    main()
