"""`envs --diff A B`: what differs between two environments that matters for CUDA.

Pure: two probed environments and the environment cudadoctor runs in, in; rows out. The rows cover
the interpreter, torch and its CUDA build, what CUDA sees, the (allow-listed) environment variables
each runs with, and the copy of each CUDA library its torch loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cudadoctor.facts.libs import cudnn_version_str, family_of, file_version
from cudadoctor.redact import allowed_env


@dataclass
class DiffRow:
    section: str  # interpreter, torch, cuda, environment, libraries, verdict
    item: str
    a: str
    b: str

    @property
    def differs(self) -> bool:
        return self.a != self.b


def _v(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (list, tuple)):
        return " ".join(str(i) for i in x) or "-"
    return str(x) or "-"


def _shown(value) -> str:
    """A variable's value: '(unset)', "'' (empty)" or the value itself."""
    if value is None:
        return "(unset)"
    return value if value else "'' (empty)"


def _var(t) -> str:
    """CUDA_VISIBLE_DEVICES as the probe child saw it ('-' when the probe did not start)."""
    return _shown(t.visible_devices) if t is not None and t.python else "-"


def cuda_libraries(t) -> dict:
    """family -> 'version path' of each CUDA library mapped in the probe (after CUDA initialised)."""
    out: dict = {}
    for p in (t.libraries if t is not None else []):
        fam = family_of(p)
        if fam and fam not in out:
            ver = file_version(p)
            out[fam] = f"{ver} {p}" if ver else p
    return out


def run_env(base_env: dict, e) -> dict:
    """The allow-listed variables the environment's programs see: the caller's, plus its own."""
    return allowed_env({**base_env, **e.env})


def diff_envs(a, b, base_env: dict, verdict_a: str = "", verdict_b: str = "") -> list:
    ta, tb = a.torch, b.torch
    rows = [
        DiffRow("interpreter", "path", a.python, b.python),
        DiffRow("interpreter", "kind", a.label, b.label),
        DiffRow("interpreter", "prefix", a.prefix or "-", b.prefix or "-"),
        DiffRow("interpreter", "Python", _v(ta and ta.python_version), _v(tb and tb.python_version)),
        DiffRow("interpreter", "sys.executable", _v(ta and ta.python), _v(tb and tb.python)),
    ]

    def t(x, attr):
        return getattr(x, attr) if x is not None and x.installed else None

    rows += [
        DiffRow("torch", "version", _v(t(ta, "version")) if ta and ta.installed else "not installed",
                _v(t(tb, "version")) if tb and tb.installed else "not installed"),
        DiffRow("torch", "torch.version.cuda", _v(t(ta, "cuda")), _v(t(tb, "cuda"))),
        DiffRow("torch", "cuDNN", cudnn_version_str(t(ta, "cudnn_version")) or "-",
                cudnn_version_str(t(tb, "cudnn_version")) or "-"),
        DiffRow("torch", "NCCL", _v(t(ta, "nccl_version")), _v(t(tb, "nccl_version"))),
        DiffRow("torch", "arch list", _v(t(ta, "arch_list")), _v(t(tb, "arch_list"))),
        DiffRow("torch", "location", _v(os.path.dirname(t(ta, "file") or "") or None),
                _v(os.path.dirname(t(tb, "file") or "") or None)),
        DiffRow("cuda", "is_available", _v(t(ta, "available")), _v(t(tb, "available"))),
        DiffRow("cuda", "device_count", _v(t(ta, "device_count")), _v(t(tb, "device_count"))),
        DiffRow("cuda", "CUDA_VISIBLE_DEVICES seen", _var(ta), _var(tb)),
        DiffRow("cuda", "init error", _v(t(ta, "init_error")), _v(t(tb, "init_error"))),
    ]
    if verdict_a or verdict_b:
        rows.append(DiffRow("verdict", "verdict", verdict_a or "-", verdict_b or "-"))
    ea, eb = run_env(base_env, a), run_env(base_env, b)
    for k in sorted(set(ea) | set(eb)):
        rows.append(DiffRow("environment", k, _shown(ea.get(k)), _shown(eb.get(k))))
    la, lb = cuda_libraries(ta), cuda_libraries(tb)
    for fam in sorted(set(la) | set(lb)):
        rows.append(DiffRow("libraries", fam, la.get(fam, "(not loaded)"), lb.get(fam, "(not loaded)")))
    return rows
