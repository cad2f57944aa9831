"""`cudadoctor bench`: is this GPU as fast as it should be, and is the workload launch-bound?

torch_bench.py runs in the target interpreter (stdlib + torch) and prints one marked JSON record per
measurement; records.py reads them back (partial output included); peaks.py reads
matrix/gpu_peaks.toml; judge.py turns measurements, peaks and NVML facts into figures with ratios,
statuses and likely causes; runner.py runs the children through the System port.
"""
