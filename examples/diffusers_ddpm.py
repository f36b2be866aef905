"""A Diffusers pipeline on `neuron`: DDPM denoising with a small UNet.

`pipe.to("neuron")` is the only change from CPU or CUDA code. The UNet is built from a config
(untrained, so the images are noise; with a real model use `DDPMPipeline.from_pretrained(name)`).
The starting noise comes from a CPU generator, so the same pipeline on CPU gives the reference.

    python examples/diffusers_ddpm.py            # 32x32 images, 20 denoising steps
    python examples/diffusers_ddpm.py --quick    # 8x8 images, 3 steps
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel


def build_pipeline(size: int) -> DDPMPipeline:
    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=size, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4, attention_head_dim=8,
    )  # fmt: skip
    pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=100))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8x8 images, 3 steps")
    quick = parser.parse_args().quick
    size, steps = (8, 3) if quick else (32, 20)
    run = {"batch_size": 2, "num_inference_steps": steps, "output_type": "np"}

    pipe = build_pipeline(size).to("neuron")
    images = pipe(generator=torch.Generator().manual_seed(0), **run).images
    print(f"{len(images)} images of {images.shape[1]}x{images.shape[2]} on {pipe.device}, "
          f"mean {images.mean():.4f}, std {images.std():.4f}")  # fmt: skip

    reference = build_pipeline(size)(generator=torch.Generator().manual_seed(0), **run).images
    difference = float(np.abs(images - reference).max())
    print(f"neuron vs CPU: max |pixel difference| = {difference:.2e}")
    assert difference < 1e-3


if __name__ == "__main__":
    main()
