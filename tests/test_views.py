"""Views and mutation: writes through any view change the base exactly as on CPU (DESIGN 3)."""

from __future__ import annotations

import pytest
import torch
from compare import check


def t_slice_mul(x):
    x.t()[1:].mul_(2)
    return x


def flat_stride_zero(x):
    x.view(-1)[::2].zero_()
    return x


def diagonal_add(x):
    x.diagonal().add_(1)
    return x


def setitem(x):
    x[1] = 5.0
    x[:, 2] = x[:, 3]
    x[..., -1] += 1
    return x


def chained_views(x):
    v = x.permute(1, 0)[::2, 1:]
    v.sub_(v.sum())
    return x.reshape(-1)[3:9]


def inplace_broadcast(x, y):
    x.add_(y[0])
    return x


def unfold_read(x):
    return x.unfold(1, 2, 1) * 3


def expand_read(x):
    return x[:, :1].expand(4, 5) * 1


def view_as_int(x):
    return x.view(torch.int32) + 0


def narrow_copy(x, y):
    x.narrow(1, 1, 3).copy_(y[:, :3])
    return x


def alias_on_both_sides(x):
    x[1:].add_(x[:-1] * 1)
    x[:2].copy_(x[2:4])
    return x


def unsqueeze_squeeze(x):
    y = x.unsqueeze(0).transpose(0, 2).squeeze(-1)
    y.mul_(-1)
    return x


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (t_slice_mul, [(4, 5)]),
        (flat_stride_zero, [(4, 5)]),
        (diagonal_add, [(4, 4)]),
        (setitem, [(4, 5)]),
        (chained_views, [(4, 6)]),
        (inplace_broadcast, [(4, 5), (3, 5)]),
        (unfold_read, [(4, 5)]),
        (expand_read, [(4, 5)]),
        (view_as_int, [(4, 5)]),
        (narrow_copy, [(4, 5), (4, 5)]),
        (alias_on_both_sides, [(4, 5)]),
        (unsqueeze_squeeze, [(4, 1)]),
    ],
)
def test_views_match_cpu(fn, shapes):
    check(fn, *[torch.randn(*s) for s in shapes])


def test_view_shares_storage_and_data_ptr():
    x = torch.zeros(4, 5, device="neuron")
    v = x[1:, 2:]
    assert v._base is x
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert v.data_ptr() == x.data_ptr() + (1 * 5 + 2) * 4
    other = torch.zeros(4, 5, device="neuron")
    assert other.data_ptr() != x.data_ptr()


def test_inplace_dtype_error_keeps_tensor():
    x = torch.arange(4, device="neuron")
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.add_(1.5)
    assert x.cpu().tolist() == [0, 1, 2, 3]


def test_inplace_shape_error():
    x = torch.zeros(3, device="neuron")
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x.add_(torch.ones(2, 3, device="neuron"))


def test_out_variant_resizes_and_casts():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = torch.empty(0, device="neuron")
    torch.add(a.to("neuron"), b.to("neuron"), out=out)
    torch.testing.assert_close(out.cpu(), a + b)
    out64 = torch.empty(3, 4, dtype=torch.float64, device="neuron")
    torch.mul(a.to("neuron"), 2, out=out64)
    torch.testing.assert_close(out64.cpu(), (a * 2).double())


def test_complex_real_views_share_storage():
    def fn(x):
        r = torch.view_as_real(x)
        r[:, 1].mul_(-1)
        return x + 1

    check(fn, torch.randn(3, dtype=torch.complex64))
    check(lambda f: torch.view_as_complex(f) * 2, torch.randn(4, 2))


def _transposed(device):
    return torch.arange(12.0).reshape(3, 4).to(device).t()


def _channels_last(device):
    return torch.arange(96.0).reshape(2, 3, 4, 4).to(device, memory_format=torch.channels_last)


@pytest.mark.parametrize(
    "make, fn",
    [
        (_transposed, lambda x: x + 1),
        (_transposed, torch.relu),
        (_transposed, torch.clone),
        (_transposed, lambda x: x.contiguous()),
        (_transposed, lambda x: x.to(torch.float64)),
        (_transposed, lambda x: x.to("cpu", copy=True)),
        (_transposed, lambda x: x[::2].to("cpu", copy=True)),
        (_transposed, lambda x: torch.sort(x, 0).values),
        (_channels_last, lambda x: x * 2),
        (_channels_last, lambda x: x.sum(1)),
        (_channels_last, lambda x: x.to(memory_format=torch.contiguous_format)),
        (_channels_last, lambda x: x.to("cpu", copy=True)),
    ],
)
def test_results_and_copies_take_pytorchs_layout(make, fn):
    """A fresh result is laid out as PyTorch lays it out (an elementwise result keeps its input's
    memory order, clone and `.to` preserve it), so what depends on strides behaves as on CPU."""
    cpu, dev = fn(make("cpu")), fn(make("neuron"))
    assert dev.stride() == cpu.stride()
    torch.testing.assert_close(dev.cpu(), cpu)


def test_uploads_keep_a_dense_layout_and_views_fail_as_on_cpu():
    x = torch.arange(12.0).reshape(3, 4).t()
    dev = x.to("neuron")
    assert dev.stride() == x.stride() == (1, 4)
    for y in (x + 1, dev + 1):
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            y.view(12)
