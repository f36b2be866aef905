"""torch.compile(backend="neuron"): compiled vs eager (neuron) vs CPU, input mutation, RNG
streams, recompiles, fallback execution and options."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch
from compare import assert_same, to

import torch_neuronx
from torch_neuronx.compile.graph import NeuronCompileError
from torch_neuronx.ops import LOWERINGS, Lowering


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    torch._dynamo.reset()
    torch_neuronx.compile.reset_metrics()
    yield
    torch._dynamo.reset()


def compiled(fn: Any, **kwargs: Any) -> Any:
    return torch.compile(fn, backend="neuron", **kwargs)


def stats() -> dict:
    return torch_neuronx.compile.metrics()


def three_way(make: Any, inputs: tuple, rtol: float = 1e-4, atol: float = 1e-5) -> Any:
    """make() -> a fresh fn (module or function); its output compiled on neuron must equal
    eager on neuron and eager on CPU."""
    cpu_fn, eager_fn, comp_fn = make("cpu"), make("neuron"), compiled(make("neuron"))
    cpu = cpu_fn(*to("cpu", inputs))
    eager = eager_fn(*to("neuron", inputs))
    comp = comp_fn(*to("neuron", inputs))
    assert_same(cpu, eager, rtol, atol)
    assert_same(cpu, comp, rtol, atol)
    return comp


def one_executable() -> None:
    s = stats()
    assert not s["eager_nodes"], f"nodes ran eagerly (missing lowerings): {s['eager_nodes']}"


# ---- registration -------------------------------------------------------------------------


def test_backend_registered_lazily() -> None:
    code = (
        "import sys, torch\n"
        "assert 'torch._dynamo' not in sys.modules and 'jax' not in sys.modules, 'eager import'\n"
        "import torch._dynamo\n"
        "assert 'neuron' in torch._dynamo.list_backends()\n"
        "assert 'jax' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_metrics_merged() -> None:
    compiled(lambda x: x + 1)(torch.ones(2, device="neuron"))
    merged = torch_neuronx.metrics()["compile"]
    assert merged["graphs"] == 1 and merged["compiles"] == 1


# ---- numerics: one executable ---------------------------------------------------------------


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> tuple:
    z = torch.sigmoid(x * y + 0.5) - torch.tanh(y).exp() / 3
    w = z.t().contiguous()[1:] * 2.5
    return z.where(x > 0, y), w.sqrt().abs(), (x.to(torch.float64) + 1).neg()


def test_pointwise_graph_is_one_executable() -> None:
    out = three_way(lambda d: _pointwise, (torch.randn(4, 6), torch.randn(4, 6)))
    assert out[1].shape == (5, 4)
    one_executable()
    s = stats()
    assert s["compiles"] == 1 and s["graphs"] == 1


def test_cached_executable_reused() -> None:
    fn = compiled(_pointwise, fullgraph=True)
    x, y = torch.randn(4, 6, device="neuron"), torch.randn(4, 6, device="neuron")
    for _ in range(3):
        fn(x, y)
    s = stats()
    assert s["compiles"] == 1 and s["cache_hits"] == 2 and s["recompiles"] == 0


def test_repeated_calls_see_new_values_and_new_storages() -> None:
    """A hit (keyed natively where the native module runs) reads each call's own storages and
    float inputs: new values, a different storage of the same shape, a view of a bigger one,
    and an input it mutates."""
    fn = compiled(lambda x, s, acc: (acc.add_(x), x * s + 1)[1])
    acc_cpu, acc = torch.zeros(4, 6), torch.zeros(4, 6, device="neuron")
    base = torch.randn(8, 6)
    calls = [(torch.randn(4, 6), 0.5), (torch.randn(4, 6), 2.0), (base[:4], -1.5)] * 2
    for x, s in calls:
        out = fn(base.to("neuron")[:4] if x.data_ptr() == base.data_ptr() else x.to("neuron"), s, acc)
        acc_cpu += x
        assert_same(x * s + 1, out, 1e-6, 1e-6)
    assert_same(acc_cpu, acc, 1e-6, 1e-6)
    assert stats()["cache_hits"] >= 3


def _broadcast_operands(x: torch.Tensor, t: torch.Tensor, i: torch.Tensor, b: torch.Tensor) -> tuple:
    """Small values computed in the graph and broadcast by a pointwise op (RoPE's cos/sin
    table, a norm's rsqrt): the backend writes each to its own buffer once."""
    rope = x * torch.cos(t).unsqueeze(0) + x.flip(-1) * torch.sin(t).unsqueeze(0)
    norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return rope, norm, x * t.neg().unsqueeze(0), i + (i * 3).unsqueeze(0), b & (~b).unsqueeze(0)


def test_broadcast_operands_are_computed_once_and_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_neuronx.compile import executable

    built: list = []
    init = executable.Executable.__init__
    monkeypatch.setattr(executable.Executable, "__init__", lambda self, *a: (init(self, *a), built.append(self))[0])
    specials = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-30, -2.5, 3.0])
    t = torch.cat([specials, torch.randn(8)]).reshape(2, 8)
    i = torch.tensor([[torch.iinfo(torch.int64).min, -1, 0, 7]] * 2)
    b = torch.tensor([[True, False, True, False]] * 2)
    inputs = (torch.randn(3, 2, 8), t, i, b)
    got = three_way(lambda d: _broadcast_operands, inputs)
    want = _broadcast_operands(*inputs)
    assert torch.equal(got[2].cpu().signbit(), want[2].signbit())  # -(+0.0) stays -0.0
    (graph,) = built
    assert {"aten.unsqueeze.default", "aten.rsqrt.default"} <= {str(n.target) for n in graph.materialized}
    one_executable()


