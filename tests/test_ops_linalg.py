"""Matrix products, linear algebra and distances on neuron against PyTorch CPU
(torch_neuronx/ops/linalg.py), natively: a slice of the OpInfo entries, forward and backward."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as nnf
from compare import assert_same
from families import check_family
from opinfo import fallback_disabled, find

ENTRIES = [
    "mm",
    "addmm",
    "baddbmm",
    "matmul",
    "nn.functional.bilinear",
    "cdist",
    "cov",
    "corrcoef",
    "linalg.cholesky",
    "linalg.qr",
    "linalg.solve",
    "linalg.inv",
    "linalg.det",
    "linalg.eigh",
    "linalg.eig",
    "linalg.eigvals",
    "linalg.householder_product",
    "linalg.lstsq",
    "ormqr",
    "linalg.ldl_factor",
    "linalg.ldl_factor_ex",
    "linalg.ldl_solve",
]


@pytest.mark.parametrize("name", ENTRIES)
def test_opinfo_float32_forward_backward(name: str) -> None:
    opinfo = find(name)
    assert check_family(("linalg",), opinfo, torch.float32, grad=opinfo.supports_autograd, max_samples=3) > 0


def test_geqrf_is_lapacks_compact_qr() -> None:
    assert check_family(("linalg",), find("geqrf"), torch.float64, grad=False, max_samples=3) > 0


def test_matrix_exp() -> None:
    """float64 (forward and backward) equals CPU's. In float32 XLA's Pade approximant and
    PyTorch's Taylor polynomials each err by up to ~1e-3 relative on OpInfo's batch sample, so
    there neuron must be at least as close to the float64 result as CPU is."""
    assert check_family(("linalg",), find("matrix_exp"), torch.float64, grad=True, max_samples=3) > 0
    for sample in list(find("matrix_exp").sample_inputs("cpu", torch.float32))[:3]:
        exact = torch.linalg.matrix_exp(sample.input.double())
        scale = exact.abs().amax((-2, -1), keepdim=True)
        cpu_error = ((torch.linalg.matrix_exp(sample.input) - exact).abs() / scale).max()
        dev_error = ((torch.linalg.matrix_exp(sample.input.to("neuron")).cpu() - exact).abs() / scale).max()
        assert dev_error <= max(cpu_error, 1e-6), (dev_error, cpu_error)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_norms_and_zero_distances(p: float) -> None:
    a = torch.randn(2, 5, 3)
    b = torch.cat([a[:, :2], torch.randn(2, 3, 3)], 1)  # rows 0-1 coincide: distance 0, gradient 0
    cpu = [a.clone().requires_grad_(), b.clone().requires_grad_()]
    dev = [t.detach().to("neuron").requires_grad_() for t in cpu]
    with fallback_disabled():
        got = torch.cdist(*dev, p=p)
        got.sum().backward()
    want = torch.cdist(*cpu, p=p)
    want.sum().backward()
    assert_same(want.detach(), got.detach())
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)


def test_equal() -> None:
    x = torch.tensor([1.0, float("nan"), 3.0])
    with fallback_disabled():
        for a, b in [(x[::2], x[::2]), (x, x), (x[:2], x[:1]), (torch.arange(3), torch.arange(3.0))]:
            assert torch.equal(a.to("neuron"), b.to("neuron")) == torch.equal(a, b)
        assert torch.equal(torch.empty(0, device="neuron"), torch.empty(0, device="neuron"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
def test_products_of_transposed_operands(layout: str, dtype: torch.dtype) -> None:
    """Each operand read as stored or through a transpose (weight gradients are x^T @ g,
    attention's backward p^T @ dO): eager and compiled match CPU."""

    def operand(x: torch.Tensor, transposed: str) -> torch.Tensor:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2) if transposed == "T" else x

    def products(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, ab: torch.Tensor, bb: torch.Tensor) -> list:
        a, b, ab, bb = operand(a, layout[0]), operand(b, layout[1]), operand(ab, layout[0]), operand(bb, layout[1])
        return [a @ b, torch.addmm(c, a, b, beta=0.5), ab @ bb, torch.baddbmm(c, ab, bb, alpha=2.0)]

    make = torch.Generator().manual_seed(0)
    shapes = [(48, 40), (40, 24), (48, 24), (3, 48, 40), (3, 40, 24)]
    inputs = [torch.randn(s, generator=make).to(dtype) for s in shapes]
    want = products(*inputs)
    rtol, atol = (1e-5, 1e-4) if dtype == torch.float32 else (1.6e-2, 5e-2)
    with fallback_disabled():
        eager = products(*[x.to("neuron") for x in inputs])
        compiled = torch.compile(products, backend="neuron", fullgraph=True)(*[x.to("neuron") for x in inputs])
    for w, e, c in zip(want, eager, compiled):
        torch.testing.assert_close(e.cpu(), w, rtol=rtol, atol=atol)
        torch.testing.assert_close(c.cpu(), w, rtol=rtol, atol=atol)


