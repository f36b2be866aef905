"""The architecture sweep of Transformers' other model families: encoders, encoder-decoders,
vision, speech and vision-language models, built tiny, run on CPU and on neuron, compared, and
written up beside the causal-LM section in `docs/model_coverage.md`:

    python -m tools.hf_sweep --family encoders|seq2seq|vision|speech|vlm|all [--fast] [--only a,b]

Which architectures each family holds (`model_types`; each is run with one head class, its main head):

- encoders: every entry of `MODEL_FOR_MASKED_LM_MAPPING_NAMES` (head: masked LM), and every entry of
  `MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES` that has neither a masked-LM nor a causal-LM entry
  (head: sequence classification). A causal LM's sequence-classification head is its decoder under a
  pooled linear layer, which the causal sweep already checks; a masked LM is the bidirectional encoder
  that sweep never ran, so BERT-like models are here even when their decoder variant is there;
- seq2seq: `MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES` less the entries of the speech-to-text mapping
  (those take audio: speech family); text inputs only;
- vision: `MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES`;
- speech: `MODEL_FOR_CTC_MAPPING_NAMES` and `MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES`;
- vlm: `MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES` and `MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES`.

Per architecture (`run_one`): the tiny model (`tiny_models.py` with its media recipe) is built on
CPU with a fixed seed in eval mode; its forward on CPU is the reference, and after
`model.to("neuron")` the head's main output (logits; CLIP-style models `logits_per_image`) and the
base model's first output must match (rtol = atol = 1e-4). Generative heads (seq2seq, speech-to-text,
image-text-to-text) also generate 4 greedy tokens with the dynamic cache, and with the static cache
where generation with it runs on CPU; tokens must match (or differ first at a CPU tie). Then one
training step: the model rebuilt in training mode with every random setting zeroed (as
`hf_training.py`), the head's own loss for labels, one AdamW step; the loss, first-step gradients
and updated parameters must match CPU's with `hf_training`'s tolerances. Architectures whose tiny
model does not build or run forward on CPU are listed apart and not counted. Fallback calls are
recorded as in the causal sweep (the CPU fallback stays on).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from . import hf_training
from .hf_sweep import NEW_TOKENS, ROOT, _cause, _cell, _generate, _same_tokens, neuron_counters
from .tiny_models import VOCAB, tiny_config_dict

FAMILIES = ("encoders", "seq2seq", "vision", "speech", "vlm")
TITLES = {
    "encoders": "Encoders: masked LM and sequence classification",
    "seq2seq": "Encoder-decoders: sequence-to-sequence LM",
    "vision": "Vision: image classification",
    "speech": "Speech: CTC and speech-to-text",
    "vlm": "Vision-language: zero-shot image classification and image-text-to-text",
}
# The CI slice of each family (`--fast`, tests/test_hf_families.py): diverse and quick.
# encoders: BERT, DeBERTa-v2 (disentangled relative attention); seq2seq: T5 (relative buckets, static
# cache), BART (learned positions); vision: ViT, ConvNeXt (convolutions, layer norm over channels);
# speech: Wav2Vec2 (convolutional features, weight-normed positional convolution, CTC), Whisper
# (log-mel encoder-decoder, static cache); vlm: CLIP (contrastive), LLaVA (image tokens in a prompt).
FAST = {
    "encoders": ["bert", "deberta-v2"],
    "seq2seq": ["t5", "bart"],
    "vision": ["vit", "convnext"],
    "speech": ["wav2vec2", "whisper"],
    "vlm": ["clip", "llava"],
}
RTOL = ATOL = 1e-4
LENGTH = 8  # text tokens per sequence
BATCH = 2
SAMPLES = 8000  # raw audio samples (half a second at 16 kHz)
GENERATIVE = {"seq2seq", "speech", "vlm"}


def records_path(family: str) -> Path:
    return ROOT / "docs" / f"model_coverage_{family}.json"


def _mappings(family: str) -> list[tuple[str, dict[str, Any]]]:
    """(head name, mapping names) of a family, in the order a model type takes its head."""
    from transformers.models.auto import modeling_auto as m

    return {
        "encoders": [
            ("masked-lm", m.MODEL_FOR_MASKED_LM_MAPPING_NAMES),
            ("sequence-classification", m.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES),
        ],
        "seq2seq": [("seq2seq-lm", m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)],
        "vision": [("image-classification", m.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)],
        "speech": [
            ("ctc", m.MODEL_FOR_CTC_MAPPING_NAMES),
            ("speech-seq2seq", m.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES),
        ],
        "vlm": [
            ("zero-shot-image-classification", m.MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES),
            ("image-text-to-text", m.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES),
        ],
    }[family]


def model_types(family: str) -> list[str]:
    """The family's architectures (the rule in the module docstring)."""
    from transformers.models.auto import modeling_auto as m

    causal = set(m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    masked = set(m.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    speech = set(m.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
    chosen: list[str] = []
    for head, names in _mappings(family):
        for model_type in names:
            if model_type in chosen:
                continue
            if head == "sequence-classification" and (model_type in causal or model_type in masked):
                continue
            if family == "seq2seq" and model_type in speech:
                continue
            chosen.append(model_type)
    return chosen


def head_of(family: str, model_type: str) -> tuple[str, Any]:
    """(head name, class) the family runs `model_type` with."""
    import transformers

    for head, names in _mappings(family):
        if model_type in names:
            name = names[model_type]
            name = name[0] if isinstance(name, (tuple, list)) else name
            return head, getattr(transformers, name)
    raise KeyError(f"{model_type} is not in the {family} family")


def tiny_model(family: str, model_type: str, train: bool = False, seed: int = 0) -> tuple[str, Any]:
    """(head name, tiny random-weight model of its head class), eval mode or deterministic training mode."""
    import torch
    from transformers import CONFIG_MAPPING

    from .tiny_models import _randomize_constant_matrices

    head, cls = head_of(family, model_type)
    d = tiny_config_dict(model_type, train, media=True)
    d.pop("model_type", None)
    d.pop("transformers_version", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = CONFIG_MAPPING[model_type].from_dict(d)
        wanted = cls.config_class
        parts = [v for v in vars(config).values() if isinstance(v, wanted)] if wanted else []
        if wanted is not None and not isinstance(config, wanted) and parts:
            config = parts[0]
        torch.manual_seed(seed)
        model = cls._from_config(config)
    if hasattr(model, "set_default_language"):  # X-MOD routes through a per-language adapter
        model.set_default_language(config.languages[0])
    _randomize_constant_matrices(model)
    return head, model.train(train)


# ---------------------------------------------------------------- inputs


def _ids(vocab: int, length: int = LENGTH, seed: int = 0, batch: int = BATCH) -> Any:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, max(4, min(vocab, VOCAB)), (batch, length), generator=generator)


def _text_vocab(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "vocab_size", None) or VOCAB)


def _pixels(model: Any, seed: int = 1) -> Any:
    """Pixel values at the vision config's image size and channels."""
    import torch

    config = model.config
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None) or getattr(config, "image_size", None) or 64
    size = size if isinstance(size, (list, tuple)) else (size, size)
    channels = getattr(vision, "num_channels", None) or 3
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, channels, size[0], size[1], generator=generator)


