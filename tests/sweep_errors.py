"""Bad input on neuron: every OpInfo `error_inputs` case (PyTorch's own list of invalid calls,
each with the exception type and message CPU raises), written to docs/error_coverage.md.

    python tests/sweep_errors.py [--only NAME ...] [--fast]

Each case runs on CPU first (a case CPU does not reject as declared is skipped), then on neuron
with the CPU fallback disabled, its results copied to the host so deferred device-side checks
are raised. Outcomes: `same` (CPU's exception type and message), `type` (CPU's type, another
message), `other` (another exception type), `silent` (no exception: a result where CPU refuses),
`no lowering` (the op has no neuron lowering yet), `changed` (it raised, but a tensor of the call
changed). After each error the device must keep working. `--fast` runs the suite's slice (FAST) and
fails unless every case there is `same`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from opinfo import OPS, _on_neuron
from torch.utils._pytree import tree_leaves

ROOT = Path(__file__).resolve().parent.parent
# Entries whose every error case matches CPU, one or two per family: the suite runs them
# (tests/test_errors.py).
FAST = [
    "nn.functional.max_pool2d", "nn.functional.avg_pool3d", "nn.functional.gelu", "nn.functional.embedding",
    "native_layer_norm", "nn.functional.group_norm", "linalg.cross", "diagonal", "narrow", "movedim", "view",
    "fft.fft", "bucketize", "atan2", "tril", "max", "nn.functional.margin_ranking_loss",
]  # fmt: skip


def _outcome(error_input: Any, name: str, opinfo_call: Any) -> tuple[str, str]:
    sample = error_input.sample_input
    try:
        opinfo_call(sample.input, *sample.args, **sample.kwargs)
    except error_input.error_type as e:
        if not re.search(error_input.error_regex, str(e)):
            return "skip", "CPU raised another message"
    except Exception as e:  # CPU itself disagrees with the declared case
        return "skip", f"CPU raised {type(e).__name__}"
    else:
        return "skip", "CPU raised nothing"
    moved = _on_neuron(name, sample, keep_aliases=True)
    leaves = tree_leaves((moved.input, moved.args, moved.kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor) and t.device.type != "meta"]
    before = [t.detach().cpu().clone() for t in tensors]
    try:
        out = opinfo_call(moved.input, *moved.args, **moved.kwargs)
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                leaf.cpu()
        torch.neuron.synchronize()
    except error_input.error_type as e:
        outcome, detail = ("same" if re.search(error_input.error_regex, str(e)) else "type"), str(e)[:300]
    except Exception as e:  # the point is to record what neuron raised
        outcome = "no lowering" if "neuron: no lowering for" in str(e) else "other"
        detail = f"{type(e).__name__}: {str(e)[:300]}"
    else:
        return "silent", ""
    # After the error the device keeps working and no tensor of the call changed.
    changed = [i for i, (t, b) in enumerate(zip(tensors, before)) if not _unchanged(t.detach().cpu(), b)]
    assert torch.equal((torch.ones(2, device="neuron") + 1).cpu(), torch.full((2,), 2.0)), "the device stopped working"
    return ("changed", f"tensors {changed} changed by the failed call; {detail}") if changed else (outcome, detail)


def _unchanged(now: torch.Tensor, before: torch.Tensor) -> bool:
    if now.shape != before.shape:
        return False
    try:  # flattened: CPU's comparison itself refuses tensors of more than 64 dims
        torch.testing.assert_close(now.reshape(-1), before.reshape(-1), rtol=0, atol=0, equal_nan=True)
    except AssertionError:
        return False
    return True


def run(names: list[str]) -> list[dict]:
    """One row per error case of the `op_db` entries named (all where empty), with the CPU
    fallback disabled while they run."""
    previous = os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK")
    os.environ["TORCH_NEURONX_DISABLE_FALLBACK"] = "1"
    try:
        return _run(names)
    finally:
        if previous is None:
            del os.environ["TORCH_NEURONX_DISABLE_FALLBACK"]
        else:
            os.environ["TORCH_NEURONX_DISABLE_FALLBACK"] = previous


def _run(names: list[str]) -> list[dict]:
    rows = []
    for (name, variant), opinfo in sorted(OPS.items()):
        if (names and name not in names) or opinfo.error_inputs_func is None:
            continue
        try:
            cases = list(opinfo.error_inputs(torch.device("cpu")))
        except Exception as e:  # the generator itself needs another device
            rows.append({"op": name, "variant": variant, "case": -1, "outcome": "skip", "detail": str(e)[:200]})
            continue
        for i, case in enumerate(cases):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome, detail = _outcome(case, name, opinfo)
            rows.append(
                {
                    "op": name,
                    "variant": variant,
                    "case": i,
                    "expected": f"{case.error_type.__name__}: {case.error_regex}",
                    "outcome": outcome,
                    "detail": detail,
                }
            )
    return rows


def report(rows: list[dict]) -> str:
    counted = [r for r in rows if r["outcome"] != "skip"]
    totals = Counter(r["outcome"] for r in counted)
    lines = [
        "# Bad input on neuron: OpInfo `error_inputs`",
        "",
        "Generated by `python tests/sweep_errors.py` (raw rows: `docs/error_coverage.jsonl`). Each case is an",
        "invalid call from PyTorch's OpInfo database with the exception CPU raises; neuron runs it with the",
        "CPU fallback disabled.",
        "",
        f"{len(counted)} cases that CPU rejects as declared: "
        + ", ".join(f"{k} {v} ({100 * v / len(counted):.0f}%)" for k, v in totals.most_common()),
        "",
        "| outcome | op | expected (CPU) | neuron |",
        "|---|---|---|---|",
    ]
    for r in counted:
        if r["outcome"] != "same":
            detail = r["detail"].replace("|", "\\|").replace("\n", " ")[:160]
            expected = r["expected"].replace("|", "\\|")[:120]
            lines.append(f"| {r['outcome']} | {r['op']} {r['variant']} | {expected} | {detail} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--fast", action="store_true")
    args = parser.parse_args()
    rows = run(FAST if args.fast else args.only)
    if args.fast:
        bad = [r for r in rows if r["outcome"] not in ("same", "skip")]
        print(json.dumps(bad, indent=1) if bad else f"{len(rows)} cases, all as CPU")
        sys.exit(1 if bad else 0)
    raw = ROOT / "docs" / "error_coverage.jsonl"
    if args.only:  # rerun those ops' rows, keep every other op's
        kept = [json.loads(line) for line in raw.read_text().splitlines()]
        rows = sorted(
            [r for r in kept if r["op"] not in args.only] + rows, key=lambda r: (r["op"], r["variant"], r["case"])
        )
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (ROOT / "docs" / "error_coverage.md").write_text(report(rows))
    print(report(rows).splitlines()[6])


if __name__ == "__main__":
    main()
