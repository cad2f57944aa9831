"""Probes: read the GPU architectures inside CUDA binaries (fatbin.py), build cudadoctor's own kernels per
architecture (build.py, nvrtc_compile.py), launch them through the CUDA driver API in a child process
(driver_api.py, launch.py, run.py), and scan site-packages for binaries a GPU cannot run (scan.py)."""