def test_views_of_inputs_in_outputs() -> None:
    def fn(x: torch.Tensor) -> tuple:
        return x[1:], x.t(), x.view(-1)[2:5], x * 2

    x = torch.randn(3, 4, device="neuron")
    got = compiled(fn)(x)
    want = fn(x.cpu())
    assert_same(list(want), list(got))
    for view in got[:3]:
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert got[0].storage_offset() == 4 and got[1].stride() == (1, 4)
    x.add_(1)  # the outputs are views: they see it, as in eager
    assert_same(want[0] + 1, got[0])


def test_view_output_of_an_intermediate_shares_its_base() -> None:
    def fn(x: torch.Tensor) -> tuple:
        y = x + 1
        return y, y.t()

    y, yt = compiled(fn)(torch.randn(3, 4, device="neuron"))
    assert yt.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    y.mul_(0)
    assert yt.abs().sum().item() == 0


def test_output_views_are_made_on_their_root_without_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Views among the outputs (here the backward's weight grads, permutes of permutes of `mm`s)
    are made on their root's storage from the traced geometry; none goes back through the
    dispatcher. A root whose strides differ from the trace's gets the view replayed instead."""
    from torch_neuronx.compile import graph

    replayed: list[str] = []
    evaluate = graph._evaluate
    replay = lambda node, env: (replayed.append(str(node.target)), evaluate(node, env))[1]  # noqa: E731
    monkeypatch.setattr(graph, "_evaluate", replay)
    graphs: list = []
    init = graph.CompiledGraph.__init__
    monkeypatch.setattr(graph.CompiledGraph, "__init__", lambda self, *a: (init(self, *a), graphs.append(self))[0])

    def make(device: str) -> Any:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)

    x = torch.randn(5, 4)
    cpu, neuron = make("cpu"), make("neuron")
    step = compiled(neuron)
    for _ in range(2):
        step(x.to("neuron")).square().sum().backward()
        cpu(x).square().sum().backward()
    assert_same([p.grad for p in cpu.parameters()], [p.grad for p in neuron.parameters()])
    backward = graphs[-1]
    plans = backward.view_plans
    assert all(plans[n] is not None for n in backward.view_outputs) and backward.view_outputs and not replayed

    node = next(n for n in backward.view_outputs if len(plans[n][1]) == 2)
    root = plans[node][0]
    rows, cols = root.meta["val"].shape
    env = {root: torch.randn(cols, rows, device="neuron").t()}  # column-major: the trace had it row-major
    graph._make_view(node, plans, env, set())
    assert len(replayed) == 2 and env[node].untyped_storage().data_ptr() == env[root].untyped_storage().data_ptr()
    assert_same(env[root].cpu(), env[node])  # a permute of a permute