# ---- addr and _trilinear: CPU's rounding in float16/bfloat16 --------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("scalars", [{}, {"beta": 0.6, "alpha": 0.2}, {"beta": 0}, {"beta": 2, "alpha": 3}])
def test_addr_as_cpu(dtype: torch.dtype, scalars: dict) -> None:
    """CPU's addr kernel: beta * x + alpha * v1 * v2 with the scalars in the dtype, every step
    rounded to float16/bfloat16 (bit-exact there); beta == 0 ignores x (its NaN too)."""
    if dtype == torch.bool:
        scalars = {k: bool(v) for k, v in scalars.items()}
    elif not dtype.is_floating_point and any(isinstance(v, float) for v in scalars.values()):
        pytest.skip("CPU rejects float scalars for integral inputs (test_addr_errors)")
    torch.manual_seed(0)
    x, v1, v2 = (torch.randn(*shape) * 4 for shape in ((30, 40), (30,), (40,)))
    x[0, 0] = float("nan")
    x, v1, v2 = (t.to(dtype) for t in (x, v1, v2))
    exact = {"rtol": 0, "atol": 0} if dtype in (torch.float16, torch.bfloat16) else {}
    with fallback_disabled():
        assert_same(
            torch.addr(x, v1, v2, **scalars), torch.addr(*(t.to("neuron") for t in (x, v1, v2)), **scalars), **exact
        )


@pytest.mark.parametrize(
    "shapes, scalars",
    [
        (((3, 4), (3, 1), (4,)), {}),
        (((3, 4), (3,), (1, 4)), {}),
        (((2, 4), (3,), (4,)), {}),
        (((2, 3, 4), (3,), (4,)), {}),
        (((3, 4), (3,), (4,)), {"beta": True}),
    ],
    ids=["vec1-2d", "vec2-2d", "expand-size", "expand-rank", "bool-beta"],
)
def test_addr_errors(shapes: tuple, scalars: dict) -> None:
    args = [torch.randn(*s) for s in shapes]
    with pytest.raises(RuntimeError) as cpu:
        torch.addr(*args, **scalars)
    with fallback_disabled(), pytest.raises(RuntimeError) as neuron:
        torch.addr(*(a.to("neuron") for a in args), **scalars)
    assert str(cpu.value) in str(neuron.value)


def test_addr_integral_float_scalar_error() -> None:
    args = [torch.arange(n) for n in (12, 3, 4)]
    args[0] = args[0].reshape(3, 4)
    for scalars in ({"beta": 0.5}, {"alpha": 1.5}):
        with pytest.raises(RuntimeError) as cpu:
            torch.addr(*args, **scalars)
        with fallback_disabled(), pytest.raises(RuntimeError) as neuron:
            torch.addr(*(a.to("neuron") for a in args), **scalars)
        assert str(cpu.value) in str(neuron.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    "layout",
    [([1, 3], [0], [1, 2], [2, 3], 1), ([1, 3], [0], [1, 2], [2, 3], 2), ([1, 3], [0], [1, 2], [0, 2, 3], 0)],
    ids=["bilinear", "unroll-summed", "batch-summed"],
)
def test_trilinear_staged_as_cpu(dtype: torch.dtype, layout: tuple) -> None:
    """bilinear's _trilinear: two contractions each rounded to the dtype, a summed unroll dim added
    slice by slice (bit-exact for float16/bfloat16)."""
    torch.manual_seed(0)
    i1, i3, w = torch.randn(6, 4).to(dtype), torch.randn(6, 5).to(dtype), torch.randn(7, 4, 5).to(dtype)
    exact = {"rtol": 0, "atol": 0} if dtype != torch.float32 else {}
    with fallback_disabled():
        expected = torch._trilinear(i1, w, i3, *layout)
        got = torch._trilinear(i1.to("neuron"), w.to("neuron"), i3.to("neuron"), *layout)
        assert_same(expected, got, **exact)
        b = torch.randn(7).to(dtype)
        assert_same(nnf.bilinear(i1, i3, w, b), nnf.bilinear(*(t.to("neuron") for t in (i1, i3, w, b))), **exact)


