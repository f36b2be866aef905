"""Diffusers on neuron, end to end with tiny components built offline: a DDPM UNet2DModel pipeline
(with `torch.compile(pipe.unet)` as Diffusers' docs write it, the default backend), a Stable
Diffusion text-to-image pipeline (CLIP text encoder and tokenizer, UNet2DConditionModel,
AutoencoderKL) and a Flux pipeline (CLIP and T5 text encoders, FluxTransformer2DModel). Noise comes
from the same CPU generator, so each image must match CPU's; the text-to-image pipelines also run
with the denoiser under `torch.compile(backend="neuron")`. Last, the model sweep's CI slice
(`python -m tools.hf_sweep --family diffusers --fast`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

diffusers = pytest.importorskip("diffusers")

IMAGE_ATOL = 1e-3  # on images in [0, 1], after several denoising steps and the VAE decode
WORDS = ["a", "cat", "photo", "of", "the", "dog", "on", "grass"]


def _ddpm_pipeline() -> Any:
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4, attention_head_dim=8,
    )  # fmt: skip
    return DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ddpm_unet_pipeline_matches_cpu(compiled: bool) -> None:
    import torch_neuronx

    torch._dynamo.reset()
    torch_neuronx.compile.reset_metrics()
    kwargs = {"batch_size": 2, "num_inference_steps": 3, "output_type": "np"}
    ref = _ddpm_pipeline()(generator=torch.Generator().manual_seed(0), **kwargs).images
    pipe = _ddpm_pipeline().to("neuron")
    if compiled:
        pipe.unet = torch.compile(pipe.unet)
    assert pipe.device.type == "neuron" and pipe.unet.device.type == "neuron"
    out = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    assert out.shape == ref.shape == (2, 8, 8, 3)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert torch_neuronx.compile.metrics()["graphs"] == (1 if compiled else 0)


# ---------------------------------------------------------------- tiny text encoders, offline


def _clip_tokenizer() -> Any:
    """A CLIP BPE tokenizer over `WORDS`: each word one token (its end-of-word form), letters as fallback."""
    from transformers import CLIPTokenizer

    tokens = ["<|startoftext|>", "<|endoftext|>"]
    tokens += [c for c in "abcdefghijklmnopqrstuvwxyz"] + [f"{c}</w>" for c in "abcdefghijklmnopqrstuvwxyz"]
    merges, seen = [], set(tokens)
    for word in WORDS:
        piece = word[0]
        for i, c in enumerate(word[1:], start=1):
            right = c + ("</w>" if i == len(word) - 1 else "")
            merges.append((piece, right))
            piece += right
            if piece not in seen:
                tokens.append(piece)
                seen.add(piece)
    vocab = {token: i for i, token in enumerate(tokens)}
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=12)


def _t5_tokenizer() -> Any:
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(f"\u2581{w}", -1.0) for w in WORDS]
    return T5Tokenizer(vocab=pieces, extra_ids=0)


def _clip_text_encoder(tokenizer: Any) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=tokenizer.model_max_length, projection_dim=32,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    return CLIPTextModel(config).eval()


def _t5_encoder(tokenizer: Any) -> Any:
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4)
    return T5EncoderModel(config).eval()


def _vae(**kwargs: Any) -> Any:
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=4,
        sample_size=16, **kwargs,
    )  # fmt: skip


# ---------------------------------------------------------------- pipelines


def _stable_diffusion() -> Any:
    from diffusers import DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel

    torch.manual_seed(0)
    tokenizer = _clip_tokenizer()
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4, attention_head_dim=2, cross_attention_dim=32,
    )  # fmt: skip
    scheduler = DDIMScheduler(beta_schedule="scaled_linear", clip_sample=False, set_alpha_to_one=False)
    return StableDiffusionPipeline(
        vae=_vae(), text_encoder=_clip_text_encoder(tokenizer), tokenizer=tokenizer, unet=unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )  # fmt: skip


def _flux() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    torch.manual_seed(0)
    tokenizer, tokenizer_2 = _clip_tokenizer(), _t5_tokenizer()
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6),
    )  # fmt: skip
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(), vae=_vae(shift_factor=0.1, scaling_factor=0.5),
        text_encoder=_clip_text_encoder(tokenizer), tokenizer=tokenizer, text_encoder_2=_t5_encoder(tokenizer_2),
        tokenizer_2=tokenizer_2, transformer=transformer,
    )  # fmt: skip


PIPELINES = {
    "stable_diffusion": (_stable_diffusion, "unet", {}),
    "flux": (_flux, "transformer", {"max_sequence_length": 12, "guidance_scale": 3.5}),
}


def _images(pipe: Any, extra: dict[str, Any]) -> np.ndarray:
    return pipe(
        "a photo of a cat on the grass", height=16, width=16, num_inference_steps=2, output_type="np",
        generator=torch.Generator().manual_seed(0), **extra,
    ).images  # fmt: skip


@pytest.fixture(scope="module")
def cpu_images() -> dict[str, np.ndarray]:
    return {name: _images(build(), extra) for name, (build, _, extra) in PIPELINES.items()}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(PIPELINES))
def test_text_to_image_pipeline_matches_cpu(cpu_images: dict[str, np.ndarray], name: str, compiled: bool) -> None:
    import torch_neuronx

    build, denoiser, extra = PIPELINES[name]
    torch._dynamo.reset()
    torch_neuronx.compile.reset_metrics()
    pipe = build().to("neuron")
    if compiled:
        setattr(pipe, denoiser, torch.compile(getattr(pipe, denoiser), backend="neuron"))
    assert getattr(pipe, denoiser).device.type == "neuron"
    out = _images(pipe, extra)
    ref = cpu_images[name]
    assert out.shape == ref.shape == (1, 16, 16, 3)
    assert float(np.abs(out - ref).max()) <= IMAGE_ATOL
    assert (torch_neuronx.compile.metrics()["graphs"] >= 1) == compiled


# ---------------------------------------------------------------- the model sweep's CI slice


def test_diffusers_sweep_slice_matches_cpu(tmp_path: Path) -> None:
    from tools import hf_diffusers

    out = tmp_path / "records.json"
    cmd = [sys.executable, "-m", "tools.hf_sweep", "--family", "diffusers", "--fast", "--json", str(out), "--no-report"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    records = {r["model_type"]: r for r in json.loads(out.read_text())}
    assert sorted(records) == sorted(hf_diffusers.FAST)
    for name, record in records.items():
        assert record["status"] == "pass", (name, record.get("cause"))
        assert record["max_diff"] <= hf_diffusers.ATOL + hf_diffusers.RTOL
        assert record["fallback_calls"] == 0, (name, record["fallbacks"])
