"""The Diffusers model sweep: every model class `diffusers.models` exports, built tiny from its own
constructor defaults, run on CPU and on neuron, compared, and written up as the Diffusers section
of `docs/model_coverage.md`:

    python -m tools.hf_sweep --family diffusers [--fast] [--only UNet2DModel,AutoencoderKL]

Per class (`run_one`): the constructor's defaults shrunk by one generic recipe (`tiny_config`: layer
counts to 2, blocks per level to 1, head counts to 2, head widths to 16, text, pooled and embedding
widths to 32, every level of a convolutional stack 32 channels, rotary axes rescaled to the head
width), then `OVERRIDES` for the few classes the recipe cannot infer; the model is built on CPU
with a fixed seed in eval mode, every constant matrix randomized (Diffusers zero-initializes its
output projections and adaLN modulations, which would make any two backends agree). Inputs come
from the forward signature (`inputs`): each parameter the model requires, and the optional ones
Diffusers' pipelines pass (text states, pooled projections, position ids, guidance), are made from
their names and the config; the latent's layout (image, video channels-first or frames-first,
packed tokens, 1-D signal) is the first of a few candidates the CPU forward accepts. The CPU
forward is the reference; after `model.to("neuron")` every tensor of the output must match it
(rtol = atol = 1e-4). Classes whose tiny model does not build or run on CPU are listed apart and
not counted. Fallback calls are recorded as in the Transformers sweeps.
"""

from __future__ import annotations

import inspect
import io
import re
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .hf_sweep import ROOT, _cause, _cell, neuron_counters
from .tiny_models import _pow2_at_most, _randomize_constant_matrices

FAMILY = "diffusers"
TITLE = "Diffusers: model classes"
# The CI slice (`--fast`, tests/test_hf_diffusers.py): the VAE (resnets, group norm, mid-block attention,
# up/down sampling) and the two transformer denoisers (SD3's joint attention over patches, Flux's packed
# tokens with rotary ids and single blocks). The UNet runs in the test file's pipelines instead.
FAST = ["AutoencoderKL", "SD3Transformer2DModel", "FluxTransformer2DModel"]
RTOL = ATOL = 1e-4
MEANINGFUL = 1e-2  # the float64 check applies only where CPU float32 is this close to float64, relative to the output
BATCH = 2
SIDE = 16  # latent height and width
FRAMES = 2  # latent frames of a video model
TEXT = 8  # text tokens
LAYERS = 2
HEADS = 2
HEAD_DIM = 16
WIDTH = 32  # text, pooled and embedding widths; channels of every convolutional level
FFN = 64

# What investigation found behind failures whose records show only a difference (for the report).
DIAGNOSES: dict[str, str] = {}

# Containers that hold other models (lists of ControlNets, adapters) rather than a config of their own.
CONTAINERS = {"ModelMixin", "MultiAdapter", "MultiControlNetModel", "MultiControlNetUnionModel",
              "FluxMultiControlNetModel", "SD3MultiControlNetModel", "HunyuanDiT2DMultiControlNetModel",
              "QwenImageMultiControlNetModel"}  # fmt: skip


def records_path() -> Path:
    return ROOT / "docs" / f"model_coverage_{FAMILY}.json"


def model_types() -> list[str]:
    """The names of the model classes `diffusers.models` exports, containers of other models left out."""
    import diffusers.models
    import torch

    names = []
    for name in sorted(dir(diffusers.models)):
        value = getattr(diffusers.models, name)
        if inspect.isclass(value) and issubclass(value, torch.nn.Module) and name not in CONTAINERS:
            names.append(name)
    return names


# ---------------------------------------------------------------- the tiny config


_LAYER_KEYS = {"num_layers", "num_single_layers", "depth", "num_blocks", "num_refiner_layers", "num_encoder_layers",
               "num_decoder_layers", "num_mid_blocks", "num_res_blocks", "n_layers",
               "num_transformer_layers"}  # fmt: skip
