"""Small pure helpers shared by checks: merged driver view, CUDA_VISIBLE_DEVICES, versions, commands."""

from __future__ import annotations

import re
import shlex
from typing import Optional

from cudadoctor.facts.views import DriverView, driver_view_of


def driver_view(ctx) -> DriverView:
    return driver_view_of(ctx.facts)


def visible_ordinals(value: Optional[str], count: int, uuids: list) -> Optional[list]:
    """The physical GPUs CUDA_VISIBLE_DEVICES leaves visible (None when it is unset).

    The CUDA runtime reads the list left to right and stops at the first entry that is not a valid
    device (an ordinal out of range, a negative number, an unknown UUID). As seen on an H200 (driver 580, session 35):
    an ordinal is read from its leading digits ("0-0" and "00" are GPU 0, "0 " too); a GPU named twice ("0,0") leaves
    none visible; a UUID needs its "GPU-" in upper case ("gpu-<uuid>" hides the GPU), and a unique prefix of it works.
    """
    if value is None:
        return None
    out: list = []
    for tok in value.split(","):
        tok = tok.strip()
        if not tok:
            break
        m = re.match(r"\d+", tok)
        if m or tok.startswith("-"):
            n = int(m.group()) if m else -1
            if n < 0 or n >= count:
                break
            if n in out:
                return []  # named twice: CUDA shows no GPU at all
            out.append(n)
            continue
        if tok.startswith(("GPU-", "MIG-")):
            hits = [i for i, u in enumerate(uuids) if u and u.lower().startswith(tok.lower())]
            if tok.startswith("MIG-"):
                out.append(-1)  # a MIG instance: visible, not a whole GPU ordinal
                continue
            if len(hits) != 1:
                break
            if hits[0] in out:
                return []
            out.append(hits[0])
            continue
        break
    return out


def major_minor(v: Optional[str]) -> Optional[tuple]:
    if not v:
        return None
    m = re.match(r"^\s*(\d+)\.(\d+)", str(v))
    return (int(m.group(1)), int(m.group(2))) if m else None


def torch_base_version(v: str) -> str:
    return (v or "").split("+")[0]


def cu_tag(cuda: str) -> str:
    mm = major_minor(cuda)
    return f"cu{mm[0]}{mm[1]}" if mm else ""


def env_vars(ctx) -> dict:
    """The allow-listed environment of the env fact, {name: value}: {} when it was not gathered, and only string values
    (a saved report may hold null or numbers)."""
    f = ctx.fact("env")
    vs = getattr(f.value, "vars", None) if f.value is not None else None
    return {k: v for k, v in dict(vs or {}).items() if isinstance(k, str) and isinstance(v, str)}


def earlier_findings(ctx, step_id: str) -> tuple:
    """The findings of a step judged before this one (the checklist runs in order), () when it was not run."""
    res = ctx.results.get(step_id)
    return res.findings if res is not None else ()


def ld_entries(env: dict) -> list:
    """LD_LIBRARY_PATH's folders, in order, empty entries left out."""
    return [e for e in env.get("LD_LIBRARY_PATH", "").split(":") if e]


def is_stubs_dir(folder: str) -> bool:
    """A toolkit's link-time stubs folder (lib64/stubs, targets/x86_64-linux/lib/stubs)."""
    return "stubs" in folder.rstrip("/").split("/")


def q(s: str) -> str:
    """Quote a path for a shell command line the user will copy."""
    return shlex.quote(s)


def ld_without(entries: list, drop: set) -> str:
    """The command that sets LD_LIBRARY_PATH to `entries` without `drop` (or unsets it when none remain)."""
    keep = [e for e in entries if e not in drop]
    return f"export LD_LIBRARY_PATH={q(':'.join(keep))}" if keep else "unset LD_LIBRARY_PATH"


def runtime_fix(container: str) -> tuple:
    """How to give this kind of container the GPU (the right words for its runtime)."""
    if container == "kubernetes":
        return ("kubectl describe pod <pod> | grep -iE 'nvidia.com/gpu|runtimeclass'",
                "# in the pod spec: resources.limits: {nvidia.com/gpu: 1} (and runtimeClassName: nvidia where used)")
    if container == "podman":
        return ("podman run --device nvidia.com/gpu=all ...  # CDI: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",)
    return ("docker run --gpus all ...  # or docker restart <container>",)


def first_line(text, default: str = "", limit: int = 0) -> str:
    """The first non-blank line of an error text, stripped (cut to `limit` characters when given), else `default`."""
    line = next((ln.strip() for ln in str(text or "").splitlines() if ln.strip()), "")
    if not line:
        return default
    return line[:limit] if limit else line