def _lstsq_cases(dtype: torch.dtype, deficient: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Tall, square and wide A, a vector right-hand side, batches (broadcast ones too); with
    `deficient`, A's last column is zero (one matrix of a batch only): a rank that rounding cannot
    blur (a copied column leaves an ~eps residue that the rank rule of either side may count)."""
    torch.manual_seed(0)
    cases = []
    for m, n in [(5, 3), (3, 3), (2, 4)]:
        cases += [
            (torch.randn(m, n, dtype=dtype), torch.randn(m, 2, dtype=dtype)),
            (torch.randn(m, n, dtype=dtype), torch.randn(m, dtype=dtype)),
            (torch.randn(2, 3, m, n, dtype=dtype), torch.randn(2, 3, m, 2, dtype=dtype)),
            (torch.randn(2, 1, m, n, dtype=dtype), torch.randn(1, 3, m, 2, dtype=dtype)),
        ]
    if deficient:
        for a, _ in cases:
            a[..., -1] = 0
        batch = torch.randn(2, 5, 3, dtype=dtype)
        batch[1, :, 2] = 0
        cases.append((batch, torch.randn(2, 5, 2, dtype=dtype)))
    return cases


def _cpu_lstsq(a: torch.Tensor, b: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, ...]:
    """CPU's result; for gelsy (the default driver), CPU's gelsd solution and rank with gelsy's
    empty residuals and singular values. CPU's gelsy hands LAPACK an uninitialized column-pivot
    array, so where the rank is cut (rank-deficient A, or rcond inside the spectrum) the same call
    returns different ranks and solutions from run to run; gelsd's minimum-norm solution is the
    one gelsy defines."""
    expected = torch.linalg.lstsq(a, b, **kwargs)
    if kwargs.get("driver") not in (None, "gelsy"):
        return tuple(expected)
    svd = torch.linalg.lstsq(a, b, **{**kwargs, "driver": "gelsd"})
    return svd.solution, expected.residuals, svd.rank, expected.singular_values


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("deficient", [False, True], ids=["full-rank", "rank-deficient"])
def test_lstsq_drivers_as_cpu(driver: str | None, dtype: torch.dtype, deficient: bool) -> None:
    """Solution, residuals (present or empty as on CPU), rank and singular values, per driver."""
    if driver == "gels" and deficient:
        pytest.skip("gels assumes full rank: CPU's result for a rank-deficient A is LAPACK's rounding noise")
    kwargs = {} if driver is None else {"driver": driver}
    with fallback_disabled():
        for a, b in _lstsq_cases(dtype, deficient):
            expected = _cpu_lstsq(a, b, **kwargs)
            got = torch.linalg.lstsq(a.to("neuron"), b.to("neuron"), **kwargs)
            assert_same(expected, tuple(got), **({"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}))


def test_lstsq_rcond_and_gradient() -> None:
    """An rcond that cuts a clear gap in the spectrum, and autograd through the solution."""
    torch.manual_seed(0)
    a = torch.randn(6, 4, dtype=torch.float64) @ torch.diag(torch.tensor([1.0, 1.0, 1e-6, 1e-7], dtype=torch.float64))
    b = torch.randn(6, 2, dtype=torch.float64)
    with fallback_disabled():
        for driver in ("gelsy", "gelsd", "gelss"):
            expected = _cpu_lstsq(a, b, rcond=1e-3, driver=driver)
            got = torch.linalg.lstsq(a.to("neuron"), b.to("neuron"), rcond=1e-3, driver=driver)
            assert_same(expected, tuple(got))
        x = torch.randn(5, 3, requires_grad=True)
        y = torch.randn(5, 2)
        torch.linalg.lstsq(x, y).solution.sum().backward()
        xn = x.detach().to("neuron").requires_grad_()
        torch.linalg.lstsq(xn, y.to("neuron")).solution.sum().backward()
        assert_same(x.grad, xn.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "args",
    [
        (torch.randn(()), torch.randn(())),
        (torch.randn(3, 3), torch.randn(())),
        (torch.randn(3, 3), torch.randn(3, 3, dtype=torch.float64)),
        (torch.randn(3, 3), torch.randn(2, 2, 3, 3)),
        (torch.randn(3, 3), torch.randn(4, 3)),
        (torch.randn(3, 3), torch.randn(4)),
        (torch.randn(2, 4, 3), torch.randn(4, 2)),
        (torch.randn(2, 4, 3), torch.randn(2, 5)),
        (torch.randn(3, 3).long(), torch.randn(3, 3).long()),
        (torch.randn(3, 3), torch.randn(3, 3), None, "foo"),
    ],
    ids=["0d", "0d-other", "dtypes", "other-dims", "rows", "vector-rows", "batch", "batch-vector", "long", "driver"],
)
def test_lstsq_errors(args: tuple) -> None:
    a, b, *rest = args
    kwargs = {"driver": rest[1]} if rest else {}
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.lstsq(a, b, **kwargs)
    with fallback_disabled(), pytest.raises(RuntimeError) as neuron:
        torch.linalg.lstsq(a.to("neuron"), b.to("neuron"), **kwargs)
    assert str(cpu.value) in str(neuron.value)


@pytest.mark.parametrize("batched", [False, True])
def test_lstsq_gels_exactly_rank_deficient_raises(batched: bool) -> None:
    """gels on an A with an exactly zero column: LAPACK's info (the zero diagonal of R) as CPU's error."""
    a = torch.randn(2, 4, 3) if batched else torch.randn(4, 3)
    (a[1] if batched else a)[:, 2] = 0
    b = torch.randn(*a.shape[:-1], 2)
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.lstsq(a, b, driver="gels")
    with fallback_disabled(), pytest.raises(RuntimeError) as neuron:
        torch.linalg.lstsq(a.to("neuron"), b.to("neuron"), driver="gels").solution.cpu()
    assert str(cpu.value) in str(neuron.value)


# ---- LDL^T: Bunch-Kaufman factor and solve, LAPACK's layout and pivots ----------------------


def _symmetric(*shape: int, dtype: torch.dtype, hermitian: bool = False, zero_diagonal: bool = False) -> torch.Tensor:
    """A random symmetric (Hermitian) indefinite matrix; a zero diagonal forces 2x2 pivot blocks.
    The strict upper triangle is garbage: sytrf reads only the lower one."""
    a = torch.randn(*shape, dtype=dtype)
    a = a + (a.mH if hermitian else a.mT)
    if zero_diagonal:
        a.diagonal(dim1=-2, dim2=-1).zero_()
    return a + torch.triu(torch.full_like(a, 7.0), 1)


@pytest.mark.parametrize(
    "dtype, hermitian",
    [
        (torch.float32, False),
        (torch.float64, False),
        (torch.float64, True),
        (torch.complex64, False),
        (torch.complex64, True),
        (torch.complex128, False),
        (torch.complex128, True),
    ],
)
def test_ldl_factor_as_cpu(dtype: torch.dtype, hermitian: bool) -> None:
    """LD (LAPACK's compact layout) within tolerance, pivots (1-based, -p on both rows of a 2x2
    block) and info exactly, for single matrices and batches; sizes 1 to 16 in single precision
    (rounding of larger ones grows past its tolerance), up to 100 in double (sytrf's blocked
    range, n > 64)."""
    torch.manual_seed(0)
    sizes = [1, 2, 3, 5, 8, 16] + ([] if dtype in (torch.float32, torch.complex64) else [65, 100])
    with fallback_disabled():
        for n in sizes:
            for shape, zero_diagonal in [((n, n), False), ((n, n), n > 1), ((2, 3, n, n), n > 1)]:
                a = _symmetric(*shape, dtype=dtype, hermitian=hermitian, zero_diagonal=zero_diagonal)
                expected = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
                got = torch.linalg.ldl_factor_ex(a.to("neuron"), hermitian=hermitian)
                assert_same(expected, tuple(got))
                if zero_diagonal:
                    assert (expected.pivots < 0).any()  # 2x2 blocks exercised
                plain = torch.linalg.ldl_factor(a.to("neuron"), hermitian=hermitian)
                assert_same((expected.LD, expected.pivots), tuple(plain))


def test_ldl_factor_pivot_cases() -> None:
    """Hand-made cases: a 2x2 block with an interchange, singular columns, NaN and inf entries
    (the pivots and info MKL gives: its i?amax picks the first NaN, only its complex routines stop
    at a NaN pivot, ?syr skips zero columns so a NaN spreads only where MKL's does), empty inputs."""
    nan, inf = float("nan"), float("inf")
    cases = [
        torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]]),
        torch.tensor([[0.0, 1.0], [1.0, 0.0]]),
        torch.zeros(3, 3),
        torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 2.0]]),
        torch.tensor([[nan, 1.0], [1.0, 2.0]]),
        torch.tensor([[1.0, nan], [nan, 2.0]]),
        torch.tensor([[0.0, 0.0], [nan, 0.0]]),
        torch.tensor([[1.0, 0.0, 0.0], [inf, 2.0, 0.0], [3.0, 4.0, 5.0]]),
        torch.zeros(0, 0),
        torch.zeros(0, 2, 2),
        torch.zeros(2, 0, 0),
    ]
    for column in ([1.0, nan, 3.0], [nan, 1.0, 3.0], [1.0, 3.0, nan]):
        a = torch.eye(4) * 5
        a[0, 0] = 0.1
        a[1:, 0] = a[0, 1:] = torch.tensor(column)
        cases.append(a)
    with fallback_disabled():
        for a in cases:
            for dtype in (torch.float32, torch.complex128):
                if dtype.is_complex and a.isinf().any():
                    continue  # MKL's complex division by inf gives NaN where XLA's gives 0
                x = a.to(dtype)
                assert_same(tuple(torch.linalg.ldl_factor_ex(x)), tuple(torch.linalg.ldl_factor_ex(x.to("neuron"))))


