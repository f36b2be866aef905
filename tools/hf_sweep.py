"""The causal-LM architecture sweep: every entry of Transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`,
built tiny (`tiny_models.py`), run on CPU and on neuron, compared, and written up as `docs/model_coverage.md`.
From the repository root (`./dev hf-sweep [args]` runs the same in `.venv`):

    python -m tools.hf_sweep                      # all architectures -> docs/model_coverage.md
    python -m tools.hf_sweep --only llama,mixtral --json out.json --no-report

Per architecture: the CPU model's logits and greedy generation (dynamic cache, and static cache
when the `neuron` compile backend is registered) are the reference; the same weights moved with
`model.to("neuron")` must give the same logits (within float32 tolerance) and the same tokens.
Architectures that do not build or generate on CPU are listed apart and not counted.

`--train` sweeps training parity instead (`tools/hf_training.py`): three AdamW steps, eager and
compiled, against CPU, written up as `docs/model_training.md`:

    python -m tools.hf_sweep --train --json docs/model_training.json [--resume] [--modes eager]

`--family` sweeps Transformers' other families instead (`tools/hf_families.py`: encoders, seq2seq,
vision, speech, vlm) or Diffusers' model classes (`tools/hf_diffusers.py`: diffusers), each into
`docs/model_coverage_<family>.json`; the report always has every section, the causal LM's from
`docs/model_coverage.json`:

    python -m tools.hf_sweep --family encoders|seq2seq|vision|speech|vlm|diffusers|all [--fast] [--only a,b]

Models run in a worker subprocess, one at a time with a per-model timeout; a model that hangs
or crashes the worker is recorded as such and a fresh worker takes the next one. The worker is
also renewed every `--renew` models so no model's global side effects reach many others.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import queue
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .tiny_models import FAST_SLICE, TRAIN_SLICE, causal_lm_class, tiny_causal_lm, tiny_inputs

PROMPT = 8
NEW_TOKENS = 4
RTOL = ATOL = 1e-4
TIE = 1e-4  # top-2 logit gap under which greedy argmax is a coin flip between devices
ROOT = Path(__file__).resolve().parents[1]  # the repository root: `tools` is importable from it
REPORT = ROOT / "docs" / "model_coverage.md"
RECORDS = ROOT / "docs" / "model_coverage.json"  # the causal-LM records the report's first section is written from


def architectures() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def compile_backend_available() -> bool:
    import torch

    return "neuron" in torch._dynamo.list_backends(exclude_tags=())


def _cause(e: BaseException) -> str:
    """One line: exception type, message, and the innermost frame outside torch/transformers plumbing."""
    message = " ".join(str(e).split())[:300]
    frames = traceback.extract_tb(e.__traceback__)
    where = next((f for f in reversed(frames) if "/torch/nn/modules/module.py" not in f.filename), None)
    location = f" [{Path(where.filename).name}:{where.lineno}]" if where else ""
    return f"{type(e).__name__}: {message}{location}"


def _generate(model: Any, ids: Any, cache: str | None) -> tuple[Any, list[Any]]:
    import torch

    config = model.config.get_text_config()
    pad = getattr(config, "pad_token_id", None)
    if pad is None:
        eos = getattr(config, "eos_token_id", None)
        pad = (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
    kwargs: dict[str, Any] = {"cache_implementation": cache} if cache else {}
    if model.generation_config.decoder_start_token_id is None:
        kwargs["decoder_start_token_id"] = pad  # MusicGen's delay pattern pads with it
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=pad,
            output_logits=True,
            return_dict_in_generate=True,
            **kwargs,
        )
    return out.sequences, list(out.logits)


def _same_tokens(cpu: tuple[Any, list[Any]], dev: tuple[Any, list[Any]]) -> tuple[bool, str]:
    """Greedy tokens equal, or the first difference is a tie in the CPU logits (top-2 gap < TIE)."""
    import torch

    cpu_ids, cpu_logits = cpu
    dev_ids = dev[0].cpu()
    if cpu_ids.shape == dev_ids.shape and torch.equal(cpu_ids, dev_ids):
        return True, ""
    prompt = cpu_ids.shape[-1] - len(cpu_logits)
    if cpu_ids.shape == dev_ids.shape:
        step = int((cpu_ids != dev_ids).any(0).nonzero()[0]) - prompt
        if 0 <= step < len(cpu_logits):
            top2 = cpu_logits[step].float().topk(2, dim=-1).values
            if float((top2[..., 0] - top2[..., 1]).min()) < TIE:
                return True, f"tie at step {step}"
    return False, f"cpu {cpu_ids.tolist()} != neuron {dev_ids.tolist()}"


def run_one(model_type: str, static: bool | None = None) -> dict[str, Any]:
    """Run one architecture on CPU then neuron; a record of what happened (never raises)."""
    import torch

    import torch_neuronx

    if static is None:
        static = compile_backend_available()
    record: dict[str, Any] = {"model_type": model_type, "static": "needs compile backend"}
    start = time.perf_counter()
    try:
        record["architecture"] = causal_lm_class(model_type).__name__
        model = tiny_causal_lm(model_type)
        record["params"] = sum(p.numel() for p in model.parameters())
        ids = tiny_inputs(model, PROMPT)
        with torch.no_grad():
            ref_logits = model(input_ids=ids).logits.float()
        ref_gen = _generate(model, ids, None)
    except Exception as e:
        record.update(status="cpu-error", cause=_cause(e), seconds=round(time.perf_counter() - start, 1))
        return record
    ref_static = None
    if static:
        with contextlib.suppress(Exception):
            ref_static = _generate(model, ids, "static")
    torch_neuronx.reset_metrics()
    neuron_start = time.perf_counter()
    try:
        model.to("neuron")
        dev_ids = ids.to("neuron")
        with torch.no_grad():
            logits = model(input_ids=dev_ids).logits.float().cpu()
        record["logits_max_diff"] = float((logits - ref_logits).abs().max())
        logits_ok = torch.allclose(logits, ref_logits, rtol=RTOL, atol=ATOL)
        tokens_ok, note = _same_tokens(ref_gen, _generate(model, dev_ids, None))
        record["greedy"] = "same" if tokens_ok and not note else (note if tokens_ok else "differ")
        problems = []
        if not logits_ok:
            problems.append(f"logits differ by {record['logits_max_diff']:.2e}")
        if not tokens_ok:
            problems.append(f"greedy tokens differ: {note}")
        if static:
            record["static"] = _static(model, dev_ids, ref_static)
            if not record["static"].startswith(("same", "n/a")):
                problems.append(f"static cache: {record['static']}")
        record["status"] = "fail" if problems else "pass"
        if problems:
            record["cause"] = "; ".join(problems)
    except Exception as e:
        record.update(status="error", cause=_cause(e))
    return neuron_counters(record, start, neuron_start)


def neuron_counters(record: dict[str, Any], start: float, neuron_start: float) -> dict[str, Any]:
    """`record` with the neuron run's CPU fallbacks and executables built (`torch_neuronx.metrics()`,
    reset before the run) and the seconds since `neuron_start` and since `start`."""
    import torch_neuronx

    metrics = torch_neuronx.metrics()
    record["fallbacks"] = metrics["fallbacks"]
    record["fallback_calls"] = sum(metrics["fallbacks"].values())
    record["compiles"] = metrics["cache_misses"]
    record["neuron_seconds"] = round(time.perf_counter() - neuron_start, 1)
    record["seconds"] = round(time.perf_counter() - start, 1)
    return record


def _static(model: Any, dev_ids: Any, ref: tuple[Any, list[Any]] | None) -> str:
    if ref is None:
        return "n/a (no static cache on CPU)"
    try:
        ok, note = _same_tokens(ref, _generate(model, dev_ids, "static"))
    except Exception as e:
        return f"error: {_cause(e)}"
    return "same" if ok else f"differ: {note}"


@dataclass(frozen=True)
class FamilySweep:
    """What the `--family` driver and the report need of one family's sweep module."""

    model_types: Callable[[], list[str]]
    fast: list[str]
    records_path: Path
    run_one: Callable[[str], dict[str, Any]]
    summary: Callable[[list[dict[str, Any]]], dict[str, Any]]
    section: Callable[[list[dict[str, Any]], bool], str]


