"""Tiny random-weight Hugging Face models from any architecture's config class.

`tiny_config(model_type)` takes the config class's defaults and shrinks them with one generic
recipe: widths to 64, two layers, 256-token vocabulary, small heads, experts and windows;
per-layer lists are cut keeping the first layer of each kind (so a hybrid model keeps one
layer of every mixer, a sliding-window model one sliding and one full layer); sub-configs
(text, vision, audio) are shrunk the same way. `OVERRIDES` holds the few per-architecture
settings the recipe cannot infer. `tiny_tokenizer()` is an offline tokenizer for them;
`FAST_SLICE` and `TRAIN_SLICE` name the architectures of the sweeps' CI slices (`tools/hf_sweep.py --fast`,
`--train --fast`).

A developer tool for the architecture sweep and the tests: Hugging Face libraries need none of it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

# The sweep's CI slice (`--fast`, tests/test_hf_architectures.py), eleven diverse architectures:
# dense (llama, gpt2, qwen2, phi3, gpt_neox), ALiBi (bloom), MoE (mixtral), sliding window +
# soft-capping (gemma2), hybrid attention/convolution (lfm2), a pure state-space model (mamba),
# and an MoE whose data-dependent check breaks the compiled decode graph (dbrx: eager kernels
# then run between compiled graphs).
FAST_SLICE = ["llama", "gpt2", "qwen2", "phi3", "gpt_neox", "bloom", "mixtral", "gemma2", "lfm2", "mamba", "dbrx"]
# The training sweep's CI slice (`--train --fast`, tests/test_hf_architectures.py), eager and compiled
# in under a minute: dense with rotary and untied head (llama), learned positions, biases, a tied
# head and Conv1D (gpt2), sliding window with soft-capping and a tied head (gemma2).
TRAIN_SLICE = ["llama", "gpt2", "gemma2"]

HIDDEN = 64
LAYERS = 2
VOCAB = 256
HEADS = 4
HEAD_DIM = 16
FFN = 128
EXPERTS = 4
POSITIONS = 512
WINDOW = 4

_HIDDEN = {
    "hidden_size", "d_model", "n_embd", "n_embed", "embed_dim", "dim", "model_dim", "word_embed_proj_dim",
    "embedding_size", "lru_width", "attention_hidden_size", "hidden_size_global", "emb_dim", "embedding_dim",
    "input_embedding_size", "output_embedding_size", "out_hidden_size", "backbone_hidden_size", "d_embed",
    "router_hidden_size", "hidden_dim", "projection_dim", "text_hidden_size", "vision_output_dim",
    "projector_input_dim", "projector_output_dim", "adapter_in_dim", "adapter_out_dim", "adapter_input_size",
}  # fmt: skip
_TIED_TO_HIDDEN = {"attention_hidden_size"}  # a fixed multiple of hidden_size (Zamba2's is 2x)
_HEAD_DIMS = {
    "head_dim", "d_head", "dim_head", "d_kv", "attention_head_dim", "attention_head_size", "kv_channels",
    "qk_nope_head_dim", "v_head_dim", "swa_head_dim", "index_head_dim", "linear_key_head_dim",
    "linear_value_head_dim", "linear_head_dim", "mamba_d_head", "mamba_headdim", "mamba_head_dim",
}  # fmt: skip
_ROPE_DIMS = {"qk_rope_head_dim", "rotary_dim"}
_RANKS = {"kv_lora_rank": 32, "q_lora_rank": 32, "o_lora_rank": 32, "laurel_rank": 8, "hc_lowrank": 8,
          "loop_gate_rank": 8, "adapter_rank": 8, "time_step_rank": 8, "mamba_dt_rank": 8}  # fmt: skip
_FFN = {
    "n_inner", "d_ff", "dim_ff", "dff", "d_inner", "mlp_dim", "feed_forward_size", "expert_ffn_hidden_size",
    "ffn_hidden_size", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim", "intermediate_size_mlp",
}  # fmt: skip
_LAYERS = {
    "num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers",
    "num_decoder_layers", "num_encoder_layers", "depth", "num_blocks", "n_recurrent_layers",
}  # fmt: skip
_HEADS = {
    "num_attention_heads", "n_head", "num_heads", "n_heads", "decoder_attention_heads", "encoder_attention_heads",
    "swa_num_attention_heads", "index_n_heads", "linear_num_key_heads", "linear_num_value_heads",
    "linear_num_heads", "mamba_n_heads", "mamba_num_heads",
}  # fmt: skip
# key/value head counts and the query head count each one divides
_KV_HEADS = {
    "num_key_value_heads": "num_attention_heads", "n_kv_heads": "n_heads", "num_kv_heads": "num_heads",
    "multi_query_group_num": "num_attention_heads", "num_query_groups": "num_attention_heads",
    "swa_num_key_value_heads": "swa_num_attention_heads", "kv_n_heads": "n_heads",
}  # fmt: skip
_VOCAB = {"vocab_size", "decoder_vocab_size", "audio_vocab_size", "vocab_size_per_layer_input", "unpadded_vocab_size"}
_POSITIONS = {
    "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_source_positions",
    "max_target_positions", "context_length", "model_max_length", "num_position_embeddings",
}  # fmt: skip
_EXPERTS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}
_TOP_K = {"num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k", "num_selected_experts", "moe_k",
          "top_k_experts"}  # fmt: skip
_WINDOWS = {
    "sliding_window", "sliding_window_size", "attention_window_size", "local_attention_window_len",
    "attention_chunk_size", "window_size",
}  # fmt: skip
_STATES = {"mamba_d_state", "state_size", "ssm_state_size", "d_state"}
_CHUNKS = {"chunk_size", "mamba_chunk_size", "index_block_size"}
_AT_MOST = {"n_shared_experts": 1, "num_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1, "num_group": 1,
            "num_expert_group": 1, "topk_group": 1, "index_topk": 8, "num_nextn_predict_layers": 0, "n_groups": 1,
            "mamba_n_groups": 1}  # fmt: skip


def _target(key: str, value: int) -> int | None:
    """The shrunk value of an integer setting, or None to keep it."""
    for names, size in (
        (_HIDDEN, HIDDEN),
        (_HEAD_DIMS, HEAD_DIM),
        (_ROPE_DIMS, HEAD_DIM // 2),
        (_FFN, FFN),
        (_HEADS, HEADS),
        (_VOCAB, VOCAB),
        (_POSITIONS, POSITIONS),
        (_EXPERTS, EXPERTS),
        (_TOP_K, 2),
        (_WINDOWS, WINDOW),
        (_STATES, 16),
        (_CHUNKS, 16),
    ):
        if key in names:
            return min(value, size)
    if key in _RANKS:
        return min(value, _RANKS[key])
    if key in _AT_MOST:
        return min(value, _AT_MOST[key])
    if "intermediate" in key:
        return min(value, FFN)
    return None


def _like_hidden(value: int, hidden: Any) -> int:
    """A width tied to the hidden size keeps its ratio to it."""
    if isinstance(hidden, int) and hidden > HIDDEN:
        for ratio in (0.25, 0.5, 1, 2, 4):
            if value == hidden * ratio:
                return int(HIDDEN * ratio)
    return min(value, HIDDEN)


def _is_token_id(key: str) -> bool:
    return key.endswith(("_token_id", "_token_index", "_token_ids"))


_NOT_PER_LAYER = re.compile(r"act|_proj$")  # activation names (T5's "gelu_new" is as long as mT5 is deep)


def _per_layer(d: dict[str, Any], count: int) -> dict[str, Any]:
    """The per-layer lists and strings of a config level (one entry per layer)."""
    return {
        k: v
        for k, v in d.items()
        if isinstance(v, (list, str))
        and len(v) == count
        and count > 1
        and not _is_token_id(k)
        and k != "model_type"
        and not (isinstance(v, str) and _NOT_PER_LAYER.search(k))
    }


def _layer_indices(d: dict[str, Any], count: int) -> dict[str, list[int]]:
    """Lists of layer indices (`global_attn_indexes`, `moe_layers`, ...)."""
    return {
        k: v
        for k, v in d.items()
        if isinstance(v, list)
        and v
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in v)
        and any(s in k for s in ("layer", "idx", "index", "indexes", "ids"))
        and not _is_token_id(k)
    }


def _layer_maps(d: dict[str, Any], count: int) -> dict[str, dict]:
    """Dicts keyed by layer index (`per_layer_config`: {"05": {...}})."""
    return {
        k: v
        for k, v in d.items()
        if isinstance(v, dict) and v and all(str(i).isdigit() and int(i) < count for i in v) and "layer" in k
    }


def _cut_layers(d: dict[str, Any]) -> None:
    """Keep the first layer of each kind (its entry in every per-layer list, index list and map)."""
    counts = [d[k] for k in _LAYERS if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)]
    count = max(counts) if counts else 0
    if not count:
        return
    lists = _per_layer(d, count)
    indices = {k: v for k, v in _layer_indices(d, count).items() if k not in lists}
    maps = _layer_maps(d, count)
    by_layer = [{int(i): v for i, v in m.items()} for m in maps.values()]
    kinds = [
        (
            tuple(repr(v[i]) for v in lists.values()),
            tuple(i in v for v in indices.values()),
            tuple(repr(m.get(i)) for m in by_layer),
        )
        for i in range(count)
    ]
    keep: list[int] = []
    for i, kind in enumerate(kinds):
        if kind not in kinds[:i]:
            keep.append(i)
    keep += [i for i in range(count) if i not in keep][: max(0, min(LAYERS, count) - len(keep))]
    keep.sort()
    for k, v in lists.items():
        d[k] = "".join(v[i] for i in keep) if isinstance(v, str) else [v[i] for i in keep]
    for k, v in indices.items():
        d[k] = [keep.index(i) for i in v if i in keep]
    for k, m in zip(maps, by_layer):
        d[k] = {str(keep.index(i)): _shrink(dict(v)) if isinstance(v, dict) else v for i, v in m.items() if i in keep}
    for k in _LAYERS:
        if d.get(k) == count:
            d[k] = len(keep) if lists or indices or maps else min(count, LAYERS)


def _shrink(d: dict[str, Any]) -> dict[str, Any]:
    """Shrink one config level (a `to_dict()` dict) in place and recurse into sub-configs."""
    original = dict(d)
    _cut_layers(d)
    next_id = VOCAB - 1
    for key, value in list(d.items()):
        if isinstance(value, dict) and ("model_type" in value or key.endswith("_config")):
            _shrink(value)
        elif isinstance(value, bool) or key == "model_type" or key in _KV_HEADS:
            continue
        elif _is_token_id(key) and isinstance(value, int) and value >= VOCAB:
            d[key], next_id = next_id, next_id - 1
        elif _is_token_id(key) and isinstance(value, list) and any(isinstance(v, int) and v >= VOCAB for v in value):
            fixed = []
            for v in value:
                if isinstance(v, int) and v >= VOCAB:
                    v, next_id = next_id, next_id - 1
                fixed.append(v)
            d[key] = fixed
        elif isinstance(value, int) and key in _TIED_TO_HIDDEN:
            d[key] = _like_hidden(value, original.get("hidden_size"))
        elif isinstance(value, int):
            target = _target(key, value)
            if target is not None:
                d[key] = target
        elif isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            targets = [_target(key, v) for v in value]
            if all(t is not None for t in targets):
                d[key] = targets
    # Head sizes that were equal stay equal (DeepSeek's rotary `head_dim` is `qk_rope_head_dim`).
    for key in _HEAD_DIMS:
        for rope in _ROPE_DIMS:
            if isinstance(original.get(key), int) and original.get(key) == original.get(rope):
                d[key] = d[rope]
    if "head_dim" in d and d["head_dim"] is None and isinstance(d.get("num_attention_heads"), int):
        d["head_dim"] = HEAD_DIM
    for key, heads_key in _KV_HEADS.items():
        heads, kv = original.get(heads_key, original.get("num_attention_heads")), original.get(key, 0)
        new_heads = d.get(heads_key, d.get("num_attention_heads", HEADS))
        if key in d and isinstance(heads, int) and isinstance(new_heads, int):
            if kv is None or kv >= heads:
                d[key] = new_heads
            elif isinstance(kv, int):
                d[key] = 1 if kv == 1 else min(2, new_heads)
    _fit_mamba(d)
    if "qk_head_dim" in d and "qk_nope_head_dim" in d and "qk_rope_head_dim" in d:
        d["qk_head_dim"] = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    return d


# (heads, head size, expansion, inner size) names of Mamba-2 style mixers: heads * head = expand * hidden
_MAMBA = [
    ("mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_d_ssm"),
    ("num_heads", "head_dim", "expand", None),
    ("n_mamba_heads", "mamba_headdim", "mamba_expand", None),
]


def _fit_mamba(d: dict[str, Any]) -> None:
    hidden = d.get("hidden_size")
    for heads, head, expand, inner in _MAMBA:
        if all(isinstance(d.get(k), int) for k in (heads, head, expand)) and isinstance(hidden, int):
            d[heads] = min(d[heads], HEADS)
            d[head] = d[expand] * hidden // d[heads]
            if inner in d and d[inner] is not None:
                d[inner] = d[expand] * hidden


# Per-architecture settings the generic recipe cannot infer: applied to the shrunk dict; those in
# TRAIN_OVERRIDES only for training (`train=True`), after OVERRIDES.
OVERRIDES: dict[str, Callable[[dict[str, Any]], None]] = {}
TRAIN_OVERRIDES: dict[str, Callable[[dict[str, Any]], None]] = {}
# Settings for the other families' sweep (`media=True`, tools/hf_families.py), after OVERRIDES.
MEDIA_OVERRIDES: dict[str, Callable[[dict[str, Any]], None]] = {}


def override(
    *model_types: str, train: bool = False, media: bool = False
) -> Callable[[Callable[[dict[str, Any]], None]], Callable[[dict[str, Any]], None]]:
    def register(fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        for model_type in model_types:
            (MEDIA_OVERRIDES if media else TRAIN_OVERRIDES if train else OVERRIDES)[model_type] = fn
        return fn

    return register


# Float settings that make a training forward random: dropout of every kind, layer drop, stochastic
# depth, router jitter, SpecAugment-style masking. Two devices draw different random streams, so a
# training step compared across devices needs them at zero (eval mode switches off only some).
_STOCHASTIC = re.compile(r"drop|jitter|noise|^mask_\w*_prob$")


def _no_randomness(d: dict[str, Any]) -> None:
    for key, value in d.items():
        if isinstance(value, dict):
            _no_randomness(value)
        elif isinstance(value, float) and _STOCHASTIC.search(key):
            d[key] = 0.0


IMAGE = 64  # image side of the media recipe
MEDIA_CHANNELS = 64  # channel widths of convolutional stages and feature encoders
STAGE_DEPTH = 2  # blocks per stage of a staged vision backbone (two keep Swin's shifted-window block)


def _pow2_at_most(value: int, cap: int = HEADS) -> int:
    return 1 << (max(1, min(value, cap)).bit_length() - 1)


def _shrink_media(d: dict[str, Any]) -> None:
    """The media part of the recipe (`tiny_config_dict(..., media=True)`, used by `hf_families.py`):
    images to `IMAGE` pixels (a multiple of the patch), stage widths and convolutional feature
    widths to `MEDIA_CHANNELS`, stage depths to `STAGE_DEPTH`, head counts to powers of two that
    divide the width. Recurses into sub-configs. The causal-LM sweeps do not use it, so their
    recorded results keep their recipe."""
    for value in d.values():
        if isinstance(value, dict) and ("model_type" in value or any(str(k).endswith("_size") for k in value)):
            _shrink_media(value)
    patch = d.get("patch_size")
    patch = patch[0] if isinstance(patch, list) and patch else patch
    side = max(patch, IMAGE // patch * patch) if isinstance(patch, int) and patch > 0 else IMAGE
    merge = d.get("spatial_merge_size")
    if isinstance(merge, int) and isinstance(patch, int) and isinstance(d.get("window_size"), int):
        d["window_size"] = 2 * merge * patch  # Qwen2.5-VL's window attention: whole merged patches
    window, depths = d.get("window_size"), d.get("depths")
    if isinstance(window, int) and isinstance(patch, int) and isinstance(depths, list) and depths:
        side = max(side, window * patch * 2 ** (len(depths) - 1))  # Swin's last stage must cover its window
    for key in ("image_size", "crop_size"):
        value = d.get(key)
        if isinstance(value, int) and value > side:
            d[key] = side
        elif isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            d[key] = [min(v, side) for v in value]
    channels = ("hidden_sizes", "conv_dim", "embed_dims", "neck_hidden_sizes", "out_channels_list")
    for key in (*channels, "stage_in_channels", "stage_mid_channels", "stage_out_channels"):
        value = d.get(key)
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            d[key] = [min(v, MEDIA_CHANNELS) for v in value]
    for key in ("depths", "stage_depths", "num_encoder_blocks"):
        value = d.get(key)
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            d[key] = [min(v, STAGE_DEPTH) for v in value]
    if isinstance(d.get("max_source_positions"), int):  # audio encoder frames: 2 x 64 log-mel frames (Whisper's input)
        d["max_source_positions"] = min(d["max_source_positions"], 64)
    for key in ("audio_hidden_size", "vision_hidden_size", "encoder_hidden_size", "projection_size"):  # widths
        if isinstance(d.get(key), int):
            d[key] = min(d[key], HIDDEN)
    if isinstance(d.get("num_groups"), int):  # group norms over the narrowed channels
        d["num_groups"] = min(d["num_groups"], 4)
    if d.get("out_features") or d.get("out_indices"):  # a backbone's outputs name stages the cut removed
        d["out_features"] = None
        stages = d.get("num_hidden_layers") if isinstance(d.get("num_hidden_layers"), int) else None
        stages = stages or (len(d["depths"]) if isinstance(d.get("depths"), list) else None)
        if isinstance(d.get("out_indices"), list) and stages:  # Data2Vec-Vision wants a list
            d["out_indices"] = [i for i in d["out_indices"] if i <= stages] or [stages]
        else:
            d["out_indices"] = None
    if isinstance(d.get("num_conv_pos_embeddings"), int):
        d["num_conv_pos_embeddings"] = min(d["num_conv_pos_embeddings"], 16)
    width = next((d[k] for k in ("hidden_size", "embed_dim", "d_model") if isinstance(d.get(k), int)), None)
    for key in ("num_attention_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads"):
        value = d.get(key)
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            d[key] = [_pow2_at_most(v) for v in value]
        elif isinstance(value, int) and isinstance(width, int) and value and width % value:
            d[key] = _pow2_at_most(value)


def tiny_config_dict(model_type: str, train: bool = False, media: bool = False) -> dict[str, Any]:
    """The shrunk `to_dict()` of `model_type`'s default config; `train` zeroes its random settings
    (dropout, layer drop, router jitter) so that training mode draws no random numbers, and applies
    `TRAIN_OVERRIDES`; `media` also shrinks images, stages and audio feature encoders
    (`_shrink_media`) and applies `MEDIA_OVERRIDES`."""
    from transformers import CONFIG_MAPPING

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = CONFIG_MAPPING[model_type]()
    d = _shrink(config.to_dict())
    if media:
        _shrink_media(d)
    if model_type in OVERRIDES:
        OVERRIDES[model_type](d)
    if media and model_type in MEDIA_OVERRIDES:
        MEDIA_OVERRIDES[model_type](d)
    if train:
        _no_randomness(d)
        if model_type in TRAIN_OVERRIDES:
            TRAIN_OVERRIDES[model_type](d)
    return d


def tiny_config(model_type: str, train: bool = False) -> Any:
    """A tiny config of the architecture `model_type` (random-weight models build in milliseconds)."""
    from transformers import CONFIG_MAPPING

    d = tiny_config_dict(model_type, train)
    d.pop("model_type", None)
    d.pop("transformers_version", None)
    config_class = CONFIG_MAPPING[model_type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_class.from_dict(d)
    # A composite config whose causal LM is only its decoder (MusicGen): hand over that part.
    wanted = causal_lm_class(model_type).config_class
    parts = [v for v in vars(config).values() if isinstance(v, wanted)]
    if not isinstance(config, wanted) and parts:
        config = parts[0]
    return config


def causal_lm_class(model_type: str) -> Any:
    """The class `AutoModelForCausalLM` builds for `model_type`."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return MODEL_FOR_CAUSAL_LM_MAPPING[CONFIG_MAPPING[model_type]]


