"""Transformers' device spec for neuron: run Transformers' own test suite on this device.

From the directory holding this file (Transformers imports it by bare name from the working
directory), with a checkout of the transformers repository matching the installed version:

    TRANSFORMERS_TEST_BACKEND=torch_neuronx TRANSFORMERS_TEST_DEVICE=neuron \\
    TRANSFORMERS_TEST_DEVICE_SPEC=neuron_device_spec.py \\
        python -m pytest /path/to/transformers/tests/models/llama/test_modeling_llama.py

`transformers.testing_utils.torch_device` is then "neuron", and its backend_* helpers call the
functions below.
"""

import torch

import torch_neuronx  # noqa: F401  (registers the device even with backend autoload off)

DEVICE_NAME = "neuron"

MANUAL_SEED_FN = torch.neuron.manual_seed
EMPTY_CACHE_FN = torch.neuron.empty_cache
DEVICE_COUNT_FN = torch.neuron.device_count

# One device per process (a process owns one NeuronCore): tests that would spawn a subprocess
# per test run in the current process instead, as on TPU.
SINGLE_PROCESS_DEVICE = True