def families() -> tuple[str, ...]:
    """Every family `--family` sweeps: Transformers' other families, then Diffusers."""
    from . import hf_diffusers, hf_families  # they import this module: not at the top

    return (*hf_families.FAMILIES, hf_diffusers.FAMILY)


def family_sweep(family: str) -> FamilySweep:
    from . import hf_diffusers, hf_families  # they import this module: not at the top

    if family == hf_diffusers.FAMILY:
        d = hf_diffusers
        return FamilySweep(d.model_types, d.FAST, d.records_path(), d.run_one, d.summary, d.section)
    f = hf_families
    return FamilySweep(
        partial(f.model_types, family),
        f.FAST[family],
        f.records_path(family),
        partial(f.run_one, family),
        f.summary,
        partial(f.section, family),
    )


def worker(train: bool = False, family: bool = False) -> None:
    """Read requests on stdin (an architecture name; with `train`, name and mode; with `family`,
    family and name), answer one JSON line each on the original stdout."""
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything models or libraries print goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    static = compile_backend_available()
    if train:
        from .hf_training import run_train  # imports this module: not at the top
    for line in sys.stdin:
        request = line.split()
        if request:
            if family:
                record = family_sweep(request[0]).run_one(request[1])
            else:
                record = run_train(*request) if train else run_one(request[0], static)
            results.write(json.dumps(record, default=str) + "\n")


