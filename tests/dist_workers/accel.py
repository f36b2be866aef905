"""Run under `accelerate launch --multi_gpu`: Accelerate picks MULTI_NEURON with the `neuron`
backend, and data-parallel training matches a single-process CPU run on the full batches."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch
import torch.nn.functional as F  # noqa: N812
from common import WORLD, Checks
from models import Stack, assert_losses, assert_params
from torch.utils.data import DataLoader, TensorDataset

BATCH, STEPS, LR = 4, 3, 0.2


class PlainSGD(torch.optim.Optimizer):
    """p -= lr * grad, written out so only the distributed path is under test."""

    def __init__(self, params: object, lr: float) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: object = None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(p.grad * group["lr"])


def main() -> None:
    from accelerate import Accelerator
    from accelerate.utils import DistributedType

    checks = Checks()
    accelerator = Accelerator()

    def state() -> None:
        assert accelerator.distributed_type == DistributedType.MULTI_NEURON, accelerator.distributed_type
        assert accelerator.device.type == "neuron", accelerator.device
        assert accelerator.num_processes == WORLD
        assert torch.distributed.get_backend_config() == "cpu:neuron,neuron:neuron"

    def train() -> None:
        g = torch.Generator().manual_seed(5)
        x, y = torch.randn(BATCH * WORLD * STEPS, 8, generator=g), torch.randn(BATCH * WORLD * STEPS, 4, generator=g)
        torch.manual_seed(0)
        reference = Stack()
        model = copy.deepcopy(reference)
        expected = []
        ref_opt = PlainSGD(reference.parameters(), LR)
        for xb, yb in DataLoader(TensorDataset(x, y), batch_size=BATCH * WORLD):
            loss = F.mse_loss(reference(xb), yb)
            loss.backward()
            ref_opt.step()
            ref_opt.zero_grad()
            expected.append(loss.item())
        loader = DataLoader(TensorDataset(x, y), batch_size=BATCH)
        # Module.to("neuron") makes new Parameter objects (PrivateUse1 tensors cannot take a CPU
        # tensor's .data): build the optimizer on the moved model.
        model = model.to(accelerator.device)
        model, opt, loader = accelerator.prepare(model, PlainSGD(model.parameters(), LR), loader)
        losses = []
        for xb, yb in loader:
            assert xb.device.type == "neuron"
            loss = F.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            losses.append(accelerator.gather(loss.detach()).mean().item())
        assert_losses(expected, losses)
        assert_params(reference, accelerator.unwrap_model(model), rtol=1e-4, atol=1e-5)

    def objects() -> None:
        from accelerate.utils import broadcast_object_list, gather_object

        assert gather_object([accelerator.process_index]) == list(range(WORLD))
        assert broadcast_object_list([accelerator.process_index, "x"]) == [0, "x"]

    checks("accelerate.state", state)
    checks("accelerate.train", train)
    checks("accelerate.objects", objects)
    accelerator.end_training()


if __name__ == "__main__":
    main()