def test_saved_views_of_an_input_at_a_storage_offset() -> None:
    """An input that is itself a view at an offset (an MoE expert's slice of one weight, as DBRX
    passes it) reaches the backward as forward outputs that view it: made on its storage at the
    root's offset plus the traced difference, not twice the root's offset (out of bounds)."""

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w.t()).square().sum()

    weight, x = torch.randn(4 * 8, 6), torch.randn(3, 6)
    grads = []
    for device, step in (("cpu", fn), ("neuron", compiled(fn))):
        for expert in (2, 3):
            part = weight.to(device).view(4, 8, 6)[expert]  # storage offset 96, then 144
            xs = x.clone().to(device).requires_grad_()  # a leaf on both devices
            step(xs, part).backward()
            grads.append(xs.grad)
    assert_same(grads[:2], grads[2:])


# ---- numerics: models (graph splits until their ops land) -----------------------------------


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.nn.functional.gelu(self.a(x)))


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(x.flatten(1))


class Block(torch.nn.Module):
    """A pre-norm transformer block (causal self-attention + MLP)."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


def _model(cls: type) -> Any:
    def make(device: str) -> torch.nn.Module:
        torch.manual_seed(0)
        return cls().to(device)

    return make


MODELS = {"mlp": (MLP, (8, 16)), "cnn": (CNN, (2, 3, 8, 8)), "block": (Block, (2, 5, 32))}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_forward(name: str) -> None:
    cls, shape = MODELS[name]
    three_way(_model(cls), (torch.randn(shape),))


@pytest.mark.parametrize("name", list(MODELS))
def test_model_forward_is_one_executable(name: str) -> None:
    cls, shape = MODELS[name]
    with torch.no_grad():
        compiled(_model(cls)("neuron"))(torch.randn(shape, device="neuron"))
    one_executable()


def _train(device: str, compile_model: bool, steps: int = 4) -> list[float]:
    torch.manual_seed(0)
    model = MLP().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
    forward = compiled(model) if compile_model else model

    def step() -> torch.Tensor:
        loss = ((forward(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return [step().item() for _ in range(steps)]


def test_train_step_loss_trajectory() -> None:
    cpu = _train("cpu", False)
    eager = _train("neuron", False)
    comp = _train("neuron", True)
    torch.testing.assert_close(eager, cpu, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(comp, cpu, rtol=1e-5, atol=1e-6)
    assert stats()["recompiles"] == 0


def test_train_step_forward_and_backward_are_one_executable_each() -> None:
    _train("neuron", True, steps=2)
    one_executable()
    assert stats()["compiles"] == 2


OPTIMIZERS = {
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.1),
    "Adam amsgrad": lambda p: torch.optim.Adam(p, lr=0.1, amsgrad=True),
    "SGD nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "NAdam": lambda p: torch.optim.NAdam(p, lr=0.1),
    "RAdam": lambda p: torch.optim.RAdam(p, lr=0.1),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_compiled_optimizer_step(name: str) -> None:
    def run(device: str, compile_step: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        params = [torch.randn(4, 3).to(device).requires_grad_(), torch.randn(3).to(device).requires_grad_()]
        opt = OPTIMIZERS[name](params)
        step = compiled(opt.step) if compile_step else opt.step
        for i in range(3):
            for p in params:
                p.grad = torch.full_like(p, 0.1 * (i + 1)) + p.detach()
            step()
        return [p.detach() for p in params]

    cpu = run("cpu", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = run("neuron", True)
    assert not [w for w in caught if "neuron compile" in str(w.message)]
    one_executable()  # the CPU step counters run on the host, the math from them in the executable
    # Compiled, bias corrections are float32 tensor math on the step counter (inductor's too: for
    # AdamW 2.1e-6 from eager here, 1.2e-7 from ours); eager computes them as Python floats.
    assert_same(cpu, step, rtol=1e-4, atol=1e-5)


# ---- input mutation ---------------------------------------------------------------------------


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("ema", torch.zeros(4))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ema.mul_(0.5).add_(x * 0.5)
        self.calls += 1
        return self.ema * 2


def test_buffer_mutation() -> None:
    cpu, dev = Counter(), Counter().to("neuron")
    fn = compiled(dev)
    ema_ptr = dev.ema.data_ptr()
    for i in range(3):
        x = torch.full((4,), float(i + 1))
        assert_same(cpu(x), fn(x.to("neuron")))
    assert_same(cpu.ema, dev.ema)
    assert dev.calls.item() == 3 and dev.ema.data_ptr() == ema_ptr
    one_executable()


def test_mutation_through_a_view_of_an_input() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        x[1:].mul_(2)
        x.t()[0].add_(10)
        return x * 1

    x = torch.randn(3, 4)
    dev = x.to("neuron")
    assert_same(fn(x.clone()), compiled(fn)(dev))
    fn(x)
    assert_same(x, dev)


def _write_cache(cache: torch.Tensor, pos: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    cache.index_copy_(1, pos, value)
    return cache.sum(-1)


def test_index_copy_into_static_cache() -> None:
    cpu_cache = torch.zeros(2, 8, 4)
    cache = cpu_cache.to("neuron")
    torch._dynamo.mark_static_address(cache)
    ptr = cache.data_ptr()
    fn = compiled(_write_cache)
    for step in range(4):
        pos = torch.tensor([step])
        value = torch.randn(2, 1, 4)
        assert_same(_write_cache(cpu_cache, pos, value), fn(cache, pos.to("neuron"), value.to("neuron")))
    assert_same(cpu_cache, cache)
    assert cache.data_ptr() == ptr
    s = stats()
    assert s["recompiles"] == 0 and s["graphs"] == 1


def test_index_copy_into_static_cache_is_one_executable() -> None:
    cache = torch.zeros(2, 8, 4, device="neuron")
    compiled(_write_cache)(cache, torch.tensor([1], device="neuron"), torch.ones(2, 1, 4, device="neuron"))
    one_executable()


def test_static_cache_update_writes_in_place() -> None:
    """The cache (a mutated graph input) is donated to the executable: each decode step updates
    it where it is instead of copying the whole cache into fresh memory; the second step keeps
    the first step's write."""
    from torch_neuronx.runtime.memory import memory

    cache, cpu = torch.zeros(2, 8, 4, device="neuron"), torch.zeros(2, 8, 4)
    step = compiled(_write_cache)
    for position in (1, 5):
        old = memory()[cache.untyped_storage().data_ptr()].buffer
        value = torch.full((2, 1, 4), float(position))
        step(cache, torch.tensor([position], device="neuron"), value.to("neuron"))
        _write_cache(cpu, torch.tensor([position]), value)
        assert old.is_deleted()
    assert torch.equal(cache.cpu(), cpu)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, i: x.index_copy(0, i, torch.ones(2, 3, device=x.device)),
        lambda x, i: x[i] * 2,
        lambda x, i: x.index_copy_(0, i, torch.ones(2, 3, device=x.device)).sum(),
    ],
    ids=["index_copy", "index", "index_copy_ into an input"],
)
def test_index_out_of_range_raises_as_cpu(fn: Any) -> None:
    """A bad index in a compiled graph is PyTorch's IndexError at the next sync, naming the op,
    never a silent write or read elsewhere."""
    x, bad = torch.zeros(4, 3), torch.tensor([0, 5])
    with pytest.raises(IndexError) as cpu:
        fn(x.clone(), bad)
    with pytest.raises(IndexError, match=r"compiled graph .*: aten\.index") as neuron:
        compiled(fn)(x.to("neuron"), bad.to("neuron")).cpu()
    assert str(cpu.value) in str(neuron.value)
    good = torch.tensor([1, 2])
    assert_same(fn(x.clone(), good), compiled(fn)(x.to("neuron"), good.to("neuron")))


