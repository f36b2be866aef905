"""The scripts in examples/ run as a user runs them (a fresh process each, torchrun for FSDP2), in
their `--quick` configuration, and each one's printed comparison with CPU holds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]

# Every example ends with one line comparing its result with CPU's: "... vs CPU ...: <what> = <value>".
COMPARISON = re.compile(r"vs CPU[^:\n]*: ([^=\n]+) = ([-+.e\d]+)")

# script -> (launcher, the largest value its comparison may print)
EXAMPLES = {
    "finetune_causal_lm.py": ([sys.executable], 1e-3),  # relative loss difference
    "lora_peft.py": ([sys.executable], 1e-3),
    "generate.py": ([sys.executable], 0),  # tokens that differ
    "diffusers_ddpm.py": ([sys.executable], 1e-3),  # pixel difference
    "fsdp2_train.py": (TORCHRUN, 1e-3),
    "compile_train_step.py": ([sys.executable], 1e-3),
    "custom_kernels.py": ([sys.executable], 1e-5),  # largest difference of the JAX kernels
    "profile_step.py": ([sys.executable], 1e-5),  # relative loss difference
}


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in (REPO / "examples").glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.parametrize("script", list(EXAMPLES))
def test_example_runs_and_matches_cpu(script: str) -> None:
    launcher, bound = EXAMPLES[script]
    pythonpath = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": pythonpath, "GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(
        [*launcher, str(REPO / "examples" / script), "--quick"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, f"{script} failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    found = COMPARISON.findall(out.stdout)
    assert len(found) == 1, f"{script} printed no single comparison with CPU:\n{out.stdout[-3000:]}"
    what, value = found[0]
    assert float(value) <= bound, f"{script}: {what} = {value}"
