"""Checks: pure functions from facts (and the version matrix) to findings. One step per function.

Each module registers its steps with `@step(id, title, order, facts=..., requires=...)`.
Orders leave room for later steps: driver 10, torch.cuda 20, device.capability 30, torch.op 40,
toolkit.nvcc 50, libraries 60, environment 70, matrix 80-89, probes 90, scan 95, wsl/container 100+.
"""