_PER_BLOCK_KEYS = {"layers_per_block", "transformer_layers_per_block", "num_layers_per_block"}
_HEAD_KEYS = {"num_attention_heads", "num_heads", "heads", "n_heads", "num_key_value_heads", "num_kv_heads"}
_HEAD_DIM_KEYS = {"attention_head_dim", "head_dim", "dim_head", "attention_head_size"}
_WIDTH_KEYS = {
    "cross_attention_dim", "joint_attention_dim", "caption_projection_dim", "pooled_projection_dim", "caption_channels",
    "text_embed_dim", "encoder_hid_dim", "projection_class_embeddings_input_dim", "text_dim", "cond_dim",
    "hidden_size", "inner_dim", "dim", "hidden_dim", "embed_dim", "embedding_dim", "time_embed_dim", "text_hidden_dim",
    "context_dim", "clip_embed_dim", "image_embed_dim", "text_embed_dim_2", "pooled_projection_dim_2",
    "addition_time_embed_dim", "model_channels", "base_channels", "channels", "hidden_channels", "c_cond",
    "encoder_hidden_dim", "text_states_dim", "text_states_dim_2", "cap_feat_dim", "in_dim_text", "d_model",
}  # fmt: skip
_FFN_KEYS = {"d_ff", "ffn_dim", "intermediate_size", "ff_inner_dim", "ffn_hidden_dim", "mlp_dim", "ff_dim"}
_CHANNEL_LISTS = {"block_out_channels", "conditioning_embedding_out_channels", "decoder_block_out_channels",
                  "encoder_block_out_channels", "channels", "c_hidden", "down_block_channels"}  # fmt: skip
# Any other integer setting whose name says it is a width (dim, channels, hidden) is cut to WIDTH (FFN for
# feed-forward widths), except those that fix the data's interface or positions rather than the model's size.
_WIDTH_NAME = re.compile(r"dim|channels|hidden|^ch$|^ch_|_ch$")
_FFN_NAME = re.compile(r"ffn|intermediate|ff_|mlp")
_NOT_WIDTH = re.compile(
    r"^(in|out|latent|io|audio_in|audio_out|cond_in|vace_in)_channels$|patch|sample|freq|rope|theta|"
    r"max_|_len|vocab|codebook|rate|hop|fft|mel|timesteps|num_|position|resolution|scale"
)
_ROPE_AXES = {"axes_dims_rope", "axes_dim", "rope_axes_dim", "axes_dims", "rope_dim_list", "rope_axes_dims",
              "axes_dim_rope"}  # fmt: skip
_HEADS_NAME = re.compile(r"(^|_)(num_)?(attention_)?heads$")

OVERRIDES: dict[str, Callable[[dict[str, Any]], None]] = {}


