"""Eager execution: PrivateUse1 kernels that run lowerings on device buffers."""