@pytest.mark.parametrize("batched", [False, True])
def test_ldl_factor_singular_raises(batched: bool) -> None:
    """ldl_factor (ATen's composite: factor, then its info check) raises CPU's error for a zero
    pivot column; ldl_factor_ex raises it with check_errors=True and returns info without."""
    a = torch.stack([torch.eye(3), torch.zeros(3, 3)]) if batched else torch.zeros(3, 3)
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.ldl_factor(a)
    with fallback_disabled():
        with pytest.raises(RuntimeError) as neuron:
            torch.linalg.ldl_factor(a.to("neuron"))
        assert str(cpu.value) in str(neuron.value)
        with pytest.raises(RuntimeError) as cpu:
            torch.linalg.ldl_factor_ex(a, check_errors=True)
        with pytest.raises(RuntimeError) as neuron:
            torch.linalg.ldl_factor_ex(a.to("neuron"), check_errors=True).info.cpu()
        # CPU's is an internal assert (its info check has no message for sytrf); the message matches
        assert str(cpu.value).endswith(str(neuron.value).split(": ", 2)[-1])
        assert_same(tuple(torch.linalg.ldl_factor_ex(a)), tuple(torch.linalg.ldl_factor_ex(a.to("neuron"))))


@pytest.mark.parametrize(
    "dtype, hermitian",
    [(torch.float32, False), (torch.float64, True), (torch.complex64, True), (torch.complex128, False)],
)
@pytest.mark.parametrize(
    "ld_batch, b_batch", [((), ()), ((2,), ()), ((), (3,)), ((2, 3), (2, 3)), ((2,), (2,))], ids=str
)
def test_ldl_solve_as_cpu(dtype: torch.dtype, hermitian: bool, ld_batch: tuple, b_batch: tuple) -> None:
    """Solutions from CPU's factors (2x2 blocks forced), B's batch broadcast with LD's as CPU does,
    int32 and int64 pivots, a right-hand side without columns."""
    torch.manual_seed(0)
    with fallback_disabled():
        for n, zero_diagonal in [(1, False), (2, True), (5, False), (5, True), (12, True)]:
            a = _symmetric(*ld_batch, n, n, dtype=dtype, hermitian=hermitian, zero_diagonal=zero_diagonal)
            ld, pivots, _ = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
            for k, index_dtype in [(3, torch.int32), (1, torch.int64), (0, torch.int32)]:
                b = torch.randn(*b_batch, n, k, dtype=dtype)
                p = pivots.to(index_dtype)
                expected = torch.linalg.ldl_solve(ld, p, b, hermitian=hermitian)
                got = torch.linalg.ldl_solve(ld.to("neuron"), p.to("neuron"), b.to("neuron"), hermitian=hermitian)
                assert_same(expected, got, **({"rtol": 1e-4, "atol": 1e-4} if dtype.itemsize <= 8 else {}))