class Worker:
    """A worker subprocess with a line reader thread, so the parent can wait with a timeout."""

    def __init__(self, log: Any, train: bool = False, family: bool = False) -> None:
        flags = (["--train"] if train else []) + (["--family", "worker"] if family else [])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.hf_sweep", "--worker", *flags],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.done = 0
        self.family = family

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def ask(self, request: str, timeout: float) -> dict[str, Any]:
        """Run one request ("model_type", "model_type mode" or "family model_type"); its record, or one
        saying it timed out or crashed."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        self.done += 1
        if self.family:
            family, model_type = request.split()
            about = {"family": family, "model_type": model_type}
        else:
            model_type, *mode = request.split()
            about = {"model_type": model_type} | ({"mode": mode[0]} if mode else {})
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.close()
            return about | {"status": "timeout", "cause": f"no result within {timeout:.0f} s"}
        if line is None:
            code = self.proc.wait()
            return about | {"status": "crash", "cause": f"worker died (exit code {code})"}
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()


def sweep(
    requests: list[str] | None = None,
    timeout: float = 600.0,
    renew: int = 20,
    log_path: str | os.PathLike | None = None,
    progress: bool = True,
    train: bool = False,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    family: bool = False,
) -> list[dict[str, Any]]:
    """Run each request (an architecture; with `train`, "architecture mode") in a worker subprocess;
    one record per request, each also handed to `on_record` as it arrives."""
    requests = requests or architectures()
    results: list[dict[str, Any]] = []
    log = open(log_path or os.devnull, "a")  # lives as long as the workers
    current: Worker | None = None
    try:
        for i, request in enumerate(requests):
            if current is None or not current.alive() or current.done >= renew:
                if current is not None:
                    current.close()
                current = Worker(log, train, family)
            record = current.ask(request, timeout)
            results.append(record)
            if on_record is not None:
                on_record(record)
            if progress:
                print(f"[{i + 1}/{len(requests)}] {request}: {record['status']} {_brief(record)}", flush=True)
    finally:
        if current is not None:
            current.close()
        log.close()
    return results


def _brief(record: dict[str, Any]) -> str:
    parts = []
    if "seconds" in record:
        parts.append(f"{record['seconds']}s")
    if record.get("fallback_calls"):
        parts.append(f"{record['fallback_calls']} fallback calls")
    if record.get("cause"):
        parts.append(record["cause"][:160])
    return " | ".join(parts)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    ran_on_cpu = [r for r in results if r["status"] != "cpu-error"]
    passed = [r for r in ran_on_cpu if r["status"] == "pass"]
    return {
        "architectures": len(results),
        "run_on_cpu": len(ran_on_cpu),
        "pass_on_neuron": len(passed),
        "pass_rate": len(passed) / len(ran_on_cpu) if ran_on_cpu else 0.0,
        "fully_native": sum(1 for r in passed if not r.get("fallback_calls")),
    }


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report(results: list[dict[str, Any]] | None = None, path: str | os.PathLike = REPORT) -> str:
    """Write the coverage page (Markdown): totals, the causal-LM section from `results` (default: the
    records in `docs/model_coverage.json`), then every other family's section from its records
    (`tools/hf_families.py`, `tools/hf_diffusers.py`); return its text."""
    import torch
    import transformers

    import torch_neuronx
    from torch_neuronx.runtime import platform

    from . import hf_families

    if results is None:
        results = json.loads(RECORDS.read_text()) if RECORDS.exists() else []
    sweeps = {f: family_sweep(f) for f in families()}
    loaded = {f: json.loads(s.records_path.read_text()) if s.records_path.exists() else [] for f, s in sweeps.items()}
    out = io.StringIO()
    w = out.write
    w("# Model coverage: Transformers architectures and Diffusers models on `neuron`\n\n")
    w("Generated by `python -m tools.hf_sweep` (causal LM) and `python -m tools.hf_sweep --family all` (the ")
    w("other families); do not edit by hand. Either command rewrites the whole page from the records in ")
    w("`docs/model_coverage*.json`. ")
    w(f"{datetime.date.today()}, torch {torch.__version__}, transformers {transformers.__version__}, ")
    w(f"diffusers {_version('diffusers')}, ")
    w(f"torchneuron {torch_neuronx.__version__}, PJRT platform `{platform.platform_name()}`.\n\n")
    w("| family | architectures | run on CPU | pass on neuron | pass rate | training step (pass / run) |\n")
    w("|---|---|---|---|---|---|\n")
    s = summary(results)
    w(f"| causal LM | {s['architectures']} | {s['run_on_cpu']} | {s['pass_on_neuron']} | ")
    w(f"{100 * s['pass_rate']:.1f}% | see `docs/model_training.md` |\n")
    for family, records in loaded.items():
        if not records:
            w(f"| {family} | not run | | | | |\n")
            continue
        f = sweeps[family].summary(records)
        total = len(sweeps[family].model_types())
        name = f"{family} (partial: {len(records)} of {total} run)" if len(records) < total else family
        train = f"{f['train_pass']} / {f['trained']}" if "trained" in f else "n/a (inference only)"
        w(f"| {name} | {f['architectures']} | {f['run_on_cpu']} | {f['pass_on_neuron']} | ")
        w(f"{100 * f['pass_rate']:.1f}% | {train} |\n")
    w("\n")
    w(_causal_section(results))
    w("\n" + hf_families.method())
    for family, records in loaded.items():
        if records:
            w("\n" + sweeps[family].section(records, len(records) < len(sweeps[family].model_types())))
    text = out.getvalue()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    return text


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _causal_section(results: list[dict[str, Any]]) -> str:
    s = summary(results)
    static = (
        "static cache checked"
        if any(r.get("static", "").startswith("same") for r in results)
        else ("static cache not checked: the `neuron` compile backend is not registered in this build")
    )
    out = io.StringIO()
    w = out.write
    w("## Causal LM\n\n")
    w("Records: `docs/model_coverage.json` (`python -m tools.hf_sweep --json docs/model_coverage.json`). ")
    w("Every entry of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` is built from its config class with the generic ")
    w("shrinking recipe of `tools/tiny_models.py` (64 hidden, 2 layers or one layer of each kind, ")
    w("256-token vocabulary, random weights, float32). The CPU run is the reference: the same weights moved ")
    w(f'with `model.to("neuron")` must give the same logits (rtol = atol = {RTOL:g}) on a {PROMPT}-token ')
    w(f"prompt and the same {NEW_TOKENS} greedy tokens with the dynamic cache ({static}).\n\n")
    w(f"**{s['pass_on_neuron']} of {s['run_on_cpu']} architectures that run on CPU pass on neuron ")
    w(f"({100 * s['pass_rate']:.1f}%)**; {s['architectures'] - s['run_on_cpu']} of {s['architectures']} ")
    w(f"do not build or generate on CPU with the tiny recipe (listed at the end). {s['fully_native']} of the ")
    w("passing architectures ran without any CPU fallback.\n\n")
    w("`fallback ops` counts the calls that ran on CPU because the op has no device lowering yet ")
    w('(`torch_neuronx.metrics()["fallbacks"]`); results stay correct, only slower.\n\n')
    columns = ["model type", "class", "result", "logits max diff", "greedy", "static cache", "fallback calls"]
    columns += ["top fallback ops", "s", "cause"]
    w("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|\n")
    for r in results:
        if r["status"] == "cpu-error":
            continue
        diff = f"{r['logits_max_diff']:.1e}" if "logits_max_diff" in r else ""
        top = ", ".join(f"{op.removeprefix('aten.')} ({n})" for op, n in Counter(r.get("fallbacks", {})).most_common(3))
        cells = [r["model_type"], r.get("architecture", ""), r["status"], diff, r.get("greedy", "")]
        cells += [r.get("static", ""), r.get("fallback_calls", ""), top, r.get("seconds", ""), r.get("cause", "")]
        w("| " + " | ".join(_cell(c) for c in cells) + " |\n")
    ops: Counter = Counter()
    for r in results:
        ops.update(dict.fromkeys(r.get("fallbacks", {}), 1))
    if ops:
        w("\n### Causal LM: ops that fell back to CPU, by number of architectures using them\n\n")
        w(", ".join(f"`{op}` ({n})" for op, n in ops.most_common()) + "\n")
    failed_cpu = [r for r in results if r["status"] == "cpu-error"]
    if failed_cpu:
        w("\n### Causal LM: not counted, the tiny model does not run on CPU\n\n| model type | cause |\n|---|---|\n")
        for r in failed_cpu:
            w(f"| {r['model_type']} | {_cell(r.get('cause', ''))} |\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.hf_sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated model types (default: all causal-LM architectures)")
    parser.add_argument(
        "--fast",
        action="store_true",
        help=f"only the CI slice: {', '.join(FAST_SLICE)}; with --train {', '.join(TRAIN_SLICE)}",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per architecture (default 600)")
    parser.add_argument("--renew", type=int, default=20, help="fresh worker process after this many models")
    parser.add_argument(
        "--out",
        help="the Markdown report to write (default docs/model_coverage.md, with --train docs/model_training.md)",
    )
    parser.add_argument("--no-report", action="store_true", help="do not write the Markdown report")
    parser.add_argument("--json", help="also write the raw records here")
    parser.add_argument(
        "--resume", action="store_true", help="keep the records already in --json and run only the others (or --only)"
    )
    parser.add_argument("--log", help="worker stderr goes here (default: discarded)")
    parser.add_argument("--train", action="store_true", help="training parity instead (tools/hf_training.py)")
    parser.add_argument("--modes", default="eager,compiled", help="with --train: eager, compiled or both (default)")
    parser.add_argument(
        "--family",
        help="another family instead (tools/hf_families.py: encoders, seq2seq, vision, speech, vlm; "
        "tools/hf_diffusers.py: diffusers) or all; "
        "records go to docs/model_coverage_<family>.json (merged with those there: --only reruns some)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.train, args.family is not None)
        return 0
    if args.family:
        return _family_main(args)
    fast = TRAIN_SLICE if args.train else FAST_SLICE
    model_types = args.only.split(",") if args.only else fast if args.fast else architectures()
    if args.train:
        return _train_main(args, model_types)
    previous: dict[str, dict[str, Any]] = {}
    if args.resume and args.json and Path(args.json).exists():
        previous = {r["model_type"]: r for r in json.loads(Path(args.json).read_text())}
        if not args.only:
            model_types = [m for m in model_types if m not in previous]
    fresh = {r["model_type"]: r for r in sweep(model_types, timeout=args.timeout, renew=args.renew, log_path=args.log)}
    order = architectures() + [m for m in model_types if m not in architectures()]
    results = [fresh.get(m) or previous[m] for m in order if m in fresh or m in previous]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if not args.no_report:
        report(results, args.out or REPORT)
    s = summary(results)
    print(
        f"{s['pass_on_neuron']}/{s['run_on_cpu']} architectures that run on CPU pass on neuron "
        f"({100 * s['pass_rate']:.1f}%); {s['architectures'] - s['run_on_cpu']} do not run on CPU"
    )
    return 0


def _family_main(args: argparse.Namespace) -> int:
    """`--family`: each family's architectures (or --only / --fast), records merged into its JSON after each
    one (so an interrupted sweep keeps what ran; `--resume` runs only those missing), then the report."""
    known = families()
    chosen_families = known if args.family == "all" else tuple(args.family.split(","))
    unknown = set(chosen_families) - set(known)
    if unknown:
        raise SystemExit(f"unknown family {sorted(unknown)}; choose from {', '.join(known)} or all")
    sweeps = {family: family_sweep(family) for family in chosen_families}
    paths, merged, order = {}, {}, {}
    requests = []
    for family, swept in sweeps.items():
        if args.json:  # one family: that file; several: <stem>_<family>.json beside it
            given = Path(args.json)
            paths[family] = given if len(sweeps) == 1 else given.with_name(f"{given.stem}_{family}{given.suffix}")
        else:
            paths[family] = swept.records_path
        order[family] = swept.model_types()
        chosen = args.only.split(",") if args.only else swept.fast if args.fast else order[family]
        chosen = [m for m in chosen if m in order[family]]
        path = paths[family]
        merged[family] = {r["model_type"]: r for r in json.loads(path.read_text())} if path.exists() else {}
        if args.resume:
            chosen = [m for m in chosen if m not in merged[family]]
        requests += [f"{family} {m}" for m in chosen]

    def records(family: str) -> list[dict[str, Any]]:
        return [merged[family][m] for m in order[family] if m in merged[family]]

    def save(record: dict[str, Any]) -> None:
        family = record["family"]
        merged[family][record["model_type"]] = record
        paths[family].write_text(json.dumps(records(family), indent=1, default=str))

    # one worker for all families (renewed every --renew models), so a CI slice starts Python once
    sweep(requests, timeout=args.timeout, renew=args.renew, log_path=args.log, on_record=save, family=True)
    for family, swept in sweeps.items():
        s = swept.summary(records(family))
        train = f", training step {s['train_pass']}/{s['trained']}" if "trained" in s else ""
        print(
            f"{family}: {s['pass_on_neuron']}/{s['run_on_cpu']} architectures that run on CPU pass on neuron "
            f"({100 * s['pass_rate']:.1f}%){train}; {s['architectures'] - s['run_on_cpu']} do not run on CPU"
        )
    if not args.no_report:
        report(None, args.out or REPORT)
    return 0


def _train_main(args: argparse.Namespace, model_types: list[str]) -> int:
    """`--train`: every requested mode of each architecture, all eager runs first; the merged records
    are rewritten after each run, so an interrupted sweep resumes where it stopped (`--resume`)."""
    from . import hf_training  # imports this module: not at the top

    modes = args.modes.split(",")
    unknown = set(modes) - set(hf_training.MODES)
    if unknown:
        raise SystemExit(f"unknown mode(s) {sorted(unknown)}; choose from {', '.join(hf_training.MODES)}")
    merged: dict[str, dict[str, Any]] = {}
    if args.resume and args.json and Path(args.json).exists():
        merged = {r["model_type"]: r for r in json.loads(Path(args.json).read_text())}
    order = architectures() + [m for m in model_types if m not in architectures()]

    def ordered() -> list[dict[str, Any]]:
        return [merged[m] for m in order if m in merged]

    def save(record: dict[str, Any]) -> None:
        hf_training.merge([record], merged)
        if args.json:
            Path(args.json).write_text(json.dumps(ordered(), indent=1, default=str))

    requests = [f"{m} {mode}" for mode in modes for m in model_types if args.only or mode not in merged.get(m, {})]
    sweep(requests, timeout=args.timeout, renew=args.renew, log_path=args.log, train=True, on_record=save)
    results = ordered()
    if not args.no_report:
        hf_training.report(results, args.out or hf_training.REPORT)
    s = hf_training.summary(results)
    print(
        f"training parity, of {s['run_on_cpu']} architectures that train on CPU: "
        + ", ".join(f"{m} {s['pass'][m]} pass ({s['tried'][m]} run)" for m in hf_training.MODES)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
