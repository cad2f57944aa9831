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
                    "NV_CUDNN", "NV_LIB", "NVSHMEM_", "CUPY_", "TF_CUDA", "VLLM_", "XFORMERS_", "TRITON_",
                    "TORCHINDUCTOR_")
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
# Control characters other than newline and tab (C0, DEL, C1): a tool's output quoted as evidence must not
# drive the user's terminal (clear the screen, set the title, rewrite lines). Shown escaped instead.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


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


CUT_MIN = 8  # a piece of a secret this long is a secret: output is shortened before it is scrubbed


def _scrub_cut(text: str, v: str) -> str:
    """Redact what is left of secret `v` where a shortened text cut it: a run of at least CUT_MIN of its
    first characters (the text was cut after it) or of its last ones (cut before it)."""
    if len(v) < 2 * CUT_MIN:
        return text
    for piece, forward in ((v[:CUT_MIN], True), (v[-CUT_MIN:], False)):
        i = text.find(piece)
        while i >= 0:
            if forward:
                j = i + CUT_MIN
                while j < len(text) and j - i < len(v) and text[j] == v[j - i]:
                    j += 1
                start, end = i, j
            else:
                start, end = i, i + CUT_MIN
                k = len(v) - CUT_MIN - 1
                while start > 0 and k >= 0 and text[start - 1] == v[k]:
                    start -= 1
                    k -= 1
            text = text[:start] + REDACTED + text[end:]
            i = text.find(piece, start + len(REDACTED))
    return text


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
        for v in self.values:
            text = _scrub_cut(text, v)
        text = scrub_patterns(text)
        for old, new in self.identity:
            if new == "~":
                text = re.sub(re.escape(old) + r"(?=/|\b|$)", new, text)
            else:
                text = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(old) + r"(?![A-Za-z0-9_])", new, text)
        return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r", ""))


def allowed_env(env: Mapping[str, str]) -> dict:
    scrub = Redactor(env)
    return {k: scrub(v) for k, v in sorted(env.items()) if is_allowed(k)}


def allowed_vars(env: Mapping[str, str]) -> tuple:
    """(the allow-listed variables of `env`, unscrubbed, and how many others it has): for variables an
    environment sets on top of the caller's (a kernel.json "env"), shown by name only when allowed."""
    shown = {k: v for k, v in sorted(env.items()) if is_allowed(k)}
    return shown, len(env) - len(shown)
