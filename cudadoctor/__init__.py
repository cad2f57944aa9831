"""cudadoctor: a doctor for CUDA environments."""

__version__ = "0.2.5"