def _patches(model: Any, grid: int = 4) -> dict[str, Any]:
    """Pre-patchified images (SigLIP 2's native-resolution input): a grid x grid patch image each."""
    import torch

    vision = getattr(model.config, "vision_config", None) or model.config
    patch, channels = vision.patch_size, getattr(vision, "num_channels", 3)
    generator = torch.Generator().manual_seed(1)
    return {
        "pixel_values": torch.randn(BATCH, grid * grid, channels * patch * patch, generator=generator),
        "pixel_attention_mask": torch.ones(BATCH, grid * grid, dtype=torch.long),
        "spatial_shapes": torch.tensor([[grid, grid]] * BATCH),
    }


def _signature(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _audio(model: Any, seed: int = 2) -> dict[str, Any]:
    """Raw waveform (`input_values`) or log-mel features (`input_features`), whichever the model takes."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    if "input_values" in _signature(model):
        return {"input_values": torch.randn(BATCH, SAMPLES, generator=generator)}
    return {"input_features": torch.randn(BATCH, *_feature_shapes(model)[0], generator=generator)}


def _feature_shapes(model: Any) -> list[tuple[int, int]]:
    """Candidate (dim 1, dim 2) shapes of log-mel features: mel bins (or stacked pairs of frames, as
    SeamlessM4T's extractor gives) channels first (Whisper) or time first (Speech2Text)."""
    config = model.config
    audio = getattr(config, "audio_config", None) or getattr(config, "encoder_config", None) or config
    keys = ("num_mel_bins", "feature_size", "input_feat_per_channel", "n_mels", "input_dim")
    bins = next((getattr(audio, k) for k in keys if isinstance(getattr(audio, k, None), int)), 80)
    positions = getattr(audio, "max_source_positions", None)
    frames = 2 * positions if isinstance(positions, int) and positions <= 1500 else 64
    shapes = [(bins, frames), (frames, bins), (frames, 2 * bins)]
    return shapes + [(frames, k) for k in (80, 128, 160) if (frames, k) not in shapes]


def _feature_layout(model: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """The first feature shape a CPU forward takes (else the first)."""
    import torch

    generator = torch.Generator().manual_seed(2)
    for shape in _feature_shapes(model):
        candidate = dict(batch, input_features=torch.randn(BATCH, *shape, generator=generator))
        if "input_ids" in batch:
            candidate = _media_prompt(model, candidate, "audio")
        try:
            with torch.no_grad():
                model(**candidate)
            return candidate
        except Exception:
            continue
    return batch


def _media_prompt(model: Any, batch: dict[str, Any], kind: str) -> dict[str, Any]:
    """`batch` (pixel values or audio features) with a prompt: as many image or audio tokens as the
    model's features of it (found on CPU), then text."""
    import torch

    config = model.config
    token = getattr(config, f"{kind}_token_id", None) or getattr(config, f"{kind}_token_index", None)
    batch = dict(batch)
    count = 0
    if token is not None:
        name = "get_image_features" if kind == "image" else "get_audio_features"
        getter = getattr(model, name, None) or getattr(getattr(model, "model", None), name)
        keys = ("pixel_values", "input_features", "input_values", "image_grid_thw")
        batch, features = _first_that_runs(getter, [dict(batch, **c) for c in _media_variants(getter, batch)], keys)
        for name in ("pooler_output", "last_hidden_state"):
            if getattr(features, name, None) is not None:
                features = getattr(features, name)
                break
        pieces = list(features) if isinstance(features, (tuple, list)) else [features]
        count = sum(f.reshape(-1, f.shape[-1]).shape[0] for f in pieces) // BATCH  # features per item
    text = _ids(_text_vocab(config))
    if token is not None:
        text = torch.where(text == token, torch.full_like(text, 3), text)
        text = torch.cat([torch.full((BATCH, count), token, dtype=text.dtype), text], dim=1)
    batch["input_ids"] = text
    batch["attention_mask"] = torch.ones_like(text)
    if token is not None and "mm_token_type_ids" in _signature(model):  # Qwen-VL: which tokens are image
        batch["mm_token_type_ids"] = (text == token).long()
    names = _signature(model)
    if "decoder_input_ids" in names and "input_ids" not in names:  # vision-encoder-decoder: text is the decoder's
        batch["decoder_input_ids"] = batch.pop("input_ids")
        batch.pop("attention_mask")
    elif "decoder_input_ids" in names:  # an encoder-decoder VLM (T5Gemma 2, UDOP): a decoder prompt too
        batch["decoder_input_ids"] = _ids(_text_vocab(config), 4, seed=3)
    return batch


def inputs(family: str, head: str, model: Any) -> dict[str, Any]:
    """The forward inputs of the head (no labels)."""
    import torch

    config = model.config
    names = _signature(model)
    if "spatial_shapes" in names:
        batch = _patches(model)
        if head == "zero-shot-image-classification":
            ids = _ids(_text_vocab(config))
            batch.update(input_ids=ids, attention_mask=torch.ones_like(ids))
        return batch
    if family == "vision" and "pixel_values" in names and "input_ids" in names:  # ShieldGemma 2: a VLM
        return _vlm_inputs(model)
    if family == "vision" and "pixel_values" in names:
        return {"pixel_values": _pixels(model)}
    if family == "vision":  # ImageGPT classifies sequences of colour-cluster ids
        return {"input_ids": _ids(_text_vocab(config))}
    if family == "speech":
        batch = _audio(model)
        if "input_ids" in names and "input_features" in batch:  # an audio LM: a prompt with audio tokens
            batch["input_ids"] = None
        if head == "speech-seq2seq" and "decoder_input_ids" in names:
            batch["decoder_input_ids"] = _ids(_text_vocab(config), 4, seed=3)
        if "input_features" in batch:
            batch = _feature_layout(model, batch)
        if batch.get("input_ids", 0) is None:
            batch = _media_prompt(model, {k: v for k, v in batch.items() if v is not None}, "audio")
        return batch
    if head == "zero-shot-image-classification":
        ids = _ids(_text_vocab(config))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": _pixels(model)}
    if head == "image-text-to-text":
        return _vlm_inputs(model)
    key = "inputs" if "input_ids" not in names and "inputs" in names else "input_ids"
    ids = _ids(_text_vocab(config))
    batch = {key: ids}
    if "attention_mask" in names:
        batch["attention_mask"] = torch.ones_like(ids)
    if family == "seq2seq" and "decoder_input_ids" in names:
        batch["decoder_input_ids"] = _ids(_text_vocab(config), 4, seed=3)
    elif getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in names:
        # an encoder-decoder's classification head pools the decoder at the end-of-sequence token
        eos = getattr(config, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, list) else eos
        if isinstance(eos, int):
            ids[ids == eos] = 3
            ids[:, -1] = eos
        batch["decoder_input_ids"] = ids
    return batch


def _media_variants(getter: Any, batch: dict[str, Any]) -> list[dict[str, Any]]:
    """Layouts to try for images: as given, one image per sample in a 5-D stack (Idefics, LLaVA-NeXT's
    crops), each with its (height, width) where the model asks for `image_sizes`."""
    import torch

    pixels = batch.get("pixel_values")
    if pixels is None or pixels.dim() != 4:
        return [{}]
    variants: list[dict[str, Any]] = [{}, {"pixel_values": pixels.unsqueeze(1)}]
    if "image_sizes" in inspect.signature(getter).parameters:
        sizes = torch.tensor([list(pixels.shape[-2:])] * pixels.shape[0])
        variants = [dict(v, image_sizes=sizes) for v in variants]
    return variants


def _first_that_runs(getter: Any, candidates: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[dict, Any]:
    """The first candidate batch whose media `getter` takes (its features), else the first one's error."""
    import torch

    error: Exception | None = None
    for batch in candidates:
        media = {k: v for k, v in batch.items() if k in (*keys, "image_sizes")}
        try:
            with torch.no_grad():
                return batch, getter(**media)
        except Exception as e:
            error = error or e
    assert error is not None
    raise error


def _vlm_inputs(model: Any) -> dict[str, Any]:
    """Text with an image: as many image tokens as the model's image features, then text. Qwen-VL-style
    models take each image as flattened patches with its (frames, rows, columns) grid."""
    import torch

    getter = getattr(model, "get_image_features", None) or getattr(
        getattr(model, "model", None), "get_image_features", None
    )
    if getter is None or "image_grid_thw" not in inspect.signature(getter).parameters:
        return _media_prompt(model, {"pixel_values": _pixels(model)}, "image")
    vision = getattr(model.config, "vision_config", None) or model.config
    patch = getattr(vision, "patch_size", 14)
    temporal = getattr(vision, "temporal_patch_size", 2) or 1
    channels = getattr(vision, "in_channels", None) or getattr(vision, "num_channels", 3)
    merge = getattr(vision, "spatial_merge_size", 2) or 1
    side = 2 * merge
    generator = torch.Generator().manual_seed(1)
    pixels = torch.randn(BATCH * side * side, channels * temporal * patch * patch, generator=generator)
    grid = torch.tensor([[1, side, side]] * BATCH)
    return _media_prompt(model, {"pixel_values": pixels, "image_grid_thw": grid}, "image")


def labels(family: str, head: str, model: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """Inputs with labels for the head's own loss."""
    import torch

    config = model.config
    out = dict(batch)
    if head == "masked-lm":
        key = "input_ids" if "input_ids" in batch else "inputs"
        out["labels"] = batch[key]
    elif head in ("sequence-classification", "image-classification"):
        classes = int(getattr(config, "num_labels", 2) or 2)
        out["labels"] = torch.arange(BATCH) % classes
    elif head == "zero-shot-image-classification":
        out["return_loss"] = True
    elif head in ("seq2seq-lm", "speech-seq2seq") and "decoder_input_ids" in out:
        # labels of the decoder inputs' length; the inputs stay, since FSMT does not shift labels into them
        out["labels"] = out["decoder_input_ids"]
    elif head in ("seq2seq-lm", "speech-seq2seq"):  # a decoder-only audio LM in the mapping: next tokens
        out["labels"] = out["input_ids"]
    elif head == "ctc":
        vocab = int(getattr(config, "vocab_size", 32) or 32)
        generator = torch.Generator().manual_seed(4)
        out["labels"] = torch.randint(1, max(2, vocab), (BATCH, 3), generator=generator)
        if "attention_mask" in _signature(model) and "attention_mask" not in out:
            # Parakeet's and LASR's CTC loss takes the input lengths from the mask: all frames valid
            main = out.get("input_values", out.get("input_features"))
            length = main.shape[1] if "input_values" in out or main.shape[2] in (80, 128, 160) else main.shape[2]
            out["attention_mask"] = torch.ones(BATCH, length, dtype=torch.long)
    elif head == "image-text-to-text":
        out["labels"] = batch["decoder_input_ids"] if "decoder_input_ids" in batch else batch["input_ids"]
    return out


# ---------------------------------------------------------------- comparison


def _to(batch: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}


def main_output(head: str, out: Any) -> Any:
    if head == "zero-shot-image-classification":
        return out.logits_per_image
    if getattr(out, "logits", None) is None and head == "image-classification":
        return out.last_hidden_state  # PP-LCNet's classifier returns its class scores under that name
    return out.logits


def _first_tensor(out: Any) -> Any:
    import torch

    values = out.to_tuple() if hasattr(out, "to_tuple") else out if isinstance(out, (tuple, list)) else (out,)
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
            return value[0]
    raise ValueError("the base model returned no tensor")


def _base(model: Any) -> Any | None:
    base = getattr(model, "base_model", model)
    return None if base is model else base


def _base_inputs(base: Any, batch: dict[str, Any]) -> dict[str, Any]:
    names = set(inspect.signature(base.forward).parameters)
    main = next(iter(batch))
    if main not in names and "inputs" in names:  # Perceiver's base model takes any modality as `inputs`
        batch = {("inputs" if k == main else k): v for k, v in batch.items()}
    if any(p.kind == p.VAR_KEYWORD for p in inspect.signature(base.forward).parameters.values()):
        return dict(batch)
    return {k: v for k, v in batch.items() if k in names}


def _diff(a: Any, b: Any) -> tuple[float, bool]:
    import torch

    a, b = a.detach().float().cpu(), b.detach().float()
    if a.shape != b.shape:
        return float("inf"), False
    return float((a - b).abs().max()) if a.numel() else 0.0, torch.allclose(a, b, rtol=RTOL, atol=ATOL)


def _gen(model: Any, batch: dict[str, Any], cache: str | None) -> tuple[Any, list[Any]]:
    """Greedy generation from the forward inputs (decoder inputs dropped): sequences and logits."""
    import torch

    kwargs = {k: v for k, v in batch.items() if not k.startswith("decoder_")}
    main = kwargs.pop("input_ids", None)
    if main is None:
        # audio models: the features are the prompt; `_generate` wants ids, so call generate directly
        cache_kwargs: dict[str, Any] = {"cache_implementation": cache} if cache else {}
        with torch.no_grad():
            out = model.generate(
                **kwargs,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                **cache_kwargs,
            )
        return out.sequences, list(out.logits)
    return _generate_with(model, main, kwargs, cache)


def _generate_with(model: Any, ids: Any, extra: dict[str, Any], cache: str | None) -> tuple[Any, list[Any]]:
    original = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        kwargs.update({k: v for k, v in extra.items() if k != "attention_mask"})
        if "attention_mask" in extra:
            kwargs["attention_mask"] = extra["attention_mask"]
        return original(*args, **kwargs)

    model.generate = generate
    try:
        return _generate(model, ids, cache)
    finally:
        del model.generate


def _tokens(ref: tuple[Any, list[Any]] | None, model: Any, batch: dict[str, Any], cache: str | None) -> str:
    if ref is None:
        return "n/a (does not generate on CPU)"
    try:
        ok, note = _same_tokens(ref, _gen(model, batch, cache))
    except Exception as e:
        return f"error: {_cause(e)}"
    return ("same" + (f" ({note})" if note else "")) if ok else f"differ: {note}"


def run_one(family: str, model_type: str) -> dict[str, Any]:
    """One architecture of `family` on CPU then neuron, inference and one training step; a record (never raises).

    A failure is run once more with CPU's tied top-k values in index order, as neuron's topk returns them
    (`IndexOrderedTopk`); if CPU's own order of ties changed some topk call and neuron then matches, the
    architecture passes, judged by "index-ordered topk ties", with the first run's cause kept."""
    from .topk_ties import IndexOrderedTopk

    record = _run(family, model_type, contextlib.nullcontext())
    if record["status"] != "fail":
        return record
    ties = IndexOrderedTopk()
    rerun = _run(family, model_type, ties)
    if not ties.changed or rerun["status"] != "pass":
        return record
    rerun.update(judged_by="index-ordered topk ties", topk_calls_changed=ties.changed, first_cause=record["cause"])
    rerun["seconds"] = round(rerun["seconds"] + record["seconds"], 1)
    return rerun


def _run(family: str, model_type: str, reference: contextlib.AbstractContextManager) -> dict[str, Any]:
    """`run_one`'s single run, CPU's reference computed under `reference`."""
    import torch

    import torch_neuronx

    record: dict[str, Any] = {"family": family, "model_type": model_type}
    start = time.perf_counter()
    generative = family in GENERATIVE
    try:
        head, model = tiny_model(family, model_type)
        record.update(head=head, architecture=type(model).__name__)
        generative = generative and hasattr(model, "generate") and head not in ("ctc", "zero-shot-image-classification")
        record["params"] = sum(p.numel() for p in model.parameters())
        batch = inputs(family, head, model)
        with torch.no_grad(), reference:
            ref = main_output(head, model(**batch))
            base = _base(model)
            base_ref = _first_tensor(base(**_base_inputs(base, batch))) if base is not None else None
    except Exception as e:
        record.update(status="cpu-error", cause=_cause(e), seconds=round(time.perf_counter() - start, 1))
        return record
    ref_gen = ref_static = None
    if generative:
        try:
            with reference:
                ref_gen = _gen(model, batch, None)
        except Exception as e:
            record["greedy"] = f"n/a (not on CPU: {_cause(e)[:160]})"
            generative = False
    if generative:
        try:
            with reference:
                ref_static = _gen(model, batch, "static")
        except Exception as e:
            record["static"] = f"n/a (not on CPU: {_cause(e)[:120]})"
    with reference:
        train_cpu = _train_reference(family, model_type, record)
    torch_neuronx.reset_metrics()
    neuron_start = time.perf_counter()
    problems = []
    try:
        model.to("neuron")
        dev_batch = _to(batch, "neuron")
        with torch.no_grad():
            out = main_output(head, model(**dev_batch))
            record["max_diff"], ok = _diff(out, ref)
            if not ok:
                problems.append(
                    f"{'logits_per_image' if 'zero' in head else 'logits'} differ by {record['max_diff']:.2e}"
                )
            if base is not None:
                base_out = _first_tensor(base(**_base_inputs(base, dev_batch)))
                record["base_max_diff"], ok = _diff(base_out, base_ref)
                if not ok:
                    problems.append(f"base model output differs by {record['base_max_diff']:.2e}")
        if generative and ref_gen is not None:
            record["greedy"] = _tokens(ref_gen, model, dev_batch, None)
            if not record["greedy"].startswith("same"):
                problems.append(f"greedy: {record['greedy']}")
            if ref_static is not None:
                record["static"] = _tokens(ref_static, model, dev_batch, "static")
                if not record["static"].startswith("same"):
                    problems.append(f"static cache: {record['static']}")
    except Exception as e:
        problems.append(_cause(e))
        record["error"] = True
    del model
    if train_cpu is not None:
        problems += _train_neuron(train_cpu, record)
    record["status"] = "error" if record.pop("error", False) else ("fail" if problems else "pass")
    if problems:
        record["cause"] = "; ".join(problems)
    return neuron_counters(record, start, neuron_start)


# ---------------------------------------------------------------- one training step


def _train_reference(family: str, model_type: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """CPU side of the training step: None (with `train` in the record saying why) if it does not run on CPU."""
    import torch

    try:
        head, model = tiny_model(family, model_type, train=True)
        dev, init = copy.deepcopy(model), copy.deepcopy(model)
        batch = labels(family, head, model, inputs(family, head, model))
        torch.manual_seed(0)
        names = [n for n, _ in model.named_parameters()]
        losses, grads = _step(model, batch)
        if not all(map(lambda x: x == x, losses)):
            raise RuntimeError(f"the CPU loss is not finite: {losses}")
    except Exception as e:
        record["train"] = {"status": "cpu-error", "cause": _cause(e)}
        return None
    scale = max((float(g.abs().max()) for g in grads if g is not None and g.numel()), default=0.0)
    return {
        "model": model,
        "dev": dev,
        "init": init,
        "batch": batch,
        "names": names,
        "losses": losses,
        "grads": grads,
        "scale": scale,
    }


def _step(model: Any, batch: dict[str, Any]) -> tuple[list[float], list[Any]]:
    """One AdamW step on the head's own loss: the loss and the gradients (on CPU, None where none)."""
    import torch
    from torch.nn import functional

    optimizer = torch.optim.AdamW(model.parameters(), lr=hf_training.LR)
    params = inspect.signature(model.forward).parameters
    if "labels" in batch and "labels" not in params:  # a classifier without a loss: cross-entropy of its scores
        batch = dict(batch)
        targets = batch.pop("labels")
        loss = functional.cross_entropy(main_output("image-classification", model(**batch)), targets)
    else:
        loss = model(**batch).loss
    if loss is None:
        raise RuntimeError("the head returns no loss for these labels")
    loss.backward()
    grads = [None if p.grad is None else p.grad.detach().to("cpu", copy=True) for p in model.parameters()]
    optimizer.step()
    optimizer.zero_grad()
    return [float(loss.detach())], grads


def _train_neuron(cpu: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """Neuron side of the training step, judged with `hf_training`'s tolerances; its problems."""
    import torch

    train: dict[str, Any] = {"cpu_losses": cpu["losses"], "grad_scale": cpu["scale"]}
    record["train"] = train
    try:
        dev = cpu["dev"].to("neuron")
        torch.manual_seed(0)
        losses, grads = _step(dev, _to(cpu["batch"], "neuron"))
        train["losses"] = losses
        train["loss_max_diff"] = max(abs(d - c) for c, d in zip(cpu["losses"], losses))
        train["grad_max_diff"], train["worst_grad"] = hf_training._worst(cpu["names"], cpu["grads"], grads)
        cpu_params = [p.detach() for p in cpu["model"].parameters()]
        params = [p.detach().cpu() for p in dev.parameters()]
        # `hf_training`'s noise weights, on either side: a gradient that is float32 rounding (within NOISE of
        # the largest) on both devices, nonzero on one, has a coin-flip sign Adam turns into a step. A bias
        # that softmax ignores (a key bias) gets an exact 0 on CPU and 1e-9 on neuron, or the reverse.
        small = hf_training.NOISE * cpu["scale"]
        noise = [
            None
            if c is None or d is None
            else ((c != 0) | (d.cpu() != 0)) & (c.abs() <= small) & (d.cpu().abs() <= small)
            for c, d in zip(cpu["grads"], grads)
        ]
        train["noise_weights"] = sum(int(m.sum()) for m in noise if m is not None)
        train["param_max_diff"], train["worst_param"] = hf_training._worst(cpu["names"], cpu_params, params, noise)
        problems = hf_training.judge(train)
        if problems:
            try:
                problems = _float64_arbiter(cpu, losses, grads, params, train, problems)
            except Exception as e:  # a model with float32-only kernels (grouped_mm) has no float64 reference
                train["float64"] = f"not available: {_cause(e)[:160]}"
    except Exception as e:
        problems = [f"training step: {_cause(e)}"]
        train["status"] = "error"
        return problems
    train["status"] = "fail" if problems else "pass"
    return [f"training step: {p}" for p in problems]


def _float64_arbiter(
    cpu: dict[str, Any],
    losses: list[float],
    grads: list[Any],
    params: list[Any],
    train: dict[str, Any],
    problems: list[str],
) -> list[str]:
    """A step that misses the float32 tolerances is run once more on CPU in float64, the exact answer: where
    CPU's own float32 step is that far from it too (an ill-conditioned tiny model, e.g. batch norm over two
    images), neuron passes if it is no farther from float64 than twice CPU float32 is, plus the tolerance."""
    import torch

    model = cpu["init"].double()
    batch = {
        k: v.double() if hasattr(v, "is_floating_point") and v.is_floating_point() else v
        for k, v in cpu["batch"].items()
    }
    torch.manual_seed(0)
    losses64, grads64 = _step(model, batch)
    params64 = [p.detach() for p in model.parameters()]
    names = cpu["names"]
    cpu_params = [p.detach().double() for p in cpu["model"].parameters()]

    def far(ours: list[Any], exact: list[Any]) -> float:
        return hf_training._worst(names, [None if t is None else t.double() for t in ours], exact)[0]

    figures = {
        "loss": (abs(losses[0] - losses64[0]), abs(cpu["losses"][0] - losses64[0]), hf_training.LOSS_ATOL),
        "grad": (far(grads, grads64), far(cpu["grads"], grads64), hf_training.GRAD_TOL * cpu["scale"]),
        "param": (far(params, params64), far(cpu_params, params64), hf_training.PARAM_TOL),
    }
    train["float64"] = {k: {"neuron": n, "cpu_float32": c} for k, (n, c, _) in figures.items()}
    if all(n <= 2 * c + tol for n, c, tol in figures.values()):
        train["judged_by"] = "float64"
        return []
    return problems


# ---------------------------------------------------------------- records and report


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [r for r in results if r["status"] != "cpu-error"]
    passed = [r for r in ran if r["status"] == "pass"]
    trained = [r for r in ran if r.get("train", {}).get("status") not in (None, "cpu-error")]
    return {
        "architectures": len(results),
        "run_on_cpu": len(ran),
        "pass_on_neuron": len(passed),
        "pass_rate": len(passed) / len(ran) if ran else 0.0,
        "trained": len(trained),
        "train_pass": sum(1 for r in trained if r["train"]["status"] == "pass"),
        "fully_native": sum(1 for r in passed if not r.get("fallback_calls")),
    }


def load(family: str) -> list[dict[str, Any]]:
    path = records_path(family)
    return json.loads(path.read_text()) if path.exists() else []


def method() -> str:
    """The paragraph that says how the families are checked (the report, before their sections)."""
    return (
        "## The other families: how they are checked\n\n"
        "`python -m tools.hf_sweep --family encoders|seq2seq|vision|speech|vlm|all` (`--fast`: the CI slice, "
        "`tests/test_hf_families.py`; `--only a,b` reruns some and merges them into the family's JSON). "
        "Which architectures each family holds: encoders = every entry of `MODEL_FOR_MASKED_LM_MAPPING_NAMES` "
        "(masked-LM head; BERT-like models are here even when their decoder variant is in the causal sweep) "
        "and every entry of `MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES` with neither a masked-LM nor a "
        "causal-LM entry (a causal LM's classification head is its decoder, already checked, under a pooled "
        "linear layer); seq2seq = `MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES` less the speech-to-text "
        "entries, text inputs only; vision = `MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES`; speech = "
        "`MODEL_FOR_CTC_MAPPING_NAMES` and `MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES`; vlm = "
        "`MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES` and `MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES`. "
        "Each architecture runs with the class its first mapping names (its main head). The tiny recipe is the "
        "causal sweep's plus a media part (`tools/tiny_models.py`: images of 64 pixels, stage widths and audio "
        "feature encoders 64 channels, two blocks per stage, head counts that divide the width). Inputs are "
        f"built as tensors: {BATCH} sequences of {LENGTH} random tokens, {BATCH} random images, "
        f"{SAMPLES} audio samples or log-mel frames, a VLM prompt with as many image tokens as the image has "
        "features. Per architecture, in float32: the forward on CPU (eval mode, fixed seed) is the reference; "
        f'after `model.to("neuron")` the head\'s main output (`logits`, CLIP-style `logits_per_image`) and the '
        f"base model's first output must match it (rtol = atol = {RTOL:g}); generative heads also generate "
        f"{NEW_TOKENS} greedy tokens with the dynamic cache and, where it runs on CPU, the static cache "
        "(same tokens, or a first difference at a CPU tie). Then one training step: the model in training mode "
        "with every random setting zeroed, the head's own loss for labels (a classifier without one: "
        "cross-entropy of its scores), one AdamW step; loss, first-step gradients and updated parameters must "
        "match CPU's with the causal training sweep's tolerances (`docs/model_training.md`), the noise weights "
        "left out on either device. A step that misses them is rerun on CPU in float64: if CPU's own float32 "
        "step is as far from float64 (an ill-conditioned tiny model, batch norm over two images), neuron passes "
        "when it is no farther from float64 than twice CPU float32 is (`pass (float64 check)`). A failing "
        "architecture is run once more with CPU's tied top-k values in index order, as neuron's topk returns "
        "them (`tools/topk_ties.py`): torch.topk leaves tied indices unspecified and CPU's come out as "
        "libstdc++'s unstable selection leaves them, so a model that selects by topk among exact ties (ReLU'd "
        "sparse-attention indexer scores) attends to other tokens on each device. If that changed some CPU "
        "topk call and neuron then matches in every check, it passes (`pass (topk ties)`, the first run's "
        "cause kept in the record). The CPU fallback stays on, as in the causal sweep; its calls are counted.\n"
    )


def section(family: str, results: list[dict[str, Any]], partial: bool = False) -> str:
    """One family's Markdown section."""
    s = summary(results)
    out = io.StringIO()
    w = out.write
    w(f"## {TITLES[family]}\n\n")
    if partial:
        w(f"**Partial: {len(results)} of {len(model_types(family))} architectures of the family were run.** ")
    w(f"Records: `docs/{records_path(family).name}` (`python -m tools.hf_sweep --family {family}`). ")
    w(f"**{s['pass_on_neuron']} of {s['run_on_cpu']} architectures that run on CPU pass on neuron ")
    w(f"({100 * s['pass_rate']:.1f}%)**; {s['architectures'] - s['run_on_cpu']} of {s['architectures']} do not ")
    w(f"build or run forward on CPU with the tiny recipe (listed below). Training step: {s['train_pass']} of ")
    w(f"{s['trained']} that train on CPU match it. {s['fully_native']} of the passing architectures ran ")
    w("without any CPU fallback.\n\n")
    columns = ["model type", "class", "result", "main max diff", "base max diff"]
    if family in GENERATIVE:
        columns += ["greedy", "static cache"]
    columns += ["train step", "loss diff", "param diff", "fallback calls", "top fallback ops", "s", "cause"]
    w("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|\n")
    for r in results:
        if r["status"] == "cpu-error":
            continue
        train = r.get("train", {})
        top = ", ".join(f"{op.removeprefix('aten.')} ({n})" for op, n in Counter(r.get("fallbacks", {})).most_common(3))
        cells = [
            r["model_type"],
            r.get("architecture", ""),
            "pass (topk ties)" if r.get("judged_by") else r["status"],
            _num(r.get("max_diff")),
            _num(r.get("base_max_diff")),
        ]
        if family in GENERATIVE:
            cells += [r.get("greedy", ""), r.get("static", "")]
        train_cell = train.get("status", "")
        if train.get("judged_by") == "float64":
            train_cell = "pass (float64 check)"
        if train_cell == "cpu-error":
            train_cell = "n/a (not on CPU)"
        cells += [train_cell, _num(train.get("loss_max_diff")), _num(train.get("param_max_diff"))]
        cause = r.get("cause", "")
        if r.get("judged_by"):
            cause = f"judged by {r['judged_by']} ({r['topk_calls_changed']} CPU topk calls): {r['first_cause']}"
        cells += [r.get("fallback_calls", ""), top, r.get("seconds", ""), cause]
        w("| " + " | ".join(_cell(c) for c in cells) + " |\n")
    untrained = [r for r in results if r["status"] != "cpu-error" and r.get("train", {}).get("status") == "cpu-error"]
    if untrained:
        w("\nTraining step not run (it does not run on CPU): ")
        w("; ".join(f"{r['model_type']}: {_cell(r['train'].get('cause', ''))[:200]}" for r in untrained) + ".\n")
    failed_cpu = [r for r in results if r["status"] == "cpu-error"]
    if failed_cpu:
        w(f"\n### {TITLES[family].split(':')[0]}: not counted, the tiny model does not run on CPU\n\n")
        w("| model type | cause |\n|---|---|\n")
        for r in failed_cpu:
            w(f"| {r['model_type']} | {_cell(r.get('cause', ''))[:400]} |\n")
    return out.getvalue()


def _num(value: Any) -> str:
    return f"{value:.1e}" if isinstance(value, float) else ""
