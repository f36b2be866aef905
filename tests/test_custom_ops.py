"""Custom kernels: JAX functions as PyTorch custom ops (`torch_neuronx.custom_op`), compared with
PyTorch on CPU in eager, in autograd and under torch.compile; the shipped examples pass
`torch.library.opcheck`; a plain `torch.library.custom_op` with its own neuron kernel."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import torch
from compare import assert_same, to

import torch_neuronx

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("custom_kernels", ROOT / "examples" / "custom_kernels.py")
kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernels)

# opcheck's autograd-registration test supports only CPU/CUDA/XPU tensors (PyTorch raises
# NotImplementedError for any other device); on neuron the other three run.
ON_NEURON = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def _rms_inputs(dtype: torch.dtype = torch.float32) -> tuple:
    return torch.randn(3, 7, 32, dtype=dtype), torch.randn(32, dtype=dtype), 1e-6


def _rotary_inputs() -> tuple:
    return torch.randn(2, 4, 6, 16), torch.randn(6, 16), torch.randn(6, 16)


def _scaled_add_inputs() -> tuple:
    return torch.randn(4, 8), torch.randn(4, 8), 0.25


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_torch(dtype: torch.dtype) -> None:
    x, w, eps = _rms_inputs(dtype)
    expected = kernels.reference_rms_norm(x, w, eps)
    assert_same(expected, kernels.rms_norm(*to("neuron", (x, w)), eps))
    torch.testing.assert_close(kernels.rms_norm(x, w, eps), expected)  # the same function on CPU tensors
    assert_same(expected, torch.ops.examples.rms_norm(*to("neuron", (x, w)), eps))


def test_views_are_read_through_their_geometry() -> None:
    x, w, eps = _rms_inputs()
    xt = x.transpose(0, 1)[:, 1:]  # a strided view
    assert_same(
        kernels.reference_rms_norm(xt, w, eps),
        kernels.rms_norm(x.to("neuron").transpose(0, 1)[:, 1:], w.to("neuron"), eps),
    )


def test_a_new_float_argument_does_not_recompile() -> None:
    x, w, _ = to("neuron", _rms_inputs())
    kernels.rms_norm(x, w, 1e-6)
    before = torch_neuronx.metrics()["cache_misses"]
    for eps in (1e-5, 1e-3, 0.5):
        assert_same(kernels.reference_rms_norm(x.cpu(), w.cpu(), eps), kernels.rms_norm(x, w, eps))
    assert torch_neuronx.metrics()["cache_misses"] == before


def test_gradients_from_jax_vjp_match_torch_autograd() -> None:
    x, w, eps = _rms_inputs()
    cpu = [t.clone().requires_grad_() for t in (x, w)]
    dev = [t.to("neuron").requires_grad_() for t in (x, w)]
    grad = torch.randn(x.shape)
    kernels.reference_rms_norm(*cpu, eps).backward(grad)
    kernels.rms_norm(*dev, eps).backward(grad.to("neuron"))
    for c, d in zip(cpu, dev):
        assert_same(c.grad, d.grad)
    only_x = x.to("neuron").requires_grad_()
    kernels.rms_norm(only_x, w.to("neuron"), eps).backward(grad.to("neuron"))
    assert_same(cpu[0].grad, only_x.grad)
    host = [t.clone().requires_grad_() for t in (x, w)]  # the CPU kernel has the same backward
    kernels.rms_norm(*host, eps).backward(grad)
    for c, h in zip(cpu, host):
        torch.testing.assert_close(h.grad, c.grad)


def test_rotary_forward_and_backward() -> None:
    x, cos, sin = _rotary_inputs()
    cpu_x, dev_x = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    expected = kernels.reference_rotary(cpu_x, cos, sin)
    got = kernels.rotary(dev_x, cos.to("neuron"), sin.to("neuron"))
    assert_same(expected.detach(), got.detach())
    expected.square().sum().backward()
    got.square().sum().backward()
    assert_same(cpu_x.grad, dev_x.grad)


def test_mutating_op_writes_through_views() -> None:
    cache = torch.zeros(2, 2, 9, 4)
    new, position = torch.randn(1, 2, 3, 4), torch.tensor(4)
    dev_cache = cache.to("neuron")
    alias = dev_cache[1:]  # the op writes a view; the base and every alias see it
    length = kernels.cache_write(alias, new.to("neuron"), position.to("neuron"))
    expected = cache.clone()
    expected[1:, :, 4:7] = new
    assert length.item() == 7
    assert_same(expected, dev_cache)
    assert_same(expected[1:], alias)
    host = cache.clone()  # the CPU kernel writes in place too
    assert kernels.cache_write(host[1:], new, position).item() == 7
    torch.testing.assert_close(host, expected)


def test_pallas_kernel() -> None:
    x, y, scale = _scaled_add_inputs()
    assert torch_neuronx.pallas_interpret() is (os.environ.get("TORCH_NEURONX_PLATFORM", "cpu") == "cpu")
    assert_same(x + scale * y, kernels.scaled_add(*to("neuron", (x, y)), scale))
    torch.testing.assert_close(kernels.scaled_add(x, y, scale), x + scale * y)


@pytest.mark.parametrize(
    "op, inputs",
    [
        (kernels.rms_norm, _rms_inputs),
        (kernels.rotary, _rotary_inputs),
        (kernels.scaled_add, _scaled_add_inputs),
        (kernels.cache_write, lambda: (torch.zeros(1, 2, 6, 4), torch.randn(1, 2, 2, 4), torch.tensor(1))),
    ],
    ids=["rms_norm", "rotary", "scaled_add", "cache_write"],
)
def test_opcheck(op: object, inputs: object) -> None:
    args = inputs()
    differentiable = op is not kernels.cache_write and op is not kernels.scaled_add
    cpu = [a.requires_grad_() if differentiable and i == 0 else a for i, a in enumerate(args)]
    torch.library.opcheck(op, tuple(cpu))
    dev = [a.detach().to("neuron") if isinstance(a, torch.Tensor) else a for a in args]
    torch.library.opcheck(op, tuple(dev), test_utils=ON_NEURON)


class RMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm, computed by the custom op."""

    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.weight, self.eps = norm.weight, norm.variance_epsilon

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)


