"""The version-matrix refresh procedure (maintainer-run, never at user time).

`python scripts/refresh_matrix.py` asks the package index what it knows (torch, the NVIDIA CUDA
runtime, cuDNN and NCCL wheels, the cuda-toolkit meta-package), reads the arch list of each new torch
wheel from the wheel itself with cudadoctor's own fatbin reader, and prints a diff of matrix/*.toml
for review. See README.md, "Keeping the version matrix current".
"""