def test_ldl_solve_broadcasts_ld() -> None:
    """An LD batch that B's batch must broadcast (CPU's kernel reads past LD there and crashes):
    the solution of each broadcast system, as CPU gives it for LD expanded to the batch."""
    torch.manual_seed(0)
    ld, pivots, _ = torch.linalg.ldl_factor_ex(_symmetric(2, 1, 4, 4, dtype=torch.float64, zero_diagonal=True))
    b = torch.randn(3, 4, 2, dtype=torch.float64)
    expected = torch.linalg.ldl_solve(ld.expand(2, 3, 4, 4).contiguous(), pivots.expand(2, 3, 4).contiguous(), b)
    with fallback_disabled():
        assert_same(expected, torch.linalg.ldl_solve(ld.to("neuron"), pivots.to("neuron"), b.to("neuron")))


def _ldl_error_cases() -> list[tuple]:
    ld, pivots, _ = torch.linalg.ldl_factor_ex(_symmetric(3, 3, dtype=torch.float64))
    b = torch.randn(3, 2, dtype=torch.float64)
    return [
        ("factor", (torch.randn(3),)),
        ("factor", (torch.randn(3, 4),)),
        ("factor", (torch.ones(3, 3, dtype=torch.int64),)),
        ("factor", (torch.ones(3, 3, dtype=torch.float16),)),
        ("factor", (torch.ones(2, 3, 3, dtype=torch.bfloat16),)),
        ("solve", (ld[0], pivots, b)),
        ("solve", (ld[:, :2], pivots, b)),
        ("solve", (ld.long(), pivots, b.long())),
        ("solve", (ld, pivots, b.float())),
        ("solve", (ld, pivots, b[:, 0])),
        ("solve", (ld, pivots, torch.randn(4, 2, dtype=torch.float64))),
        ("solve", (ld, pivots[:2], b)),
        ("solve", (ld, pivots.double(), b)),
        ("solve", (ld, pivots.bool(), b)),
        ("solve", (ld.expand(2, 3, 3), pivots.expand(2, 3), torch.randn(3, 3, 2, dtype=torch.float64))),
        ("solve", (ld.half(), pivots, b.half())),
    ]


