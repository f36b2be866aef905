"""The `torchneuron` command: info, demo, bench, report, cache."""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

from torch_neuronx.runtime import cache as persistent_cache


def info() -> None:
    import jax
    import torch

    import torch_neuronx
    from torch_neuronx import ops
    from torch_neuronx.runtime import native, platform

    print(f"torchneuron {torch_neuronx.__version__}  torch {torch.__version__}  jax {jax.__version__}")
    print(f"platform: {platform.platform_name()}  device: {platform.device()}")
    props = torch.neuron.get_device_properties(0)
    print(f"device: {props.name}, capacity {props.total_memory / 2**30:.1f} GiB")
    print(f"native lowerings: {len(ops.load())} ATen overloads")
    print(f"eager path: {native.status()}")
    print(f"persistent compilation cache: {persistent_cache.directory()}")


def report(script: str | None) -> None:
    import torch_neuronx

    if script:
        sys.argv = [script]
        runpy.run_path(script, run_name="__main__")
    else:
        from torch_neuronx import demo

        demo.main(steps=5)
    print(json.dumps(torch_neuronx.metrics(), indent=2))


def bench(sections: list[str], quick: bool) -> None:
    """Each section prints its table as soon as it has run."""
    for section in sections:
        if section == "ops":
            from torch_neuronx.bench import eager_ops

            eager_ops.main()
        elif section == "compile":
            from torch_neuronx.bench import torch_compile

            print(torch_compile.format_results(torch_compile.run(quick)))
        elif section == "hf":
            from torch_neuronx.bench import hf_serving

            print(hf_serving.format_results(hf_serving.run(8 if quick else 32)))
        elif section == "soak":
            from torch_neuronx.bench import soak

            print(soak.format_results(soak.run(quick)))
        else:
            from torch_neuronx.bench import collectives

            sizes = (1, 16) if quick else collectives.DEFAULT_SIZES_MB
            print(collectives.format_table(collectives.run(sizes_mb=sizes)))
        print(flush=True)


BENCH_SECTIONS = ["ops", "compile", "hf", "distributed", "soak"]


def cache(action: str | None, max_size: str | None, as_json: bool) -> None:
    """Show the persistent cache, or clear or prune it (no JAX import: this is file work)."""
    root = persistent_cache.directory()
    if action == "clear":
        count, size = persistent_cache.clear(root)
        print(f"removed {count} entries ({persistent_cache.format_size(size)}) from {root}")
        return
    if action == "prune":
        limit = persistent_cache.parse_size(max_size)
        count, size = persistent_cache.prune(limit, root)
        print(f"removed {count} least recently used entries ({persistent_cache.format_size(size)}) from {root}")
        return
    contents = persistent_cache.scan(root)
    limit = persistent_cache.max_size()
    kinds = contents.by_kind()
    if as_json:
        summary = {
            "directory": str(root),
            "entries": len(contents.entries),
            "bytes": contents.size,
            "max_bytes": limit,
            "kinds": {kind: {"entries": count, "bytes": size} for kind, (count, size) in kinds.items()},
            "unrecognized": [str(p) for p in contents.unrecognized],
        }
        print(json.dumps(summary, indent=2))
        return
    fmt = persistent_cache.format_size
    print(f"directory: {root}")
    print(f"entries:   {len(contents.entries)}, {fmt(contents.size)}")
    print(f"limit:     {fmt(limit) if limit is not None else 'none'} ({persistent_cache.MAX_SIZE_VARIABLE})")
    for kind, (count, size) in kinds.items():
        print(f"  {count:>8} {fmt(size):>10}  {persistent_cache.KINDS[kind]}")
    if contents.unrecognized:
        print(f"  {len(contents.unrecognized):>8} files written by neither (kept by clear and prune)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="torchneuron", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="platform, device and registry facts")
    demo = sub.add_parser("demo", help="train a small transformer on neuron next to CPU")
    demo.add_argument("--steps", type=int, default=20)
    ben = sub.add_parser("bench", help="neuron next to PyTorch CPU: eager ops, compile, HF serving, distributed; soak")
    ben.add_argument("sections", nargs="*", help=f"any of {', '.join(BENCH_SECTIONS)} (default: all, in this order)")
    ben.add_argument("--quick", action="store_true", help="fewer steps and sizes")
    rep = sub.add_parser("report", help="run a script (default: a short demo) and print device metrics")
    rep.add_argument("script", nargs="?")
    prof = sub.add_parser("profile", help="run a script under torch.profiler: chrome trace, top-20 table, timeline PNG")
    prof.add_argument("--out", default="torchneuron-profile", help="directory to write into")
    prof.add_argument("script")
    prof.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    cac = sub.add_parser("cache", help="the persistent cache: entries and sizes by kind; clear; prune")
    cac.add_argument("--json", action="store_true", help="print the summary as JSON")
    actions = cac.add_subparsers(dest="action")
    actions.add_parser("clear", help="remove every entry")
    pru = actions.add_parser("prune", help="remove the least recently used entries until the cache fits")
    pru.add_argument("--max-size", required=True, help="such as 2G, 500M (binary units)")
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
    elif args.command == "demo":
        from torch_neuronx import demo as demo_module

        demo_module.main(args.steps)
    elif args.command == "bench":
        unknown = sorted(set(args.sections) - set(BENCH_SECTIONS))
        if unknown:
            parser.error(f"unknown bench section {', '.join(unknown)}; choose from {', '.join(BENCH_SECTIONS)}")
        bench(args.sections or BENCH_SECTIONS, args.quick)
    elif args.command == "profile":
        from torch_neuronx import profiling

        profiling.run(args.script, args.args, Path(args.out))
    elif args.command == "cache":
        try:
            cache(args.action, getattr(args, "max_size", None), args.json)
        except ValueError as error:  # a size that does not parse, from --max-size or the environment
            parser.error(str(error))
    else:
        report(args.script)


if __name__ == "__main__":
    main()
