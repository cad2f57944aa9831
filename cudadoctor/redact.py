"""What may be shown: allow-listed environment variables, and secret values scrubbed from any text.

Two layers: (1) only allow-listed variable names are ever gathered; (2) every rendered output is
scrubbed of (a) the exact values of secret-looking variables in the environment, wherever they
appear, and (b) token shapes (GitHub, Hugging Face, AWS, Slack, OpenAI-style keys, JWTs, URL
passwords).
"""

from __future__ import annotations

import re
from typing import Mapping

ALLOWED_EXACT = {
    "PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "LD_PRELOAD", "CPATH", "PYTHONPATH", "VIRTUAL_ENV",
    "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CC", "CXX", "CUDAHOSTCXX", "NVCC_CCBIN", "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS", "WSL_DISTRO_NAME", "WSL_INTEROP", "SLURM_JOB_ID", "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MAX_JOBS", "XLA_FLAGS", "TF_FORCE_GPU_ALLOW_GROWTH", "JAX_PLATFORMS",
    "TRITON_PTXAS_PATH", "TRITON_CACHE_DIR", "HF_HUB_OFFLINE", "KUBERNETES_SERVICE_HOST",
}
ALLOWED_PREFIXES = ("CUDA_", "NCCL_", "NVIDIA_", "TORCH_", "PYTORCH_", "CUDNN_", "CUBLAS_", "NV_CUDA",
                    "NV_CUDNN", "NV_LIB", "NVSHMEM_", "CUPY_", "TF_CUDA", "VLLM_", "XFORMERS_")
SECRETISH_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSWD|PWD_|KEY\b|_KEY|APIKEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE",
                            re.I)

TOKEN_PATTERNS = [
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
]
URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@")
# name=value pairs inside a value (e.g. "...:token=abc123...")
INLINE_SECRET = re.compile(r"(?i)\b(token|secret|password|passwd|api[_-]?key|access[_-]?key)=([^\s:;,&]+)")
REDACTED = "<redacted>"


def is_allowed(name: str) -> bool:
    return (name in ALLOWED_EXACT or name.startswith(ALLOWED_PREFIXES)) and not SECRETISH_NAME.search(name)


def scrub_patterns(text: str) -> str:
    for rx in TOKEN_PATTERNS:
        text = rx.sub(REDACTED, text)
    text = URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{REDACTED}@", text)
    text = INLINE_SECRET.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    return text


def secret_values(env: Mapping[str, str]) -> list:
    """Values in the environment that must never be printed, longest first."""
    vals = set()
    for k, v in env.items():
        if not v or len(v) < 6:
            continue
        if SECRETISH_NAME.search(k) or scrub_patterns(v) != v:
            vals.add(v)
            for part in re.split(r"[:;,\s]", v):  # a secret inside a list-like value
                if len(part) >= 12 and scrub_patterns(part) != part:
                    vals.add(part)
    return sorted(vals, key=len, reverse=True)


class Redactor:
    """Scrubs output text. `hide_identity` also replaces user, home and host names (for --markdown)."""

    def __init__(self, env: Mapping[str, str], hide_identity: bool = False, user: str = "", host: str = ""):
        self.values = secret_values(env)
        self.identity: list = []
        if hide_identity:
            home = env.get("HOME", "")
            if home and home not in ("/", "/root"):
                self.identity.append((home, "~"))
            elif home == "/root":
                self.identity.append(("/root", "~"))
            if user and len(user) >= 2:
                self.identity.append((user, "<user>"))
            if host and len(host) >= 2:
                self.identity.append((host, "<host>"))

    def __call__(self, text: str) -> str:
        for v in self.values:
            text = text.replace(v, REDACTED)
        text = scrub_patterns(text)
        for old, new in self.identity:
            if new == "~":
                text = re.sub(re.escape(old) + r"(?=/|\b|$)", new, text)
            else:
                text = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(old) + r"(?![A-Za-z0-9_])", new, text)
        return text


def allowed_env(env: Mapping[str, str]) -> dict:
    scrub = Redactor(env)
    return {k: scrub(v) for k, v in sorted(env.items()) if is_allowed(k)}
