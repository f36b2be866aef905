"""Custom kernels written in JAX, used as PyTorch ops on `neuron` (and CPU).

Each op below is a real PyTorch custom op (`torch.ops.examples.<name>`): eager calls run one
cached executable, `torch.compile(backend="neuron")` traces it into the graph's executable,
and autograd comes from `jax.vjp`. Run this file to check each against plain PyTorch on CPU.

    python examples/custom_kernels.py
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torch_neuronx


@torch_neuronx.custom_op("examples::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm in one kernel, computed in float32 whatever the input dtype."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight * normed.astype(x.dtype)


@torch_neuronx.custom_op("examples::rotary", mutates_args=())
def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (the rotate-half form) of `x` [..., seq, head_dim]."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


@torch_neuronx.custom_op("examples::cache_write", mutates_args=("cache",))
def cache_write(cache: torch.Tensor, new: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """Write `new` [batch, heads, n, dim] into a static KV `cache` at `position` (a 0-d int
    tensor, so a new position never recompiles) in place; return the cache's valid length.
    The function returns the cache's new value first (it is mutated), then the op's output."""
    updated = jax.lax.dynamic_update_slice_in_dim(cache, new.astype(cache.dtype), position, axis=2)
    return updated, position + new.shape[2]


def _scaled_add_kernel(x_ref, y_ref, scale_ref, out_ref):
    out_ref[...] = x_ref[...] + scale_ref[0] * y_ref[...]


@torch_neuronx.custom_op("examples::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """`x + scale * y` as a Pallas kernel; compiled where the platform compiles Pallas (GPU),
    interpreted by JAX on the CPU platform (`torch_neuronx.pallas_interpret()`)."""
    return pl.pallas_call(
        _scaled_add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=torch_neuronx.pallas_interpret(),
    )(x, y, jnp.asarray(scale, x.dtype).reshape(1))


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def reference_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="accepted for uniformity: the run is already small")
    parser.parse_args()
    torch.manual_seed(0)
    on = {"device": "neuron"}
    x, w, y = torch.randn(2, 5, 16), torch.randn(16), torch.randn(2, 5, 16)
    cos, sin = torch.randn(5, 16), torch.randn(5, 16)
    differences = {
        "rms_norm": rms_norm(x.to(**on), w.to(**on), 1e-6).cpu() - reference_rms_norm(x, w, 1e-6),
        "rotary": rotary(x.to(**on), cos.to(**on), sin.to(**on)).cpu() - reference_rotary(x, cos, sin),
        "scaled_add (Pallas)": scaled_add(x.to(**on), y.to(**on), 0.5).cpu() - (x + 0.5 * y),
    }
    for name, difference in differences.items():
        print(f"{name:20s} max |neuron - torch|: {difference.abs().max().item():.2e}")
    cache, new = torch.zeros(1, 2, 8, 4, **on), torch.randn(1, 2, 3, 4)
    length = cache_write(cache, new.to(**on), torch.tensor(2, **on))
    print("cache_write          valid length:", length.item(), "written:", torch.equal(cache[:, :, 2:5].cpu(), new))
    largest = max(d.abs().max().item() for d in differences.values())
    print(f"kernels vs CPU (PyTorch): largest difference = {largest:.2e}")


if __name__ == "__main__":
    main()
