"""torch.profiler on neuron: with `ProfilerActivity.PrivateUse1` each executable is a device
activity linked to the op that launched it (device time per op, a neuron row in the chrome
trace), builds are marked; `torchneuron profile` writes a trace, a summary and a timeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.runtime import native

pytestmark = pytest.mark.skipif(not native.requested(), reason="the profiler plugin is the native module's")
DEVICE = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _device_events(prof: profile) -> list:
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def test_each_executable_is_a_device_activity_of_its_op(tmp_path: Path) -> None:
    a = torch.randn(64, 64, device="neuron")
    (a @ a).relu_()  # built before the profile: served by the native hit path
    with profile(activities=DEVICE) as prof:
        for _ in range(3):
            b = (a @ a).relu_()
        c = torch.tanh(b)  # built inside the profile
        c.cpu()
    names = [e.name for e in _device_events(prof)]
    assert names.count("aten.mm.default") == 3 and names.count("aten.relu_.default") == 3
    assert names.count("aten.tanh.default") == 1
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].self_device_time_total > 0
    assert averages["aten::tanh"].self_device_time_total > 0
    assert averages["aten::empty"].self_device_time_total == 0 if "aten::empty" in averages else True
    assert "neuron::compile aten.tanh.default" in averages  # the build is marked
    assert "neuron::compile aten.mm.default" not in averages
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    kernels = [e for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == len(names) and {e["pid"] for e in kernels} == {0}
    assert "NEURON" in prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)


def test_compiled_graphs_and_their_recompiles() -> None:
    fn = torch.compile(lambda x: (x @ x).sum(-1), backend="neuron", dynamic=False)
    with profile(activities=DEVICE) as prof:
        fn(torch.randn(8, 8, device="neuron"))
        fn(torch.randn(8, 8, device="neuron"))
        torch.neuron.synchronize()
    graphs = [e for e in _device_events(prof) if e.name.startswith("graph `")]
    assert len(graphs) == 2
    marks = [e.name for e in prof.events() if e.name.startswith("neuron::compile graph")]
    assert len(marks) == 1


def test_without_device_activity_nothing_is_waited_for() -> None:
    a = torch.randn(16, 16, device="neuron")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert not native.module().profiling()
        (a + a).cpu()
    assert not _device_events(prof)


def test_profile_command_writes_trace_summary_and_timeline(tmp_path: Path) -> None:
    script = tmp_path / "step.py"
    script.write_text(
        "import sys, torch\n"
        "x = torch.randn(32, 32, device='neuron')\n"
        "for _ in range(int(sys.argv[1])):\n"
        "    x = torch.tanh(x @ x)\n"
        "print('args', sys.argv[1:])\n"
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "torch_neuronx.cli", "profile", "--out", str(out), str(script), "4", "--extra"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "args ['4', '--extra']" in done.stdout
    trace = json.loads((out / "trace.json").read_text())
    assert sum(e.get("name") == "aten.mm.default" for e in trace["traceEvents"]) == 4
    summary = (out / "summary.txt").read_text()
    assert "aten::mm" in summary and "CPU fallbacks: 0 calls" in summary and "recompiles: 0" in summary
    with Image.open(out / "timeline.png") as image:
        assert image.format == "PNG" and image.size[0] > 1000
