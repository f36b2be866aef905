"""Run PyTorch's OpInfo database (`op_db`) on neuron against CPU.

`check_op(opinfo, dtype)` runs every sample of one OpInfo entry on CPU and on neuron and
compares outputs (and, with `grad=True`, input gradients). `classify` runs it with the CPU
fallback disabled and reports how the op was served. The CI slice and the full sweep
(`python tests/sweep_opinfo.py`) both use these functions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from compare import TOLERANCES
from torch.testing._internal import common_utils
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import torch_neuronx

# Each `sample_inputs()` call looks for the running unittest.TestCase with `inspect.stack()`,
# which reads source context for every frame (~40 ms of CPU per call under pytest, two calls
# per check_op, more than a small op's compile). Our tests are plain pytest functions, so the
# search always ends in None (and the samples are seeded with the fixed SEED either way).
common_utils.extract_test_fn = lambda: None

OPS = {(o.name, o.variant_test_name): o for o in op_db}
# Some ops are numerically touchy; matching PyTorch's own device-test tolerances more loosely.
LOOSE = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (5e-2, 5e-2), torch.float16: (5e-3, 5e-3)}
RANDOM_OPS = {
    "bernoulli",
    "normal",
    "uniform",
    "rand_like",
    "randn_like",
    "randint_like",
    "multinomial",
    "nn.functional.dropout",
    "nn.functional.dropout2d",
    "nn.functional.dropout3d",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout",
    "randint",
    "randperm",
    "normal.number_mean",
    "randn",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "empty",
    "empty_like",
    "new_empty",
    "empty_strided",
    "new_empty_strided",
    "empty_permuted",
    "nn.functional.rrelu",  # its training-mode samples draw the slopes
    "nn.functional.fractional_max_pool2d",  # draws its pooling regions
    "nn.functional.fractional_max_pool3d",
}


class CpuError(Exception):
    """The CPU reference itself raised: the entry does not run on CPU with this dtype."""


def _draws(name: str, sample: Any) -> bool:
    """Attention with dropout draws its mask from each device's own generator."""
    if name == "nn.functional.multi_head_attention_forward":  # dropout_p is positional
        return bool(sample.kwargs.get("training", True) and sample.args[9])
    return bool(sample.kwargs.get("dropout_p"))


def find(name: str, variant: str = "") -> Any:
    return OPS[(name, variant)]


def to_neuron(x: Any) -> Any:
    """A CPU tensor's copy on neuron; a partial view (`x[5:]`) keeps its whole storage and its
    geometry there, so ops that reach outside the view (as_strided) see the same elements."""
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return x
    if x.storage_offset() or x.untyped_storage().nbytes() != x.numel() * x.element_size():
        whole = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage()).to("neuron")
        y = whole.as_strided(x.shape, x.stride(), x.storage_offset()).detach()
    else:
        y = x.detach().to("neuron")
    return y.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else y


# Arguments PyTorch requires on the host for any accelerator (CUDA included).
HOST_ARGS = {"tensor_split": 0}


def aliases_to_neuron() -> Any:
    """Like `to_neuron`, but tensors that share a CPU storage share one neuron storage, so an
    `out=` that aliases an input still does."""
    storages: dict[int, torch.Tensor] = {}

    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
            return x
        key = x.untyped_storage().data_ptr()
        whole = storages.get(key)
        if whole is None or whole.dtype != x.dtype:
            whole = storages[key] = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage()).to("neuron")
        y = whole.as_strided(x.shape, x.stride(), x.storage_offset()).detach()
        return y.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else y

    return move


def _on_neuron(name: str, sample: Any, keep_aliases: bool = False) -> Any:
    """The sample with its tensors on neuron, and a CPU device argument (`x.to("cpu")`) made neuron."""
    host = HOST_ARGS.get(name)
    dev_sample = sample.transform(aliases_to_neuron() if keep_aliases else to_neuron)
    if host is not None:
        dev_sample.args = (*dev_sample.args[:host], sample.args[host], *dev_sample.args[host + 1 :])

    def device(v: Any) -> Any:
        cpu = (isinstance(v, str) and v == "cpu") or (isinstance(v, torch.device) and v.type == "cpu")
        return torch.device("neuron") if cpu else v

    dev_sample.args = tuple(device(a) for a in dev_sample.args)
    dev_sample.kwargs = {k: device(v) for k, v in dev_sample.kwargs.items()}
    if "device" in dev_sample.kwargs:  # factory samples name the device they build on
        dev_sample.kwargs["device"] = "neuron"
    return dev_sample


