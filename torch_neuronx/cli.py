"""The `torchneuron` command: info, demo, bench, report."""

from __future__ import annotations

import argparse
import runpy
import sys


def info() -> None:
    import jax
    import torch

    import torch_neuronx
    from torch_neuronx import ops
    from torch_neuronx.runtime import platform

    print(f"torchneuron {torch_neuronx.__version__}  torch {torch.__version__}  jax {jax.__version__}")
    print(f"platform: {platform.platform_name()}  device: {platform.device()}")
    props = torch.neuron.get_device_properties(0)
    print(f"device: {props.name}, capacity {props.total_memory / 2**30:.1f} GiB")
    print(f"native lowerings: {len(ops.load())} ATen overloads")
    print(f"persistent compilation cache: {platform.cache_dir()}")


def report(script: str | None) -> None:
    import json

    import torch_neuronx

    if script:
        sys.argv = [script]
        runpy.run_path(script, run_name="__main__")
    else:
        from torch_neuronx import demo

        demo.main(steps=5)
    print(json.dumps(torch_neuronx.metrics(), indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="torchneuron", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="platform, device and registry facts")
    demo = sub.add_parser("demo", help="train a small transformer on neuron next to CPU")
    demo.add_argument("--steps", type=int, default=20)
    sub.add_parser("bench", help="eager per-op time on neuron vs CPU")
    rep = sub.add_parser("report", help="run a script (default: a short demo) and print device metrics")
    rep.add_argument("script", nargs="?")
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
    elif args.command == "demo":
        from torch_neuronx import demo as demo_module

        demo_module.main(args.steps)
    elif args.command == "bench":
        from torch_neuronx import bench

        bench.main()
    else:
        report(args.script)


if __name__ == "__main__":
    main()
