"""Worker entry point: `suite.py <check-group>...` runs the named groups of checks on one rank.

Groups: collectives, platform, ddp, fsdp, dtensor, tp, dcp, fsdp_tp (4 ranks). Extra arguments
after `--`: names of single checks to run within `collectives`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch
import torch.distributed as dist
from common import RANK, WORLD, Checks, init


def platform() -> None:
    from torch_neuronx.runtime.platform import local_index

    assert local_index() == int(os.environ["LOCAL_RANK"]) == RANK, (local_index(), os.environ["LOCAL_RANK"])
    assert torch.neuron.device_count() == 1
    assert dist.get_backend_config() == "cpu:neuron,neuron:neuron", dist.get_backend_config()
    assert dist.get_world_size() == WORLD and dist.get_rank() == RANK


def main() -> None:
    groups = sys.argv[1:]
    names = None
    if "--" in groups:
        groups, names = groups[: groups.index("--")], groups[groups.index("--") + 1 :]
    init()
    checks = Checks()
    checks("platform", platform)
    if "collectives" in groups:
        import collectives

        collectives.run(checks, names)
    model_groups = [g for g in groups if g != "collectives"]
    if model_groups:
        import models

        models.run(checks, model_groups)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