def override(*names: str) -> Callable[[Callable[[dict[str, Any]], None]], Callable[[dict[str, Any]], None]]:
    """Register a config fix for the named classes (runs after the generic recipe)."""

    def register(fix: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        for name in names:
            OVERRIDES[name] = fix
        return fix

    return register


def constructor_defaults(cls: type) -> dict[str, Any]:
    """The class's constructor settings with their default values (those without one left out)."""
    params = inspect.signature(cls.__init__).parameters
    return {
        name: p.default
        for name, p in params.items()
        if name != "self" and p.default is not inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    }


def _is_width(key: str) -> bool:
    return bool(_WIDTH_NAME.search(key)) and not _NOT_WIDTH.search(key)


def _shrunk_int(key: str, value: int) -> int:
    if key in _LAYER_KEYS:
        return min(value, LAYERS)
    if key in _PER_BLOCK_KEYS or key.endswith("layers_per_block"):
        return min(value, 1)
    if key in _HEAD_KEYS or _HEADS_NAME.search(key):
        return min(value, HEADS)
    if key == "sample_size":  # also decides between positional-embedding variants (PixArt's 1024px conditions)
        return min(value, SIDE)
    if key in _HEAD_DIM_KEYS:
        return min(value, HEAD_DIM)
    if key in _WIDTH_KEYS:
        return min(value, WIDTH)
    if key in _FFN_KEYS or (_is_width(key) and _FFN_NAME.search(key)):
        return min(value, FFN)
    if _is_width(key):
        return min(value, WIDTH)
    return value


def _shrunk_list(key: str, value: list[Any]) -> list[Any]:
    if key in _CHANNEL_LISTS or _is_width(key):
        return [min(v, WIDTH) for v in value]
    if key in _PER_BLOCK_KEYS or key.endswith("layers_per_block"):
        return [min(v, 1) for v in value]
    if key in _LAYER_KEYS:
        return [min(v, LAYERS) for v in value]
    if key in _HEAD_KEYS or key in _HEAD_DIM_KEYS:  # per-level head counts must divide the level's 32 channels
        return [_pow2_at_most(v, 8) for v in value]
    return value


def _rope_axes(axes: list[int], head_dim: int) -> list[int]:
    """Rotary axes rescaled to sum to `head_dim`, each even (rotary pairs)."""
    total = sum(axes)
    scaled = [max(2, 2 * round(a * head_dim / total / 2)) for a in axes]
    scaled[-1] += head_dim - sum(scaled)
    return scaled


def _head_width(d: dict[str, Any]) -> int | None:
    """The attention head width a shrunk config implies: given, or the model width over the head count."""
    if isinstance(d.get("attention_head_dim"), int):
        return d["attention_head_dim"]
    width = next((d[k] for k in ("hidden_size", "dim", "model_dim", "inner_dim") if isinstance(d.get(k), int)), None)
    heads = next((d[k] for k in ("num_attention_heads", "n_heads", "num_heads") if isinstance(d.get(k), int)), None)
    return width // heads if width and heads else None


def tiny_config(name: str) -> dict[str, Any]:
    """The class's constructor defaults shrunk by the generic recipe, then its `OVERRIDES` entry."""
    import diffusers.models

    original = constructor_defaults(getattr(diffusers.models, name))
    d = dict(original)
    for key, value in original.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            d[key] = _shrunk_int(key, value)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            d[key] = type(value)(_shrunk_list(key, list(value)))
    heads, head_dim = original.get("num_attention_heads"), original.get("attention_head_dim")
    if isinstance(heads, int) and isinstance(head_dim, int):
        inner, tiny_inner = heads * head_dim, d["num_attention_heads"] * d["attention_head_dim"]
        for key, value in original.items():  # a width equal to the transformer's inner width stays equal to it
            if value == inner and key in _WIDTH_KEYS:
                d[key] = tiny_inner
    head_width = _head_width(d)
    for key in _ROPE_AXES & d.keys():
        if isinstance(d[key], (list, tuple)) and head_width:
            d[key] = type(d[key])(_rope_axes(list(d[key]), head_width))
    if name in OVERRIDES:
        OVERRIDES[name](d)
    return d


def tiny_model(name: str, seed: int = 0) -> Any:
    """The tiny model of class `name` with random weights, in eval mode."""
    import diffusers.models
    import torch

    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(diffusers.models, name)(**tiny_config(name))
    _randomize_constant_matrices(model)
    return model.eval()


# ---------------------------------------------------------------- inputs


def _config(model: Any) -> dict[str, Any]:
    return dict(getattr(model, "config", {}) or {})


def _first(config: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def _text_width(config: dict[str, Any]) -> int:
    keys = ("cross_attention_dim", "joint_attention_dim", "caption_channels", "text_embed_dim", "encoder_hid_dim",
            "text_dim", "context_dim", "cond_dim", "text_hidden_dim", "cap_feat_dim", "text_states_dim")  # fmt: skip
    return _first(config, keys, WIDTH)


def _pooled_width(config: dict[str, Any]) -> int:
    keys = ("pooled_projection_dim", "projection_class_embeddings_input_dim", "clip_embed_dim", "text_embed_dim")
    return _first(config, keys, WIDTH)


def _channels(config: dict[str, Any]) -> int:
    keys = ("encoder_in_channels", "in_channels", "input_channels", "latent_channels", "in_chans", "num_channels",
            "audio_channels")  # fmt: skip
    return _first(config, keys, 4)


def _latent_layouts(config: dict[str, Any]) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Candidate (layout, shape) of the latent a model takes, most common first."""
    c = _channels(config)
    yield "image", (BATCH, c, SIDE, SIDE)
    yield "video", (BATCH, c, FRAMES, SIDE, SIDE)
    yield "video", (BATCH, c, 2 * FRAMES + 1, SIDE, SIDE)  # causal video VAEs: 1 + 4k frames
    yield "frames-first", (BATCH, FRAMES, c, SIDE, SIDE)
    yield "tokens", (BATCH, (SIDE // 4) ** 2, c)
    yield "signal", (BATCH, c, 4 * SIDE)
    yield "image", (BATCH, c, 4 * SIDE, 4 * SIDE)  # autoencoders that downsample 32 or 64 times
    yield "video", (BATCH, c, 2 * FRAMES + 1, 4 * SIDE, 4 * SIDE)


_MAIN = ("hidden_states", "sample", "x", "latents", "z", "mel", "inputs_embeds", "z_latent", "xs")
_TIMESTEPS = ("timestep", "timesteps", "t", "timestep_r", "r_timestep", "timestep_ratio", "decoder_noise_time",
              "target_timestep")  # fmt: skip


def _axes(config: dict[str, Any]) -> int:
    """How many position axes the model's rotary ids have (time or text index first, then row and column)."""
    axes = next((config[k] for k in _ROPE_AXES if isinstance(config.get(k), (list, tuple))), (0, 0, 0))
    return len(axes)


def _positions(config: dict[str, Any], tokens: int) -> Any:
    """(tokens, axes) rotary ids of a packed latent: zeros, then row and column of each token on its square grid."""
    import torch

    side = round(tokens**0.5)
    rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    grid = torch.stack([rows, cols], dim=-1).reshape(-1, 2)
    return torch.cat([torch.zeros(tokens, _axes(config) - 2, dtype=grid.dtype), grid], dim=1).float()


def _condition_image(config: dict[str, Any], latent: Any, generator: Any) -> Any:
    """A ControlNet's conditioning: an image at the resolution its conditioning encoder downsamples to the
    latent's (UNet ControlNets), else a tensor like the latent (transformer ControlNets)."""
    import torch

    levels = config.get("conditioning_embedding_out_channels") or config.get("ctrl_conditioning_embedding_out_channels")
    if not levels:
        return torch.randn(latent.shape, generator=generator)
    scale = 2 ** (len(levels) - 1)
    channels = config.get("conditioning_channels") or config.get("ctrl_conditioning_channels") or 3
    shape = (*latent.shape[:-3], channels, latent.shape[-2] * scale, latent.shape[-1] * scale)
    return torch.randn(shape, generator=generator)


def _named(name: str, model: Any, layout: str, latent: Any, generator: Any) -> Any:
    """A value for the forward parameter `name`, or `inspect.Parameter.empty` if the name is unknown."""
    import torch

    config = _config(model)
    if name in _TIMESTEPS:
        return torch.tensor([0.3, 0.6])
    if name in ("encoder_hidden_states", "cap_feats", "encoder_hidden_states_t5", "clip_text", "text_bth"):
        return torch.randn(BATCH, TEXT, _text_width(config), generator=generator)
    if name in ("encoder_attention_mask", "encoder_mask", "text_embedding_mask", "encoder_hidden_states_mask"):
        return torch.ones(BATCH, TEXT, dtype=torch.bool)
    if name in ("pooled_projections", "pooled_embeds", "pooled_text_emb", "clip_text_pooled", "global_hidden_states"):
        return torch.randn(BATCH, _pooled_width(config), generator=generator)
    if name == "img_ids" and layout == "tokens":
        return _positions(config, latent.shape[1])
    if name == "txt_ids" and layout == "tokens":
        return torch.zeros(TEXT, _axes(config))
    if name == "img_shapes" and layout == "tokens":  # (frames, rows, columns) of each sample's packed latent
        side = round(latent.shape[1] ** 0.5)
        return [[(1, side, side)]] * BATCH
    if name in ("original_size", "target_size"):
        return torch.tensor([[8.0 * SIDE, 8.0 * SIDE]] * BATCH)
    if name == "crop_coords":
        return torch.zeros(BATCH, 2)
    if name == "added_time_ids":  # Stable Video Diffusion: fps, motion bucket, noise augmentation
        return torch.tensor([[6.0, 127.0, 0.02]] * BATCH)
    if name == "fps":
        return torch.tensor([8.0] * BATCH)
    if name == "image_latents":
        return torch.randn(latent.shape, generator=generator)
    if name == "image_embeds" and "image_embed_dim" in config:
        return torch.randn(BATCH, config["image_embed_dim"], generator=generator)
    if name == "guidance" and config.get("guidance_embeds"):
        return torch.tensor([3.5, 3.5])
    if name in ("controlnet_cond", "controls_latents", "control_context"):
        return _condition_image(config, latent, generator)
    if name == "class_labels" and (config.get("num_class_embeds") or config.get("num_embeds_ada_norm")):
        return torch.tensor([1, 3])
    if name == "generator":  # a sampling decoder (ConsistencyDecoderVAE) draws its noise from it on CPU
        return torch.Generator().manual_seed(0)
    if name == "text_lens":
        return torch.full((BATCH,), TEXT)
    return inspect.Parameter.empty


def _candidates(model: Any) -> Iterator[dict[str, Any]]:
    """Input batches to try on CPU: each latent layout, with every parameter we can make a value for, then
    with only the required ones."""
    import torch

    params = inspect.signature(model.forward).parameters
    main = next((n for n in params if n in _MAIN), None)
    for layout, shape in _latent_layouts(_config(model)):
        generator = torch.Generator().manual_seed(0)
        latent = torch.randn(shape, generator=generator)
        full: dict[str, Any] = {main: latent} if main else {}
        required: dict[str, Any] = dict(full)
        complete = True
        for name, p in params.items():
            if name in full or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            value = _named(name, model, layout, latent, generator)
            if value is inspect.Parameter.empty:
                complete = complete and p.default is not inspect.Parameter.empty
                continue
            full[name] = value
            if p.default is inspect.Parameter.empty:
                required[name] = value
        if complete:
            yield full
            if required != full:
                yield required


def reference(model: Any) -> tuple[dict[str, Any], list[Any]]:
    """The first candidate batch the CPU forward takes, with its output tensors; else the error of the candidate
    that got deepest into the model (the others usually fail at once on the latent's layout)."""
    import torch

    errors: list[Exception] = []
    for batch in _candidates(model):
        try:
            with torch.no_grad():
                outputs = output_tensors(model(**batch))
        except Exception as e:
            errors.append(e)
            continue
        if not outputs:  # nothing to compare (MotionAdapter's forward is a placeholder)
            raise ValueError("the forward returns no tensor")
        return batch, outputs
    if not errors:
        raise ValueError("no input candidate: the forward takes parameters this sweep cannot make")
    raise max(errors, key=_depth)


def _depth(error: BaseException) -> int:
    """How deep into the model a candidate got before failing: the frames of its traceback."""
    return len(traceback.extract_tb(error.__traceback__))


# ---------------------------------------------------------------- comparison


def output_tensors(out: Any) -> list[Any]:
    """Every tensor of a model's output, in order (nested tuples and output classes flattened)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in output_tensors(item)]
    return []


def _to(batch: dict[str, Any], device: str) -> dict[str, Any]:
    """The batch on `device`; a CPU generator stays on CPU, reseeded so each run draws the same noise."""
    import torch

    moved = {}
    for key, value in batch.items():
        if isinstance(value, torch.Generator):
            value.manual_seed(0)
        moved[key] = value.to(device) if hasattr(value, "to") else value
    return moved


def compare(outs: list[Any], refs: list[Any]) -> tuple[float, bool]:
    """Largest absolute difference over all output tensors, and whether all are within the tolerance."""
    import torch

    if len(outs) != len(refs):
        return float("inf"), False
    worst, ok = 0.0, True
    for out, ref in zip(outs, refs):
        out, ref = out.detach().cpu().float(), ref.detach().float()
        if out.shape != ref.shape:
            return float("inf"), False
        if ref.numel():
            worst = max(worst, float((out - ref).abs().max()))
        ok = ok and torch.allclose(out, ref, rtol=RTOL, atol=ATOL, equal_nan=True)
    return worst, ok


def _describe(value: Any) -> Any:
    import torch

    return "CPU generator, seed 0" if isinstance(value, torch.Generator) else value


def run_one(name: str) -> dict[str, Any]:
    """One model class on CPU then neuron; a record of what happened (never raises)."""
    import torch

    import torch_neuronx

    record: dict[str, Any] = {"family": FAMILY, "model_type": name, "architecture": name}
    start = time.perf_counter()
    try:
        model = tiny_model(name)
        record["params"] = sum(p.numel() for p in model.parameters())
        batch, refs = reference(model)
        record["inputs"] = {k: list(v.shape) if hasattr(v, "shape") else _describe(v) for k, v in batch.items()}
    except Exception as e:
        record.update(status="cpu-error", cause=_cause(e), seconds=round(time.perf_counter() - start, 1))
        return record
    torch_neuronx.reset_metrics()
    neuron_start = time.perf_counter()
    try:
        model.to("neuron")
        with torch.no_grad():
            outs = output_tensors(model(**_to(batch, "neuron")))
        record["max_diff"], ok = compare(outs, refs)
        if not ok:
            ok = _float64_arbiter(name, batch, refs, outs, record)
        record["status"] = "pass" if ok else "fail"
        if not ok:
            record["cause"] = f"output differs by {record['max_diff']:.2e}"
    except Exception as e:
        record.update(status="error", cause=_cause(e))
    return neuron_counters(record, start, neuron_start)


def _float64_arbiter(
    name: str, batch: dict[str, Any], refs: list[Any], outs: list[Any], record: dict[str, Any]
) -> bool:
    """An output that misses the tolerance is judged against the same model run on CPU in float64, the exact
    answer: where CPU's own float32 output is that far from it too (a deep tiny VAE with random weights amplifies
    rounding), neuron passes if it is no farther from float64 than twice CPU float32 is, plus the tolerance."""
    import torch

    model = tiny_model(name).double()
    wide = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in batch.items()}
    with torch.no_grad():
        exact = output_tensors(model(**_to(wide, "cpu")))

    def distance(tensors: list[Any]) -> float:
        return max(float((t.detach().cpu().double() - e).abs().max()) for t, e in zip(tensors, exact) if e.numel())

    neuron, cpu = distance(outs), distance(refs)
    scale = max(float(e.abs().max()) for e in exact if e.numel())
    record["float64"] = {"neuron": neuron, "cpu_float32": cpu, "scale": scale}
    # only where CPU float32 still approximates float64: a quantizer that rounds to other levels makes both far
    if cpu <= MEANINGFUL * scale and neuron <= 2 * cpu + ATOL:
        record["judged_by"] = "float64"
        return True
    return False


# ---------------------------------------------------------------- records and report


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [r for r in results if r["status"] != "cpu-error"]
    passed = [r for r in ran if r["status"] == "pass"]
    return {
        "architectures": len(results),
        "run_on_cpu": len(ran),
        "pass_on_neuron": len(passed),
        "pass_rate": len(passed) / len(ran) if ran else 0.0,
        "fully_native": sum(1 for r in passed if not r.get("fallback_calls")),
    }


def section(results: list[dict[str, Any]], partial: bool = False) -> str:
    """The Diffusers section of the coverage page (Markdown)."""
    s = summary(results)
    out = io.StringIO()
    w = out.write
    w(f"## {TITLE}\n\n")
    if partial:
        w(f"**Partial: {len(results)} of {len(model_types())} model classes were run.** ")
    w(f"Records: `docs/{records_path().name}` (`python -m tools.hf_sweep --family {FAMILY}`; `--fast`: the CI slice, ")
    w("`tests/test_hf_diffusers.py`). Every model class `diffusers.models` exports (containers of other models, ")
    w("such as `MultiControlNetModel`, left out) is built from its constructor's defaults shrunk by the generic ")
    w(f"recipe of `tools/hf_diffusers.py` ({LAYERS} layers, 1 block per level, {HEADS} heads of {HEAD_DIM}, ")
    w(f"widths and every convolutional level {WIDTH} channels, rotary axes fitted to the head) plus per-class ")
    w("overrides; ")
    w("random weights (constant matrices randomized, since Diffusers zero-initializes output projections), float32, ")
    w(f"eval mode. Inputs come from the forward signature: batch {BATCH}, {SIDE}x{SIDE} latents ({FRAMES} frames for ")
    w(f"video), {TEXT} text tokens; the latent layout is the first candidate the CPU forward accepts. Every tensor ")
    w(f'of the CPU output is the reference; after `model.to("neuron")` each must match it (rtol = atol = {RTOL:g}). ')
    w("An output that misses it is checked against the model run on CPU in float64: where CPU's own float32 output ")
    w("is as far from float64 (deep tiny VAEs with random weights amplify rounding), neuron passes if it is no ")
    w("farther from float64 than twice CPU float32 is, plus the tolerance (`pass (float64 check)`).\n\n")
    w(f"**{s['pass_on_neuron']} of {s['run_on_cpu']} model classes that run on CPU pass on neuron ")
    w(f"({100 * s['pass_rate']:.1f}%)**; {s['architectures'] - s['run_on_cpu']} of {s['architectures']} do not ")
    w(f"build or run forward on CPU with the tiny recipe (listed below). {s['fully_native']} of the passing classes ")
    w("ran without any CPU fallback.\n\n")
    columns = ["class", "result", "max diff", "params", "inputs", "fallback calls", "top fallback ops", "s", "cause"]
    w("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|\n")
    for r in results:
        if r["status"] == "cpu-error":
            continue
        top = ", ".join(f"{op.removeprefix('aten.')} ({n})" for op, n in Counter(r.get("fallbacks", {})).most_common(3))
        diff = f"{r['max_diff']:.1e}" if isinstance(r.get("max_diff"), float) else ""
        shapes = ", ".join(f"{k} {v}" for k, v in r.get("inputs", {}).items())
        cause = r.get("cause", "")
        if r["model_type"] in DIAGNOSES:
            cause = f"{cause[:200]} ... Diagnosis: {DIAGNOSES[r['model_type']]}"
        result = "pass (float64 check)" if r.get("judged_by") == "float64" else r["status"]
        cells = [r["model_type"], result, diff, r.get("params", ""), shapes, r.get("fallback_calls", ""), top]
        cells += [r.get("seconds", ""), cause]
        w("| " + " | ".join(_cell(c) for c in cells) + " |\n")
    failed_cpu = [r for r in results if r["status"] == "cpu-error"]
    if failed_cpu:
        w("\n### Diffusers: not counted, the tiny model does not run on CPU\n\n| class | cause |\n|---|---|\n")
        for r in failed_cpu:
            w(f"| {r['model_type']} | {_cell(r.get('cause', ''))[:400]} |\n")
    return out.getvalue()


@override("Transformer2DModel", "DualTransformer2DModel", "TransformerTemporalModel", "DreamLiteTransformer2DModel")
def _continuous_input(d: dict[str, Any]) -> None:
    """Transformer2DModel and kin pick their input kind from which size is set: latents of 4 channels."""
    d.update(in_channels=4, norm_num_groups=2)


@override("HunyuanDiT2DModel", "HunyuanDiT2DControlNetModel", "EasyAnimateTransformer3DModel")
def _patched_latent(d: dict[str, Any]) -> None:
    d.update(in_channels=4, patch_size=2)
    if "out_channels" in d:
        d["out_channels"] = 4


@override("LatteTransformer3DModel")
def _latte(d: dict[str, Any]) -> None:
    d.update(in_channels=4, out_channels=8, patch_size=2, cross_attention_dim=32, caption_channels=32)
    d.update(num_embeds_ada_norm=1000, norm_type="ada_norm_single")


@override("LuminaNextDiT2DModel")
def _lumina_next(d: dict[str, Any]) -> None:
    d["num_kv_heads"] = d["num_attention_heads"]


@override("UNetSpatioTemporalConditionModel")
def _stable_video(d: dict[str, Any]) -> None:
    """Its added time ids are three values, each embedded `addition_time_embed_dim` wide."""
    d["projection_class_embeddings_input_dim"] = 3 * d["addition_time_embed_dim"]


@override("WanVACETransformer3DModel")
def _wan_vace(d: dict[str, Any]) -> None:
    d["vace_layers"] = [0]