# ---- randomness -------------------------------------------------------------------------------


@torch.library.custom_op("neuron_test::noise", mutates_args=(), device_types="cpu")
def noise(x: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError("neuron_test::noise only runs on neuron")


@noise.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _noise(x: Any, key: Any = None) -> Any:
    return x + jax.random.normal(key, x.shape, x.dtype)


LOWERINGS[torch.ops.neuron_test.noise.default] = Lowering(_noise, random=True)


def _noisy(x: torch.Tensor) -> tuple:
    a = torch.ops.neuron_test.noise(x)
    b = torch.ops.neuron_test.noise(a * 2)
    return a, b


def test_random_ops_draw_the_eager_stream() -> None:
    x = torch.zeros(5, device="neuron")
    torch.neuron.manual_seed(7)
    eager = [*_noisy(x), *_noisy(x)]
    eager_state = torch.neuron.get_rng_state()
    torch.neuron.manual_seed(7)
    fn = compiled(_noisy, fullgraph=True)
    comp = [*fn(x), *fn(x)]
    assert torch.equal(torch.neuron.get_rng_state(), eager_state)
    for e, c in zip(eager, comp):
        torch.testing.assert_close(c.cpu(), e.cpu())
    assert not torch.equal(comp[0].cpu(), comp[2].cpu())  # each call advances the state
    one_executable()


def test_seeded_dropout_matches_eager() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x * 2, p=0.5, training=True) + 1

    x = torch.randn(64, device="neuron")
    torch.manual_seed(3)
    torch.neuron.manual_seed(3)
    eager = fn(x)
    torch.manual_seed(3)
    torch.neuron.manual_seed(3)
    comp = compiled(fn)(x)
    torch.testing.assert_close(comp.cpu(), eager.cpu())
    assert 0 < (comp.cpu() == 1).sum() < 64


