"""Training parity of every causal-LM architecture: `python -m tools.hf_sweep --train`.

Per architecture the tiny model (`tiny_models.py`, training mode, every random setting zeroed)
takes three AdamW steps on one fixed batch (two sequences of `LENGTH` tokens, labels = input
ids) on CPU, the reference, and from the same initial weights on neuron: once eagerly and once
under `torch.compile(backend="neuron")` (the optimizer stays eager). The three losses and every
parameter after the last step must equal CPU's within float32 tolerance. The two neuron runs are
separate requests to the sweep's worker (each recomputes the CPU reference), so a compile that
hangs or crashes costs only the compiled result. Records and the report follow `hf_sweep.py`'s:
`docs/model_training.json` and `docs/model_training.md`.
"""

from __future__ import annotations

import copy
import datetime
import inspect
import io
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .hf_sweep import ROOT, _cause, _cell
from .tiny_models import causal_lm_class, tiny_causal_lm, tiny_inputs

MODES = ("eager", "compiled")
STEPS = 3
LENGTH = 8
LR = 1e-3  # AdamW's default; its other settings stay default too (weight decay 0.01, eps 1e-8)
LOSS_RTOL = LOSS_ATOL = 1e-4  # as the inference sweep's logits
# The first step's gradients, every parameter's: within this fraction of the largest gradient in
# the model. They carry what Adam hides: its update lr * m / (sqrt(v) + eps) is blind to a gradient
# wrong by a constant factor.
GRAD_TOL = 1e-4
# Parameters after the last step, absolute. Each step moves a weight by up to about LR, and Adam
# scales every gradient to that size, so rounding in a small gradient becomes a visible update: on
# CPU alone float32 moves the trained weights up to 8e-5 from a float64 run (dbrx's router), and
# two float32 runs may differ by twice that. 2e-4 is a fifth of one step; a wrong update is a step.
PARAM_TOL = 2e-4
# A weight whose first gradient is nonzero but within this fraction of the largest one is left out
# of the parameter check (counted as `noise weights`): such gradients are sums that cancel to float32
# rounding (worst elementwise difference seen between devices: 1e-6 of the largest), so their sign
# is a coin flip, and Adam's first update lr * g / (|g| + eps) makes that flip up to 2 * lr (afmoe).
NOISE = 1e-5
REPORT = ROOT / "docs" / "model_training.md"
# What investigation found behind failures the records only show as an exception, for the report.
_QWEN4_EXP = (
    "Recorded before c4449ce: Dynamo traced a JAX dataclass `__init__` (from `<string>`) inside an upload "
    "that ran eagerly in a frame Dynamo gave up on, and failed. Kernels now run with Dynamo's frame hook "
    "off; the compiled run then gets further and, in some runs, hangs: `offs.tolist()` in Transformers' "
    "grouped-mm fallback (an eager node between graphs) waits for a buffer XLA never computes, with "
    "every XLA thread idle (seen with and without TORCH_NEURONX_HOST_CORES=0; one run with "
    "TORCH_NEURONX_ASYNC_DISPATCH=0 and several with other cache directories passed). Not found yet."
)
DIAGNOSES = {("qwen4_exp", "compiled"): _QWEN4_EXP, ("qwen4_exp_text", "compiled"): _QWEN4_EXP}
RECORDS = ROOT / "docs" / "model_training.json"


def training_batch(model: Any) -> Any:
    """Two sequences of `LENGTH` random token ids (one row per codebook each for MusicGen-style decoders)."""
    import torch

    return torch.cat([tiny_inputs(model, LENGTH, seed=seed) for seed in (0, 1)])


def _inputs(model: Any, ids: Any) -> dict[str, Any]:
    import torch

    inputs = {"input_ids": ids, "labels": ids}
    if "attention_mask" in inspect.signature(model.forward).parameters:
        inputs["attention_mask"] = torch.ones_like(ids)
    return inputs


