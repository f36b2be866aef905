"""Runtime: the PJRT platform, device memory, RNG state and streams.

Nothing here imports JAX at module import time; `platform.jax()` does it on first device use.
"""