def _random_mix(x: torch.Tensor) -> tuple:
    drop = torch.nn.functional.dropout(x, p=0.3, training=True)
    return drop, torch.rand_like(x) + x, torch.bernoulli(torch.full_like(x, 0.5)), torch.randn_like(x)


def test_functional_random_ops_match_eager_streams() -> None:
    x = torch.randn(4, 32, device="neuron")
    torch.manual_seed(5)
    torch.neuron.manual_seed(5)
    eager = _random_mix(x)
    torch.manual_seed(5)
    torch.neuron.manual_seed(5)
    comp = compiled(_random_mix)(x)
    for e, c in zip(eager, comp):
        torch.testing.assert_close(c.cpu(), e.cpu())


def test_functional_random_ops_are_one_executable() -> None:
    compiled(_random_mix)(torch.randn(4, 32, device="neuron"))
    one_executable()


# ---- shapes and recompiles --------------------------------------------------------------------


def test_recompile_reason_on_shape_change() -> None:
    fn = compiled(lambda x: x * 2 + 1, dynamic=False)
    fn(torch.ones(4, 8, device="neuron"))
    fn(torch.ones(6, 8, device="neuron"))
    s = stats()
    assert s["recompiles"] == 1
    reason = s["recompile_reasons"][0]["reason"]
    assert "L_x_" in reason and "[4, 8]" in reason and "[6, 8]" in reason, reason


def test_dynamic_true_specialises_per_shape() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).view(x.shape[0], -1, 2) + 1

    comp = compiled(fn, dynamic=True)
    for rows in (4, 6, 4):
        x = torch.randn(rows, 8)
        assert_same(fn(x), comp(x.to("neuron")))
    s = stats()
    assert s["graphs"] == 1, "dynamic=True: one Dynamo graph for all shapes"
    assert s["compiles"] == 2 and s["recompiles"] == 1, s
    assert "shape (4, 8) -> (6, 8)" in s["recompile_reasons"][0]["reason"]


def test_graph_break_runs_eager_between_regions() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.exp()
        if y.sum().item() > 0:  # data-dependent branch: a graph break
            y = y * 3
        return y - 1

    x = torch.randn(5)
    assert_same(fn(x), compiled(fn)(x.to("neuron")))
    assert stats()["graphs"] >= 2


