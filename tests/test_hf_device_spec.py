"""Transformers' own test machinery targets neuron through `neuron_device_spec.py`.

Transformers' tests are not shipped in the wheel; with a transformers checkout they run on
neuron as (from this directory):

    TRANSFORMERS_TEST_BACKEND=torch_neuronx TRANSFORMERS_TEST_DEVICE=neuron \\
    TRANSFORMERS_TEST_DEVICE_SPEC=neuron_device_spec.py python -m pytest <transformers>/tests/models/llama

Here a subprocess configured that way checks that `transformers.testing_utils` loads the spec,
picks `torch_device == "neuron"`, routes its backend_* helpers to `torch.neuron`, does not skip
accelerator tests, and that a model test written the way Transformers writes them runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent(
    """
    import unittest
    import torch
    from transformers import LlamaConfig, LlamaModel
    from transformers import testing_utils as tu

    assert tu.torch_device == "neuron", tu.torch_device
    assert tu.backend_device_count(tu.torch_device) == 1
    tu.backend_manual_seed(tu.torch_device, 1234)
    assert torch.neuron.initial_seed() == 1234
    tu.backend_empty_cache(tu.torch_device)
    assert "neuron" in tu.SINGLE_PROCESS_DEVICES

    class NeuronModelTest(unittest.TestCase):
        @tu.require_torch_accelerator
        def test_model(self):
            config = LlamaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=37)
            model = LlamaModel(config).to(tu.torch_device).eval()
            ids = torch.randint(0, 99, (2, 7), device=tu.torch_device)
            with torch.no_grad():
                out = model(ids).last_hidden_state
            self.assertEqual(out.device.type, "neuron")
            self.assertEqual(tuple(out.shape), (2, 7, 32))
            with torch.no_grad():
                ref = model.cpu()(ids.cpu()).last_hidden_state
            torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)

        @tu.require_torch_multi_accelerator
        def test_multi(self):
            pass

    result = unittest.TextTestRunner(verbosity=0).run(unittest.defaultTestLoader.loadTestsFromTestCase(NeuronModelTest))
    assert result.wasSuccessful(), result.errors + result.failures
    assert [t.id().rsplit(".", 1)[1] for t, _ in result.skipped] == ["test_multi"], result.skipped
    print("SPEC OK")
    """
)


def test_transformers_testing_utils_use_the_spec():
    env = dict(
        os.environ,
        TRANSFORMERS_TEST_BACKEND="torch_neuronx",
        TRANSFORMERS_TEST_DEVICE="neuron",
        TRANSFORMERS_TEST_DEVICE_SPEC="neuron_device_spec.py",
        PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", SCRIPT], cwd=HERE, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and "SPEC OK" in done.stdout, done.stdout + done.stderr[-3000:]
