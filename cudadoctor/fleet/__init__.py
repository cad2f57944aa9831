"""The fleet: many nodes' `check --json` reports turned into one answer.

- `node.py`     one report -> a NodeRecord (the few values a fleet compares, and the failing findings)
- `load.py`     reports from files and folders (a bad file is reported, never fatal), in parallel
- `summary.py`  group nodes by GPU, driver, CUDA, torch, cuDNN, nvcc and check outcome; name outliers
- `render.py`   console table, Markdown
- `slurm.py`    run `cudadoctor check --json` on every node of an allocation through srun
"""