def test_ops_in_a_frame_dynamo_runs_eagerly_are_never_traced() -> None:
    # A graph break inside a loop makes Dynamo run the whole frame eagerly, offering each callee
    # frame to itself: the upload of `torch.tensor([])` runs JAX dataclass __init__s (from
    # "<string>") that Dynamo used to trace, wrapping a NumPy array as a fake tensor and failing.
    def fn(x: torch.Tensor) -> torch.Tensor:
        out = []
        for i in range(2):
            kept = torch.nonzero(x > i).flatten()
            out.append(torch.cat([kept.float(), torch.tensor([], device=x.device)]))
        return torch.cat(out)

    x = torch.arange(4.0)
    assert_same(fn(x), compiled(fn)(x.to("neuron")))


def test_cpu_scalar_tensors_join_as_values() -> None:
    def fn(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return x * scale + scale

    x, scale = torch.randn(4), torch.tensor(2.5)
    fn_c = compiled(fn)
    for value in (2.5, -1.0):
        scale.fill_(value)
        assert_same(fn(x, scale), fn_c(x.to("neuron"), scale))
    one_executable()
    assert stats()["compiles"] == 1


def test_cpu_scalar_math_runs_on_the_host_only_where_it_must(monkeypatch: pytest.MonkeyPatch) -> None:
    def fn(x: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        step.add_(1)  # as an optimizer's step counter: CPU math between device ops
        return y / (1 - 0.9**step) + x.cos()

    from torch_neuronx.compile import graph

    on_host, evaluate = [], graph._evaluate
    monkeypatch.setattr(graph, "_evaluate", lambda node, env: on_host.append(str(node.target)) or evaluate(node, env))
    x, step = torch.randn(4, 3), torch.tensor(2.0)
    fn_c, step_c = compiled(fn), step.clone()
    for _ in range(2):
        assert_same(fn(x, step), fn_c(x.to("neuron"), step_c))
    assert step_c.device.type == "cpu" and step_c.item() == step.item() == 4.0
    # The counter is updated on the host (it is a CPU tensor); the correction computed from it
    # is computed inside the one executable, which reads the counter as a value.
    assert set(on_host) == {"aten.add.Tensor", "aten.copy_.default"}
    one_executable()
    assert stats()["compiles"] == 1 and stats()["eager_node_calls"] == 0


def test_cpu_values_a_graph_returns_or_reduces_stay_cpu_tensors() -> None:
    def fn(x: torch.Tensor, s: torch.Tensor, c: torch.Tensor) -> tuple:
        t = s * 2  # returned: a CPU tensor, as in eager
        return x * t, t, x * c.sum() + (s - 1).exp()

    x, s, c = torch.randn(4), torch.tensor(1.5), torch.randn(3)
    got = compiled(fn)(x.to("neuron"), s, c)
    want = fn(x, s, c)
    assert [v.device.type for v in got] == ["neuron", "cpu", "neuron"]
    assert_same([want[0], want[2]], [got[0], got[2]])
    torch.testing.assert_close(got[1], want[1])
    one_executable()


def test_fullgraph_true() -> None:
    x = torch.randn(3, 3)
    assert_same(torch.cos(x) * x, compiled(lambda t: torch.cos(t) * t, fullgraph=True)(x.to("neuron")))


# ---- options and fallback ---------------------------------------------------------------------


@torch.library.custom_op("neuron_test::unlowered", mutates_args=(), device_types="cpu")
def unlowered(x: torch.Tensor) -> torch.Tensor:
    """No lowering: eager on neuron runs it through the CPU fallback."""
    return x.flip(0) * 3


@unlowered.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _with_unlowered(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.neuron_test.unlowered(x + 1) * 2


def test_fallback_execution_splits_the_graph() -> None:
    x = torch.randn(6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(_with_unlowered, options={"fallback_execution": True})(x.to("neuron"))
    assert_same(_with_unlowered(x), got)
    assert any("neuron_test.unlowered" in str(w.message) and "eagerly" in str(w.message) for w in caught)
    s = stats()
    assert s["eager_nodes"] == {"neuron_test.unlowered.default": 1}
    assert s["compiles"] == 2  # the regions before and after


def test_fallback_execution_off_names_the_node() -> None:
    fn = compiled(_with_unlowered, options={"fallback_execution": False})
    with pytest.raises(Exception, match=r"node `unlowered` \(neuron_test.unlowered.default\) has no lowering"):
        fn(torch.randn(6, device="neuron"))


def test_disable_fallback_env_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK", "1")
    x = torch.randn(6).to("neuron")
    with pytest.raises(Exception, match="fallback_execution"):
        compiled(_with_unlowered)(x)


@torch.library.custom_op("neuron_test::wrong_dtype", mutates_args=(), device_types="cpu")
def wrong_dtype(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@wrong_dtype.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _wrong_dtype(x: Any) -> Any:
    return x.astype(jnp.float64)


LOWERINGS[torch.ops.neuron_test.wrong_dtype.default] = Lowering(_wrong_dtype)


def test_lowering_disagreeing_with_meta_is_a_clear_error() -> None:
    fn = compiled(lambda x: torch.ops.neuron_test.wrong_dtype(x) + 1, options={"fallback_execution": False})
    with pytest.raises(NeuronCompileError, match=r"wrong_dtype.*returned float64\[3\] but PyTorch gives torch.float32"):
        fn(torch.randn(3, device="neuron"))


def test_lowering_failing_at_trace_time_falls_back_to_eager() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.neuron_test.wrong_dtype(x * 2) + 1

    x = torch.randn(3, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(fn, options={"fallback_execution": True})(x)
    assert any("neuron_test.wrong_dtype" in str(w.message) and "returned float64" in str(w.message) for w in caught)
    assert_same(fn(x.cpu()).double(), got)  # eager runs the same (wrong-dtype) lowering
    # the add after it then sees eager's float64 where the graph says float32: it runs eagerly too
    assert stats()["eager_nodes"] == {"neuron_test.wrong_dtype.default": 1, "aten.add.Tensor": 1}


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(Exception, match="unknown option"):
        compiled(lambda t: t + 1, options={"no_such_option": 1})(torch.randn(2, device="neuron"))


def test_debug_dir_and_log_level(tmp_path: Any) -> None:
    """TORCH_NEURONX_DEBUG_DIR collects each FX graph and XLA's dumps (modules named after what
    they run); TORCH_NEURONX_LOG_LEVEL=INFO reports compiles and recompiles with the reason."""
    code = (
        "import torch\n"
        "f = torch.compile(lambda a: torch.sin(a) * 2, backend='neuron', dynamic=False)\n"
        "f(torch.ones(3, device='neuron')); f(torch.ones(5, device='neuron'))\n"
    )
    env = {
        **os.environ,
        "TORCH_NEURONX_DEBUG_DIR": str(tmp_path),
        "TORCH_NEURONX_LOG_LEVEL": "info",
        "TORCH_NEURONX_CACHE_DIR": str(tmp_path / "cache"),
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "[torch_neuronx INFO] compiled `inference 0/0` (2 nodes)" in out.stderr
    assert "recompiled frame 0" in out.stderr and "L_a_: float32[3] -> float32[5]" in out.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name != "cache"]
    graph = (run_dir / "graphs" / "inference_0_0.py").read_text()
    assert "torch.ops.aten.sin.default" in graph and "f32[3]" in graph
    assert any("jit_neuron_inference" in p.name for p in (run_dir / "xla").iterdir())
    assert any("jit_aten_ones_default" in p.name for p in (run_dir / "xla").iterdir())


def test_bad_log_level_warns_and_import_still_works() -> None:
    env = {**os.environ, "TORCH_NEURONX_LOG_LEVEL": "loud"}
    code = "import torch; print(torch.ones(2, device='neuron').sum().item())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2.0"
    assert "TORCH_NEURONX_LOG_LEVEL='LOUD' is not a logging level" in out.stderr