def _loss(forward: Any, inputs: dict[str, Any]) -> Any:
    """The model's own loss for `labels`, or without labels the next-token cross-entropy of its logits."""
    from torch.nn import functional

    if "labels" in inputs:
        return forward(**inputs).loss
    logits, ids = forward(**inputs).logits, inputs["input_ids"]
    return functional.cross_entropy(logits[..., :-1, :].flatten(0, -2), ids[..., 1:].flatten())


def _own_loss_reason(model: Any, inputs: dict[str, Any]) -> str | None:
    """Why the model's loss for `labels` = input ids cannot be the one trained (None: it can): GIT
    drops as many leading logits as an image has patches, MusicGen wants labels per codebook."""
    import torch

    try:
        with torch.no_grad():
            loss = model(**inputs).loss
    except Exception as e:
        return _cause(e)
    return "it returns no loss" if loss is None else None


def _train(model: Any, forward: Any, inputs: dict[str, Any]) -> tuple[list[float], list[Any]]:
    """`STEPS` AdamW steps on `inputs`: the losses, and the first step's gradients on CPU (None where
    a parameter got none)."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, grads = [], []
    for step in range(STEPS):
        loss = _loss(forward, inputs)
        loss.backward()
        if step == 0:
            grads = [None if p.grad is None else p.grad.detach().to("cpu", copy=True) for p in model.parameters()]
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return [float(loss) for loss in losses], grads


def _check_deterministic(model: Any, inputs: dict[str, Any]) -> None:
    """Two CPU training-mode forwards under different seeds give the same loss, or the model draws
    random numbers the tiny recipe did not switch off (CPU and neuron streams differ)."""
    import torch

    losses = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        with torch.no_grad():
            losses.append(_loss(model, inputs))
    if not torch.equal(*losses):
        raise RuntimeError(f"training forward is random on CPU: loss {losses[0].item()} vs {losses[1].item()}")


def _worst(names: list[str], cpu: list[Any], dev: list[Any], skip: list[Any] | None = None) -> tuple[float, str]:
    """The largest elementwise difference over tensors (None: no gradient, must be None on both),
    leaving out the elements `skip` marks, and its tensor's name; NaN, infinity or a gradient on one
    side only count as infinitely far."""
    worst, name = 0.0, ""
    for i, (n, c, d) in enumerate(zip(names, cpu, dev)):
        if c is None and d is None:
            continue
        diff = 0.0
        if c is not None and d is not None and c.numel():
            delta = (d - c).abs().nan_to_num(float("inf"))
            if skip is not None and skip[i] is not None:
                delta = delta[~skip[i]]
            diff = float(delta.max()) if delta.numel() else 0.0
        if c is None or d is None:
            diff = float("inf")
        if diff > worst:
            worst, name = diff, n
    return worst, name


def judge(record: dict[str, Any]) -> list[str]:
    """What differs from CPU beyond tolerance, from the record's figures (empty: it passes)."""
    problems = []
    cpu, dev = record["cpu_losses"], record["losses"]
    if not all(abs(d - c) <= LOSS_ATOL + LOSS_RTOL * abs(c) for c, d in zip(cpu, dev)):
        problems.append(f"losses differ by {record['loss_max_diff']:.2e}: cpu {cpu}, neuron {dev}")
    if not record["grad_max_diff"] <= GRAD_TOL * record["grad_scale"]:
        problems.append(
            f"first-step gradient of {record['worst_grad']} differs by {record['grad_max_diff']:.2e} "
            f"(largest gradient {record['grad_scale']:.2e})"
        )
    if not record["param_max_diff"] <= PARAM_TOL:
        problems.append(f"parameter {record['worst_param']} differs by {record['param_max_diff']:.2e}")
    return problems


