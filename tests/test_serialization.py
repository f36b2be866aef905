"""deepcopy, torch.save/torch.load and storage methods with neuron tensors."""

from __future__ import annotations

import copy
import io

import torch


def test_deepcopy_tensor_and_module():
    x = torch.randn(4).to("neuron")
    y = copy.deepcopy(x)
    assert y.device.type == "neuron" and y.data_ptr() != x.data_ptr()
    torch.testing.assert_close(y.cpu(), x.cpu())
    bn = torch.nn.BatchNorm1d(3).to("neuron")
    bn2 = copy.deepcopy(bn)
    assert bn2.running_var.device.type == "neuron"
    torch.testing.assert_close(bn2.running_var.cpu(), torch.ones(3))


def test_save_load_keeps_views_and_device():
    x = torch.randn(6).to("neuron")
    buf = io.BytesIO()
    torch.save({"x": x, "tail": x[2:]}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["x"].device.type == "neuron"
    assert loaded["tail"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    torch.testing.assert_close(loaded["tail"].cpu(), x[2:].cpu())
    buf.seek(0)
    assert torch.load(buf, map_location="cpu")["x"].device.type == "cpu"


def test_load_cpu_checkpoint_onto_neuron():
    state = torch.nn.Linear(3, 2).state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="neuron")
    for k, v in state.items():
        assert loaded[k].device.type == "neuron"
        torch.testing.assert_close(loaded[k].cpu(), v)


def test_storage_methods():
    x = torch.arange(5, dtype=torch.float32).to("neuron")
    s = x.untyped_storage()
    assert s.is_neuron and s.nbytes() == 20
    assert s.cpu().device.type == "cpu"
    clone = s.clone()
    assert clone.device.type == "neuron" and clone.data_ptr() != s.data_ptr()
    y = torch.empty(0, device="neuron").set_(clone, 0, (5,), (1,))
    torch.testing.assert_close(y.cpu(), torch.arange(5, dtype=torch.float32))
    assert torch.UntypedStorage(8).neuron().device.type == "neuron"