def _llama_block(config: object) -> torch.nn.Module:
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    layer = LlamaDecoderLayer(config, layer_idx=0)
    layer.input_layernorm = RMSNorm(layer.input_layernorm)
    layer.post_attention_layernorm = RMSNorm(layer.post_attention_layernorm)
    return layer


def test_llama_block_with_custom_rms_norm_compiles_to_one_executable() -> None:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    config._attn_implementation = "eager"
    layer, dev_layer = _llama_block(config), _llama_block(config)
    dev_layer.load_state_dict(layer.state_dict())
    dev_layer.to("neuron")
    x, positions = torch.randn(2, 5, 32), torch.arange(5)[None].expand(2, 5)

    def step(block: torch.nn.Module, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rotary = LlamaRotaryEmbedding(config).to(x.device)
        hidden = block(x, position_embeddings=rotary(x, positions), position_ids=positions)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        hidden.square().mean().backward()
        return hidden.detach()

    expected = step(layer, x, positions)
    torch_neuronx.reset_metrics()
    got = step(torch.compile(dev_layer, backend="neuron", fullgraph=True), *to("neuron", (x, positions)))
    compiled = torch_neuronx.metrics()["compile"]
    assert compiled["graphs"] == 1 and compiled["compiles"] == 2  # forward and backward executables
    assert compiled["eager_nodes"] == {}
    assert not any(name.startswith("examples.") for name in torch_neuronx.metrics()["op_calls"])
    assert_same(expected, got)
    for p, q in zip(layer.parameters(), dev_layer.parameters()):
        assert_same(p.grad, q.grad)


def test_mutating_op_compiles_inline() -> None:
    def decode(cache: torch.Tensor, new: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        length = kernels.cache_write(cache[:, 1:], new * 2, position)
        return cache.sum() + length

    cache, new, position = torch.zeros(1, 3, 8, 4), torch.randn(1, 2, 1, 4), torch.tensor(3)
    expected = decode(cache, new, position)
    dev = to("neuron", (cache, new, position))
    torch_neuronx.reset_metrics()
    compiled = torch.compile(decode, backend="neuron", fullgraph=True)
    got = compiled(*dev)
    got_next = compiled(dev[0], dev[1], torch.tensor(5, device="neuron"))
    assert torch_neuronx.metrics()["compile"]["eager_nodes"] == {}
    assert torch_neuronx.metrics()["compile"]["compiles"] == 1  # a new position is a new value, not a new graph
    assert_same(expected, got)
    assert_same(decode(cache, new, torch.tensor(5)), got_next)
    assert_same(cache, dev[0])


def test_function_returning_the_wrong_values_is_named() -> None:
    @torch_neuronx.custom_op("tests::bad_update", mutates_args=("x",))
    def bad_update(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y  # forgets the mutated value: two values are due

    with pytest.raises(TypeError, match=r"tests.bad_update.default.*new values of x .*then its 1 output"):
        bad_update(torch.zeros(3, device="neuron"), torch.ones(3, device="neuron"))


def test_mutates_args_must_be_named() -> None:
    with pytest.raises(ValueError, match="mutates_args must name the arguments"):
        torch_neuronx.custom_op("tests::unknown", lambda x: x, mutates_args="unknown")


def test_plain_custom_op_with_a_neuron_kernel_runs_between_compiled_regions() -> None:
    @torch.library.custom_op("tests::clamp_scale", mutates_args=())
    def clamp_scale(x: torch.Tensor, scale: float) -> torch.Tensor:
        return (x * scale).clamp(-1, 1)

    clamp_scale.register_fake(lambda x, scale: torch.empty_like(x))
    calls = []

    @clamp_scale.register_kernel("neuron")
    def _(x: torch.Tensor, scale: float) -> torch.Tensor:
        calls.append(x.device.type)
        return (x * scale).clamp(-1, 1)

    x = torch.randn(6)
    assert_same(clamp_scale(x, 3.0), clamp_scale(x.to("neuron"), 3.0))
    torch_neuronx.reset_metrics()
    fn = torch.compile(lambda x: clamp_scale(x + 1, 2.0) * 2, backend="neuron", options={"fallback_execution": False})
    assert_same(clamp_scale(x + 1, 2.0) * 2, fn(x.to("neuron")))
    assert calls == ["neuron", "neuron"]
    assert torch_neuronx.metrics()["compile"]["eager_nodes"] == {"tests.clamp_scale.default": 1}


def test_a_changed_function_is_never_served_from_the_executable_store(tmp_path: Path) -> None:
    script = """
import sys, torch, torch_neuronx
@torch_neuronx.custom_op("tests::changing", mutates_args=())
def changing(x: torch.Tensor) -> torch.Tensor:
    return x * float(sys.argv[1])
print(changing(torch.ones(3, device="neuron")).sum().item())
"""
    env = {**os.environ, "TORCH_NEURONX_CACHE_DIR": str(tmp_path)}
    run = [sys.executable, "-c", script]
    first = subprocess.run([*run, "2"], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([*run, "5"], env=env, capture_output=True, text=True, check=True)
    assert (first.stdout.split()[-1], second.stdout.split()[-1]) == ("6.0", "15.0")


def test_jax_body_may_use_any_jax() -> None:
    @torch_neuronx.custom_op("tests::softmax_top", mutates_args=())
    def softmax_top(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = jax.lax.top_k(jax.nn.softmax(x, axis=-1), k)
        return values, indices.astype(jnp.int64)

    x = torch.randn(4, 10)
    values, indices = torch.softmax(x, -1).topk(3)
    assert_same([values, indices], list(softmax_top(x.to("neuron"), 3)))


def test_docs_kernels_snippets_run() -> None:
    """Every Python snippet of docs/kernels.md runs, in order, in one fresh process."""
    text = (ROOT / "docs" / "kernels.md").read_text()
    snippets = [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]
    assert len(snippets) >= 3
    subprocess.run([sys.executable, "-c", "\n".join(snippets)], check=True, capture_output=True, text=True)


def test_register_autograd_replaces_the_derived_backward() -> None:
    @torch_neuronx.custom_op("tests::clip_grad_identity", mutates_args=())
    def clip(x: torch.Tensor) -> torch.Tensor:
        return jnp.clip(x, -1.0, 1.0)

    clip.register_autograd(lambda ctx, grad: grad, setup_context=lambda ctx, inputs, output: None)  # straight-through
    x = torch.tensor([-3.0, 0.5, 2.0], device="neuron", requires_grad=True)
    clip(x).sum().backward()
    assert_same(torch.ones(3), x.grad)


def test_tensor_lists_optional_tensors_and_integer_outputs() -> None:
    @torch_neuronx.custom_op("tests::weighted_sum", mutates_args=())
    def weighted_sum(
        xs: list[torch.Tensor], weight: torch.Tensor | None, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        total = sum(xs) * scale
        if weight is not None:
            total = total * weight
        return total, jnp.argmax(total, axis=-1)

    xs = [torch.randn(3, 5) for _ in range(3)]
    weight = torch.randn(5)
    cpu = [x.clone().requires_grad_() for x in xs]
    dev = [x.to("neuron").requires_grad_() for x in xs]
    expected = sum(cpu) * 0.5 * weight
    got, index = weighted_sum(dev, weight.to("neuron"), 0.5)
    assert_same([expected.detach(), expected.argmax(-1)], [got.detach(), index])
    expected.square().sum().backward()
    got.square().sum().backward()
    for c, d in zip(cpu, dev):
        assert_same(c.grad, d.grad)
    unweighted, _ = weighted_sum(to("neuron", xs), None, 2.0)
    assert_same(sum(xs) * 2.0, unweighted)