def run_train(model_type: str, mode: str) -> dict[str, Any]:
    """One architecture's CPU reference and its `mode` run on neuron; a record (never raises)."""
    import torch

    import torch_neuronx

    record: dict[str, Any] = {"model_type": model_type, "mode": mode}
    start = time.perf_counter()
    try:
        record["architecture"] = causal_lm_class(model_type).__name__
        model = tiny_causal_lm(model_type, train=True)
        record["params"] = sum(p.numel() for p in model.parameters())
        dev = copy.deepcopy(model)  # the initial weights, before CPU's steps change them
        inputs = _inputs(model, training_batch(model))
        reason = _own_loss_reason(model, inputs)
        if reason:
            record["own_loss"] = f"the model's loss for labels = input ids fails: {reason}"
            del inputs["labels"]
        _check_deterministic(model, inputs)
        torch.manual_seed(0)
        names = [n for n, _ in model.named_parameters()]
        record["cpu_losses"], cpu_grads = _train(model, model, inputs)
        record["grad_scale"] = max(
            (float(g.abs().max()) for g in cpu_grads if g is not None and g.numel()), default=0.0
        )
    except Exception as e:
        record.update(status="cpu-error", cause=_cause(e), seconds=round(time.perf_counter() - start, 1))
        return record
    torch_neuronx.reset_metrics()
    neuron_start = time.perf_counter()
    try:
        dev.to("neuron")
        forward = dev
        if mode == "compiled":
            torch._dynamo.reset()  # no guards or recompile counts carried over from the previous model
            torch._dynamo.utils.counters.clear()
            forward = torch.compile(dev, backend="neuron")
        torch.manual_seed(0)
        losses, grads = _train(dev, forward, {k: v.to("neuron") for k, v in inputs.items()})
        record["losses"] = losses
        record["loss_max_diff"] = max(abs(d - c) for c, d in zip(record["cpu_losses"], losses))
        # torch.compile itself (aot_eager, inductor alike) gives zeros where eager autograd gives no
        # gradient, for parameters the graph takes but its output does not depend on (DeepSeek-V4's
        # compressor on 8 tokens); AdamW then applies weight decay to them, which costs about
        # lr * weight decay per step, far under the parameter tolerance.
        zeros = [c is None and g is not None and not g.any() for c, g in zip(cpu_grads, grads)]
        record["zero_for_no_grad"] = sum(zeros)
        grads = [None if z else g for z, g in zip(zeros, grads)]
        record["grad_max_diff"], record["worst_grad"] = _worst(names, cpu_grads, grads)
        cpu_params, params = [p.detach() for p in model.parameters()], [p.detach().cpu() for p in dev.parameters()]
        noise = [None if g is None else (g != 0) & (g.abs() <= NOISE * record["grad_scale"]) for g in cpu_grads]
        record["noise_weights"] = sum(int(m.sum()) for m in noise if m is not None)
        record["param_max_diff"], record["worst_param"] = _worst(names, cpu_params, params, noise)
        record["param_max_diff_all"] = _worst(names, cpu_params, params)[0]
        problems = judge(record)
        record["status"] = "fail" if problems else "pass"
        if problems:
            record["cause"] = "; ".join(problems)
    except Exception as e:
        record.update(status="error", cause=_cause(e))
    metrics = torch_neuronx.metrics()
    record["fallbacks"] = metrics["fallbacks"]
    record["fallback_calls"] = sum(metrics["fallbacks"].values())
    if mode == "compiled":
        record["graphs"] = metrics["compile"]["graphs"]
        record["graph_breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
        record["recompiles"] = metrics["compile"]["recompiles"]
        record["eager_nodes"] = metrics["compile"]["eager_nodes"]
    record["neuron_seconds"] = round(time.perf_counter() - neuron_start, 1)
    record["seconds"] = round(time.perf_counter() - start, 1)
    return record


def merge(records: list[dict[str, Any]], merged: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-mode records into `merged`, one record per architecture: shared fields at the top, each
    mode's under its name (a mode run again replaces its earlier result)."""
    for r in records:
        entry = merged.setdefault(r["model_type"], {"model_type": r["model_type"]})
        for key in ("architecture", "params", "cpu_losses"):
            if key in r:
                entry[key] = r[key]
        entry[r["mode"]] = {k: v for k, v in r.items() if k not in ("model_type", "mode", "architecture", "params")}
        entry[r["mode"]].pop("cpu_losses", None)
    return merged


def _ran_on_cpu(r: dict[str, Any]) -> bool:
    return not any(r.get(m, {}).get("status") == "cpu-error" for m in MODES)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [r for r in results if _ran_on_cpu(r)]
    counts = {m: sum(1 for r in ran if r.get(m, {}).get("status") == "pass") for m in MODES}
    tried = {m: sum(1 for r in ran if m in r) for m in MODES}
    return {"architectures": len(results), "run_on_cpu": len(ran), "pass": counts, "tried": tried}


def _seconds(results: list[dict[str, Any]], mode: str) -> list[float]:
    return sorted(r[mode]["seconds"] for r in results if _ran_on_cpu(r) and "seconds" in r.get(mode, {}))


def _median(results: list[dict[str, Any]], mode: str) -> float:
    seconds = _seconds(results, mode)
    return seconds[len(seconds) // 2] if seconds else 0.0


def _total(results: list[dict[str, Any]], mode: str) -> float:
    return sum(_seconds(results, mode))


def _mode_cell(r: dict[str, Any], mode: str) -> str:
    return r[mode]["status"] if mode in r else "not run"


def _diff(r: dict[str, Any], mode: str, key: str) -> str:
    value = r.get(mode, {}).get(key)
    return f"{value:.1e}" if isinstance(value, float) else ""


def report(results: list[dict[str, Any]], path: str | os.PathLike = REPORT) -> str:
    """Write the training page (Markdown) and return its text."""
    import torch
    import transformers

    import torch_neuronx
    from torch_neuronx.runtime import platform

    s = summary(results)
    out = io.StringIO()
    w = out.write
    w("# Training coverage: Transformers causal-LM architectures on `neuron`\n\n")
    w("Generated by `python -m tools.hf_sweep --train --json docs/model_training.json` (do not edit by hand; ")
    w("`--resume` runs only the architectures and modes missing from the JSON). ")
    w(f"{datetime.date.today()}, torch {torch.__version__}, transformers {transformers.__version__}, ")
    w(f"torchneuron {torch_neuronx.__version__}, PJRT platform `{platform.platform_name()}`.\n\n")
    w("Every entry of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` is built tiny as for the inference sweep ")
    w("(`docs/model_coverage.md`), in training mode with every random setting (dropout, layer drop, router ")
    w("jitter) zeroed. From the same initial weights it takes ")
    w(f"{STEPS} `torch.optim.AdamW` steps (lr {LR:g}, other settings default) on one batch of two ")
    w(f"{LENGTH}-token sequences (labels = input ids, attention mask of ones; the few whose own loss cannot ")
    w("take those labels train on the next-token cross-entropy of their logits, listed at the end) on CPU, the ")
    w("reference, and on ")
    w('neuron: eagerly, and with the model under `torch.compile(backend="neuron")` (optimizer eager). ')
    w(f"The {STEPS} losses must match CPU's (rtol = atol = {LOSS_RTOL:g}); so must every parameter's gradient ")
    w(f"in the first step (absolute, {GRAD_TOL:g} of the model's largest gradient: Adam's update would hide a ")
    w("gradient wrong by a constant factor) and every parameter after the last step (absolute ")
    w(f"{PARAM_TOL:g}, a fifth of one step: Adam scales each gradient to the step size, so float32 rounding in ")
    w("small gradients shows in the weights, and on CPU alone float32 moves them up to 8e-5 from a float64 ")
    w("run). The parameter check leaves out `noise weights`: weights whose first gradient is nonzero but ")
    w(f"within {NOISE:g} of the model's largest, a sum that cancels to float32 rounding, so that its sign is a ")
    w("coin flip that Adam's first update, lr * g / (|g| + eps), turns into as much as 2 * lr. AdamW runs its ")
    w("per-parameter loop on CPU and its `foreach` path on neuron. A compiled model gets zero gradients for ")
    w("parameters its graph takes without its output depending on them, where eager autograd gives none ")
    w("(torch.compile's own behaviour, with `aot_eager` and `inductor` on CPU too): those count as equal ")
    w("(`zero_for_no_grad` in the JSON).\n\n")
    w(f"**Eager: {s['pass']['eager']} of {s['run_on_cpu']} architectures that train on CPU pass on neuron; ")
    w(f"compiled: {s['pass']['compiled']} of {s['run_on_cpu']}")
    if s["tried"]["compiled"] < s["run_on_cpu"]:
        w(f" ({s['run_on_cpu'] - s['tried']['compiled']} not run yet)")
    w(f".** {s['architectures'] - s['run_on_cpu']} of {s['architectures']} do not train on CPU with the tiny ")
    w("recipe (listed at the end).\n\n")
    w("Loss and parameter columns give the largest absolute difference from CPU (eager / compiled); ")
    w("`graphs` counts the graphs Dynamo handed the backend (one forward graph per region between graph ")
    w("breaks); `fallback calls` counts ops that ran on CPU for lack of a lowering (eager / compiled); `s` is ")
    w("each run's seconds, the CPU reference included (median eager ")
    w(" s, compiled ".join(f"{_median(results, m):.1f}" for m in MODES))
    w(
        " s; in all "
        + ", ".join(f"{m} {_total(results, m) / 60:.0f} min" for m in MODES)
        + f", on {os.cpu_count()} cores).\n\n"
    )
    columns = ["model type", "class", "eager", "compiled", "loss diff", "param diff", "graphs", "fallback calls"]
    columns += ["s", "cause"]
    w("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|\n")
    for r in results:
        if not _ran_on_cpu(r):
            continue
        pair = " / ".join
        cells = [r["model_type"], r.get("architecture", ""), _mode_cell(r, "eager"), _mode_cell(r, "compiled")]
        cells += [pair(_diff(r, m, "loss_max_diff") for m in MODES), pair(_diff(r, m, "param_max_diff") for m in MODES)]
        cells.append(r.get("compiled", {}).get("graphs", ""))
        cells.append(pair(str(r.get(m, {}).get("fallback_calls", "")) for m in MODES))
        cells.append(pair(str(r.get(m, {}).get("seconds", "")) for m in MODES))
        causes = [f"{m}: {r[m]['cause']}" for m in MODES if r.get(m, {}).get("cause")]
        cells.append("; ".join(causes))
        w("| " + " | ".join(_cell(c) for c in cells) + " |\n")
    ops: Counter = Counter()
    for r in results:
        for m in MODES:
            ops.update(dict.fromkeys(r.get(m, {}).get("fallbacks", {}), 1))
    if ops:
        w("\n## Ops that fell back to CPU, by number of runs using them\n\n")
        w(", ".join(f"`{op}` ({n})" for op, n in ops.most_common()) + "\n")
    failures = [
        (r, m) for r in results if _ran_on_cpu(r) for m in MODES if r.get(m, {}).get("status", "pass") != "pass"
    ]
    if failures:
        w("\n## Failures\n\n| model type | mode | result | cause |\n|---|---|---|---|\n")
        for r, m in failures:
            cause = DIAGNOSES.get((r["model_type"], m), r[m].get("cause", ""))
            w(f"| {r['model_type']} | {m} | {r[m]['status']} | {_cell(cause)} |\n")
    own = {
        r["model_type"]: r[m]["own_loss"]
        for r in results
        if _ran_on_cpu(r)
        for m in MODES
        if r.get(m, {}).get("own_loss")
    }
    if own:
        w("\n## Trained on the next-token cross-entropy of the logits\n\n")
        w("The model's own loss for labels = input ids fails on CPU, so these train on the sweep's loss instead.\n\n")
        w("| model type | why |\n|---|---|\n")
        for model_type, why in own.items():
            w(f"| {model_type} | {_cell(why)} |\n")
    failed_cpu = [r for r in results if not _ran_on_cpu(r)]
    if failed_cpu:
        w("\n## Not counted: the tiny model does not train on CPU\n\n| model type | cause |\n|---|---|\n")
        for r in failed_cpu:
            cause = next(r[m]["cause"] for m in MODES if r.get(m, {}).get("status") == "cpu-error")
            w(f"| {r['model_type']} | {_cell(cause)} |\n")
    text = out.getvalue()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    return text