def tiny_inputs(model: Any, length: int = 8, seed: int = 0) -> Any:
    """Random prompt token ids for `model`: one sequence (one per codebook for MusicGen-style decoders)."""
    import torch

    config = model.config
    batch = getattr(config, "num_codebooks", None) or 1
    vocab = min(config.get_text_config().vocab_size, VOCAB)
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (batch, length), generator=generator)


def tiny_causal_lm(model_type: str, seed: int = 0, train: bool = False, **kwargs: Any) -> Any:
    """A tiny random-weight causal LM of `model_type` (the class `AutoModelForCausalLM` maps it to), in eval
    mode, or with `train` in training mode with every random setting zeroed (a deterministic training
    step); `kwargs` go to `from_config` (e.g. `attn_implementation`)."""
    import torch

    config = tiny_config(model_type, train)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = causal_lm_class(model_type)._from_config(config, **kwargs)
    if hasattr(model, "set_default_language"):  # X-MOD routes through a per-language adapter
        model.set_default_language(config.languages[0])
    _randomize_constant_matrices(model)
    return model.train(train)


def _randomize_constant_matrices(model: Any) -> None:
    """Random weights everywhere: a matrix the model's init leaves constant gets N(0, 0.02).
    AFMoE zero-initialises its router, so every expert ties and which ones top-k picks is
    implementation-defined (PyTorch CPU and XLA break ties differently)."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and p.numel() > 1 and p.is_floating_point() and bool((p == p.flatten()[0]).all()):
                p.normal_(0.0, 0.02)


@override("jamba")
def _jamba(d: dict[str, Any]) -> None:
    d.update(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1)


@override("recurrent_gemma")
def _recurrent_gemma(d: dict[str, Any]) -> None:
    d["block_types"] = ["recurrent", "attention"]


@override("lfm2_moe")
def _lfm2_moe(d: dict[str, Any]) -> None:
    d.update(layer_types=["conv", "full_attention"], num_dense_layers=1)


@override("granitemoehybrid")
def _granitemoehybrid(d: dict[str, Any]) -> None:
    d["layer_types"] = ["linear_attention", "full_attention"]


@override("deepseek_v2")
def _deepseek_v2(d: dict[str, Any]) -> None:
    d["num_experts_per_tok"] = 2


@override("dots1")
def _dots1(d: dict[str, Any]) -> None:
    d.update(moe_intermediate_size=FFN, n_routed_experts=EXPERTS, num_experts_per_tok=2, n_shared_experts=1)


@override("dbrx")
def _dbrx(d: dict[str, Any]) -> None:
    d["attn_config"].update(rope_theta=10000.0, clip_qkv=8.0)


@override("zamba")
def _zamba(d: dict[str, Any]) -> None:
    # the shared transformer block is tied across hybrid layers: it needs two of them
    d.update(layers_block_type=["linear_attention", "hybrid", "hybrid"], num_hidden_layers=3)


@override("bamba")
def _bamba(d: dict[str, Any]) -> None:
    d["attn_layer_indices"] = [1]


@override("qwen4_exp", "qwen4_exp_text")
def _qwen4_exp(d: dict[str, Any]) -> None:
    d.get("text_config", d).update(
        indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=HEAD_DIM, indexer_budget=8, indexer_compress_ratio=2
    )


@override("reformer")
def _reformer(d: dict[str, Any]) -> None:
    d.update(is_decoder=True, axial_pos_embds_dim=[HIDDEN // 2, HIDDEN // 2], axial_pos_shape=[16, 32])


@override("reformer", train=True)
def _reformer_train(d: dict[str, Any]) -> None:
    # In training Reformer's axial position embeddings must cover the sequence exactly: 2 x 4 is the
    # training sweep's 8 tokens (tools/hf_training.py LENGTH); inference keeps 16 x 32 for generation.
    d["axial_pos_shape"] = [2, 4]


@override("dots3_note", "dots3_note_text")
def _dots3(d: dict[str, Any]) -> None:
    text = d.get("text_config", d)
    text["head_dim"] = text["qk_nope_head_dim"] + text["qk_rope_head_dim"]


@override("hrm_text")
def _hrm_text(d: dict[str, Any]) -> None:
    d.update(H_cycles=1, L_cycles=1, L_bp_cycles=[1], num_layers_per_stack=1, num_hidden_layers=1)


@override("gemma3n_text", "gemma4_unified_assistant")
def _no_kv_sharing(d: dict[str, Any]) -> None:
    d.get("text_config", d)["num_kv_shared_layers"] = 0


@override("dory")
def _dory(d: dict[str, Any]) -> None:
    # serialized as (attention, mlp) block pairs, counts doubled: one input, recurrent and output layer
    kinds = ["sliding_attention", "full_attention", "sliding_attention"]
    d.update(layer_types=[b for k in kinds for b in (k, "mlp")], num_hidden_layers=6)
    d.update(n_input_layers=2, n_recurrent_layers=2, n_output_layers=2)


@override("xlstm")
def _xlstm(d: dict[str, Any]) -> None:
    d["qk_dim_factor"] = 1.0  # the config rounds hidden * factor up to 64, the model does not


@override("cohere_compass_text")
def _cohere_compass(d: dict[str, Any]) -> None:
    d["rope_parameters"] = {kind: {"rope_type": "default", "rope_theta": 10000.0} for kind in set(d["layer_types"])}


@override("cpmant")
def _cpmant(d: dict[str, Any]) -> None:
    # CPM-Ant's default init_std is 1.0: in the 64-wide model attention scores reach thousands and the
    # loss 20, so float32 alone moves CPU's first gradients by 1e-4 of the largest (against float64)
    d["init_std"] = 0.02


@override("big_bird")
def _big_bird(d: dict[str, Any]) -> None:
    d["attention_type"] = "original_full"  # the default "block_sparse" needs sequences of hundreds of tokens


def tiny_tokenizer(vocab_size: int = VOCAB) -> Any:
    """An offline word-level fast tokenizer: `<pad>`, `<s>`, `</s>`, `<unk>`, then words `w4` ... .

    Whitespace-split text of those words encodes one id per word, so any id sequence decodes and
    re-encodes exactly; enough for pipelines, Trainer collators and TRL.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials)}
    vocab.update({f"w{i}": i for i in range(len(specials), vocab_size)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@override("esm", media=True)
def _esm(d: dict[str, Any]) -> None:
    d.update(vocab_size=33, pad_token_id=1, mask_token_id=32)  # the config leaves its vocabulary unset


@override("reformer", media=True)
def _reformer_encoder(d: dict[str, Any]) -> None:
    d["is_decoder"] = False  # the masked LM is bidirectional (OVERRIDES makes the causal LM a decoder)


@override("layoutlmv3", media=True)
def _layoutlmv3(d: dict[str, Any]) -> None:
    d.update(coordinate_size=12, shape_size=8)  # 4 coordinates and 2 sizes concatenate to the hidden size


@override("lilt", media=True)
def _lilt(d: dict[str, Any]) -> None:
    d["hidden_size"] = 48  # six box embeddings of hidden_size // 6 concatenate to the hidden size


@override("t5", "mt5", "umt5", "longt5", "switch_transformers", media=True)
def _t5(d: dict[str, Any]) -> None:
    d["decoder_start_token_id"] = d.get("pad_token_id", 0)  # the heads shift labels right with it


@override("perceiver", media=True)
def _perceiver(d: dict[str, Any]) -> None:
    d["max_position_embeddings"] = 8  # the masked-LM decoder answers every position: the labels' length


@override("efficientnet", media=True)
def _efficientnet(d: dict[str, Any]) -> None:
    # width and depth multipliers of 1 (B0's), so blocks stay few; the classifier's input is the top
    # convolution's width, round_filters(1280)
    d.update(width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280)
    # narrower stages (each one's output is the next one's input) and one block each: seven blocks
    d.update(in_channels=[32, 16, 24, 40, 48, 56, 64], out_channels=[16, 24, 40, 48, 56, 64, 64])
    d["num_block_repeats"] = [1] * 7
    # convolution weights of std 0.02 shrink these narrow maps about 1e4-fold per block (in training
    # mode too: batch norm cannot renormalize a variance far below its eps, 1e-3), so logits were 1e-33
    # and every gradient float32 rounding noise; std 0.5 keeps eval logits near 1e-2, train ones near 1
    d["initializer_range"] = 0.5


@override("hiera", media=True)
def _hiera(d: dict[str, Any]) -> None:
    d["image_size"] = [IMAGE, IMAGE]  # a multiple of the patch stride (4), not of the 7-pixel patch


@override("encoder-decoder", "speech-encoder-decoder", media=True)
def _encoder_decoder(d: dict[str, Any]) -> None:
    d.update(decoder_start_token_id=1, pad_token_id=0)  # the composite config has neither; labels shift with them


@override("gemma3", "shieldgemma2", "t5gemma2", media=True)
def _gemma3_vision(d: dict[str, Any]) -> None:
    # pooled to a 2 x 2 grid: the pooling kernel is the patch grid over that (T5Gemma 2: in its encoder)
    for level in (d, *(v for v in d.values() if isinstance(v, dict) and "mm_tokens_per_image" in v)):
        level["mm_tokens_per_image"] = 4


@override("wav2vec2-bert", "wav2vec2-conformer", media=True)
def _ctc_vocabulary(d: dict[str, Any]) -> None:
    d["vocab_size"] = 32  # the config leaves the CTC head's vocabulary unset


@override("fun_asr_nano", media=True)
def _fun_asr_nano(d: dict[str, Any]) -> None:
    d["adaptor_config"]["intermediate_size"] = d["text_config"]["hidden_size"] // 4  # the config's own rule


@override("glm46v", "glm4v", "glm4v_moe", "glm_ocr", "glmga", "qwen2_vl", "qwen2_5_vl", media=True)
def _glm_vision(d: dict[str, Any]) -> None:
    # the multimodal rotary sections (time, height, width; set in the model code, GLM [8, 12, 12], Qwen
    # [16, 24, 24]) must share the rotary half of the shrunk head
    text = d["text_config"]
    head = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    rope = text.setdefault("rope_parameters", {})
    half = int(head * rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0))) // 2
    rope["mrope_section"] = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