@pytest.mark.parametrize("case", range(16))
def test_ldl_errors(case: int) -> None:
    """CPU's argument checks, in its order and with its messages and exception types."""
    which, args = _ldl_error_cases()[case]
    fn = torch.linalg.ldl_factor_ex if which == "factor" else torch.linalg.ldl_solve
    with pytest.raises((RuntimeError, IndexError, NotImplementedError)) as cpu:
        fn(*args)
    with fallback_disabled(), pytest.raises(cpu.type) as neuron:
        fn(*(a.to("neuron") for a in args))
    assert str(cpu.value) in str(neuron.value)


@pytest.mark.parametrize("pivots", [[1, 0, 3], [1, -4, 3], [1, 2, 9]])
def test_ldl_solve_pivot_range_raises(pivots: list[int]) -> None:
    """CPU's range checks on the pivots (LAPACK would index out of bounds), raised at the next sync."""
    args = (torch.eye(3), torch.tensor(pivots, dtype=torch.int32), torch.ones(3, 1))
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.ldl_solve(*args)
    with fallback_disabled(), pytest.raises(RuntimeError) as neuron:
        torch.linalg.ldl_solve(*(a.to("neuron") for a in args)).cpu()
    assert str(cpu.value) in str(neuron.value)


@pytest.mark.parametrize("name", ["linalg.ldl_factor", "linalg.ldl_factor_ex", "linalg.ldl_solve"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64, torch.complex128])
def test_ldl_opinfo_other_dtypes(name: str, dtype: torch.dtype) -> None:
    """The OpInfo samples (PD and Hermitian PD matrices, empty ones) beyond float32."""
    assert check_family(("linalg",), find(name), dtype, grad=False, max_samples=None) > 0
