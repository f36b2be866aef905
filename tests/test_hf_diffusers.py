"""Diffusers on neuron: a tiny UNet2DModel DDPM pipeline, built from a config, runs a few
denoising steps on neuron and matches CPU (the noise comes from the same CPU generator), eager
and with `torch.compile(pipe.unet)` as Diffusers' docs write it (the default backend)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

diffusers = pytest.importorskip("diffusers")


def _pipeline():
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4, attention_head_dim=8,
    )  # fmt: skip
    return DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ddpm_unet_pipeline_matches_cpu(compiled):
    import torch_neuronx

    torch._dynamo.reset()
    torch_neuronx.compile.reset_metrics()
    kwargs = {"batch_size": 2, "num_inference_steps": 3, "output_type": "np"}
    ref = _pipeline()(generator=torch.Generator().manual_seed(0), **kwargs).images
    pipe = _pipeline().to("neuron")
    if compiled:
        pipe.unet = torch.compile(pipe.unet)
    assert pipe.device.type == "neuron" and pipe.unet.device.type == "neuron"
    out = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    assert out.shape == ref.shape == (2, 8, 8, 3)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert torch_neuronx.compile.metrics()["graphs"] == (1 if compiled else 0)
