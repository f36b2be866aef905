"""Transformers' static-cache generation on neuron: `generate` itself compiles the decode step
with torch.compile(backend="neuron"); greedy tokens must equal CPU's and, once warm, decoding
must not recompile."""

from __future__ import annotations

import warnings

import pytest
import torch
from compare import assert_same

import torch_neuronx
from torch_neuronx.bench.models import LLAMA

transformers = pytest.importorskip("transformers")

CONFIG = {**LLAMA, "max_position_embeddings": 128}


@pytest.fixture(scope="module")
def models() -> tuple:
    torch._dynamo.reset()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**CONFIG)
    cpu = transformers.LlamaForCausalLM(config).eval()
    neuron = transformers.LlamaForCausalLM(config).eval()
    neuron.load_state_dict(cpu.state_dict())
    return cpu, neuron.to("neuron")


def _generate(model: torch.nn.Module, ids: torch.Tensor, tokens: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(
            ids, max_new_tokens=tokens, do_sample=False, cache_implementation="static", max_cache_len=64
        )


def test_static_cache_generate_matches_cpu_without_recompiles(models: tuple) -> None:
    cpu, neuron = models
    torch_neuronx.compile.reset_metrics()
    warm = torch.randint(0, 256, (1, 6))
    assert torch.equal(_generate(neuron, warm.to("neuron"), 3).cpu(), _generate(cpu, warm, 3))
    warmed = torch_neuronx.compile.metrics()
    assert warmed["graphs"] >= 1, "generate did not go through torch.compile(backend='neuron')"

    ids = torch.randint(0, 256, (1, 6))
    out = _generate(neuron, ids.to("neuron"), 32)
    assert torch.equal(out.cpu(), _generate(cpu, ids, 32))
    after = torch_neuronx.compile.metrics()
    assert after["recompiles"] == 0, after["recompile_reasons"]
    assert after["compiles"] == warmed["compiles"] and after["graphs"] == warmed["graphs"]
    assert after["cache_hits"] > warmed["cache_hits"]


def test_transformers_default_compile_config(models: tuple) -> None:
    """`CompileConfig()` asks for Inductor with mode="reduce-overhead", as on CUDA: on neuron the
    decode step compiles with the neuron backend and the tokens equal CPU's."""
    cpu, neuron = models
    torch_neuronx.compile.reset_metrics()
    config = transformers.CompileConfig()
    assert (config.backend, config.mode) == ("inductor", "reduce-overhead")
    ids = torch.randint(0, 256, (1, 6))
    every_output = {"return_dict_in_generate": True, "output_scores": True, "output_logits": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = neuron.generate(
            ids.to("neuron"), max_new_tokens=8, do_sample=False, cache_implementation="static", max_cache_len=64,
            compile_config=config, **every_output,
        )  # fmt: skip
        ref = cpu.generate(ids, max_new_tokens=8, do_sample=False, **every_output)
    assert torch.equal(out.sequences.cpu(), ref.sequences)
    assert_same(ref.logits, out.logits, rtol=1e-4, atol=1e-4)
    assert_same(ref.scores, out.scores, rtol=1e-4, atol=1e-4)
    assert torch_neuronx.compile.metrics()["graphs"] >= 1


def test_fullgraph_decode_does_not_recompile_for_a_shorter_prompt(models: tuple) -> None:
    """Transformers' own checks (fullgraph forward from generate; no recompile with a smaller
    length): once warm, a shorter prompt decodes with the same graph under `fail_on_recompile`."""
    cpu, neuron = models
    config = transformers.CompileConfig(fullgraph=True, dynamic=False)

    def generate(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.generate(
                ids, max_new_tokens=5, do_sample=False, cache_implementation="static", max_cache_len=64,
                compile_config=config,
            )  # fmt: skip

    generate(neuron, torch.randint(0, 256, (1, 9)).to("neuron"))
    short = torch.randint(0, 256, (1, 4))
    with torch.compiler.set_stance("fail_on_recompile"):
        out = generate(neuron, short.to("neuron"))
    assert torch.equal(out.cpu(), _generate(cpu, short, 5))


def test_repeated_generate_builds_nothing(models: tuple) -> None:
    """A second identical generate lowers no module for XLA at all: no graph, no eager kernel,
    nothing JAX would rebuild behind our caches."""
    _, neuron = models
    ids = torch.randint(0, 256, (1, 6)).to("neuron")
    _generate(neuron, ids, 8)
    before = torch_neuronx.metrics()["xla_lowerings"]
    _generate(neuron, ids, 8)
    assert torch_neuronx.metrics()["xla_lowerings"] == before


def test_decode_step_is_one_executable(models: tuple) -> None:
    _, neuron = models
    torch_neuronx.compile.reset_metrics()
    _generate(neuron, torch.randint(0, 256, (1, 6)).to("neuron"), 3)
    assert torch_neuronx.compile.metrics()["eager_node_calls"] == 0


def test_bench_train_step_runs_each_configuration_in_a_new_process() -> None:
    """The `torchneuron bench` train-step rows: the arguments reach the new process intact (the
    compiled optimizer included) and it reports a step time."""
    from torch_neuronx.bench.torch_compile import train_step_in_new_process

    result = train_step_in_new_process("neuron", "neuron", 1, True)
    assert result["step_s"] > 0 and result["first_step_s"] >= result["step_s"]