def _close(cpu: Any, dev: Any, dtype: torch.dtype, loose: bool, exact_random: bool) -> None:
    cpu_leaves, _ = tree_flatten(cpu)
    dev_leaves, _ = tree_flatten(dev)
    assert len(cpu_leaves) == len(dev_leaves), f"{len(cpu_leaves)} outputs on CPU, {len(dev_leaves)} on neuron"
    table = LOOSE if loose else TOLERANCES
    for c, d in zip(cpu_leaves, dev_leaves):
        # Integer inputs with floating outputs (logsumexp, mean(dtype=)) get the output's tolerance.
        floating_out = isinstance(c, torch.Tensor) and (c.is_floating_point() or c.is_complex())
        rtol, atol = table.get(dtype if dtype in table or not floating_out else c.dtype, (0, 0))
        if isinstance(c, torch.Tensor):
            assert isinstance(d, torch.Tensor) and d.device.type == "neuron", f"expected a neuron tensor, got {d!r}"
            assert d.dtype == c.dtype, f"dtype {d.dtype} != CPU {c.dtype}"
            assert d.shape == c.shape, f"shape {tuple(d.shape)} != CPU {tuple(c.shape)}"
            if not exact_random:
                continue
            torch.testing.assert_close(d.cpu(), c, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        elif isinstance(c, float) and exact_random:
            torch.testing.assert_close(d, c, rtol=rtol, atol=atol, equal_nan=True)
        elif exact_random:
            assert c == d, f"{d!r} != CPU {c!r}"


def check_op(
    opinfo: Any, dtype: torch.dtype, grad: bool = False, max_samples: int | None = None, loose: bool = False
) -> int:
    """Compare every sample of `opinfo` on neuron with CPU; return the number of samples run."""
    count = 0
    for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=grad):
        if max_samples is not None and count >= max_samples:
            break
        exact = opinfo.name not in RANDOM_OPS and not _draws(opinfo.name, sample)
        dev_sample = _on_neuron(opinfo.name, sample)
        torch.manual_seed(0)
        try:
            cpu_out = opinfo(sample.input, *sample.args, **sample.kwargs)
        except Exception as error:
            raise CpuError(f"{opinfo.name} on CPU: {error}") from error
        torch.manual_seed(0)
        with torch.device("neuron"):  # factory samples without a device build on the default one
            dev_out = opinfo(dev_sample.input, *dev_sample.args, **dev_sample.kwargs)
        # As PyTorch's test_compare_cpu: outputs that are only defined up to e.g. a sign (SVD, eigh
        # vectors) are compared after the sample's canonicalizing postprocess.
        cpu_out = sample.output_process_fn_grad(cpu_out)
        dev_out = dev_sample.output_process_fn_grad(dev_out)
        _close(cpu_out, dev_out, dtype, loose, exact)
        if grad:
            _check_grads(sample, dev_sample, cpu_out, dev_out, dtype, loose, exact)
        count += 1
    return count


def _check_grads(
    sample: Any, dev_sample: Any, cpu_out: Any, dev_out: Any, dtype: torch.dtype, loose: bool, exact: bool
) -> None:
    cpu_outs = [t for t in tree_flatten(cpu_out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    dev_outs = [t for t in tree_flatten(dev_out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    if not cpu_outs:
        return
    cpu_inputs = [
        t
        for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    dev_inputs = [
        t
        for t in tree_flatten((dev_sample.input, dev_sample.args, dev_sample.kwargs))[0]
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    cotangents = [torch.randn_like(t) for t in cpu_outs]
    cpu_grads = torch.autograd.grad(cpu_outs, cpu_inputs, cotangents, allow_unused=True)
    dev_grads = torch.autograd.grad(dev_outs, dev_inputs, tree_map(to_neuron, cotangents), allow_unused=True)
    # A random op's gradients depend on its draws (dropout's mask): compare dtypes and shapes only.
    _close([g for g in cpu_grads if g is not None], [g for g in dev_grads if g is not None], dtype, loose, exact)


@contextmanager
def fallback_disabled() -> Iterator[None]:
    old = os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK")
    os.environ["TORCH_NEURONX_DISABLE_FALLBACK"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TORCH_NEURONX_DISABLE_FALLBACK"]
        else:
            os.environ["TORCH_NEURONX_DISABLE_FALLBACK"] = old


def classify(opinfo: Any, dtype: torch.dtype, grad: bool = False, max_samples: int | None = None) -> str:
    """'native' | 'decomposed' | 'fallback' | 'failing' | 'no-samples' | 'n/a' (CPU raises) for one entry."""
    return classify_with_cause(opinfo, dtype, grad, max_samples)[0]


def classify_with_cause(
    opinfo: Any, dtype: torch.dtype, grad: bool = False, max_samples: int | None = None
) -> tuple[str, str | None]:
    """`classify`, and for 'failing' the first line of what went wrong with the fallback enabled."""
    try:
        torch_neuronx.reset_metrics()
        with fallback_disabled():
            count = check_op(opinfo, dtype, grad, max_samples)
        if not count:
            return "no-samples", None
        return ("decomposed" if torch_neuronx.metrics()["decompositions"] else "native"), None
    except CpuError:
        return "n/a", None
    except Exception:
        pass
    try:
        check_op(opinfo, dtype, grad, max_samples)
        return "fallback", None
    except Exception as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        return "failing", f"{type(error).__name__}: {' '.join(lines[:3])}"[:240]
