"""Step 3, `device.capability`: each visible GPU's compute capability against torch's arch list."""

from __future__ import annotations

from cudadoctor.checks.common import driver_view, q, torch_base_version, visible_ordinals
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.checks.torch_cuda import rec_tag
from cudadoctor.compat import NATIVE, PTX_JIT, cc_str, parse_cc, select_image
from cudadoctor.model import Finding, Fix, Status

GET_STARTED = "https://pytorch.org/get-started/locally/"


def torch_devices(ctx: Context) -> list:
    """(index, name, cc) of the devices torch sees; else (torch's first CUDA call failed, or it died before it
    read them all) those the driver sees, as far as CUDA_VISIBLE_DEVICES leaves them to torch."""
    t = ctx.fact("torch").value
    if t is not None and t.available and t.devices and all(parse_cc(d.capability) for d in t.devices) and \
            len(t.devices) >= (t.device_count or 0):
        return [(d.index, d.name, parse_cc(d.capability)) for d in t.devices]
    gpus = driver_view(ctx).gpus
    vis = visible_ordinals(t.visible_devices if t is not None else None, len(gpus), [g.uuid for g in gpus])
    if vis is not None:  # CUDA_VISIBLE_DEVICES is set: only what it leaves (none when it hides them all)
        by_index = {g.index: g for g in gpus}
        return [(n, by_index[i].name, by_index[i].cc) for n, i in enumerate(vis) if i in by_index]
    return [(g.index, g.name, g.cc) for g in gpus]


def grouped(parts: list) -> str:
    """'2× NVIDIA H200 · cc 9.0 ...' for identical lines (several GPUs of one model), in first-seen order."""
    counts: dict = {}
    for p in parts:
        counts[p] = counts.get(p, 0) + 1
    return "; ".join(f"{n}× {p}" if n > 1 else p for p, n in counts.items())


def _fix_for(ctx: Context, cc: tuple, t, py: str) -> Fix:
    arch = f"sm_{cc[0]}{cc[1]}"
    m = ctx.matrix
    dv = driver_view(ctx)
    recs = []
    if hasattr(m, "recommend_torch"):
        try:
            recs = m.recommend_torch(cc, dv.version or None) or []
        except Exception:  # noqa: BLE001
            recs = []
    if recs:
        r = recs[0]
        cmd = r.get("command") or r.get("pip") or (f"pip install --force-reinstall torch=={r.get('torch')} "
                                                   f"--index-url {r.get('index_url')}")
        if cmd.startswith("pip "):
            cmd = f"{q(py)} -m {cmd}"
        return Fix(f"Install a torch wheel whose arch list includes {arch} and that your driver {dv.version} runs "
                   f"(torch {r.get('torch')} {rec_tag(r)}):", (cmd,), GET_STARTED)
    return Fix(f"Install a torch build that includes {arch} (SASS) for this GPU; torch "
               f"{torch_base_version(t.version)} from this index has only {', '.join(t.arch_list) or 'no CUDA archs'}:",
               (f"{q(py)} -c 'import torch; print(torch.cuda.get_arch_list())'",
                "cudadoctor matrix arch " + cc_str(cc)), GET_STARTED)


@step("device.capability", "compute capability", 30, facts=("torch", "nvidia_smi", "nvml"), requires=("driver",))
def check_capability(ctx: Context) -> Outcome:
    """Compute capability and architecture of each device vs torch.cuda.get_arch_list()."""
    t = ctx.fact("torch").value
    devices = torch_devices(ctx)
    if not devices:
        return Outcome("no device to check", [Finding("device.capability.no-devices", Status.SKIP,
                                                      "no visible device to check")])
    has_arch = t is not None and t.installed and bool(t.cuda) and bool(t.arch_list)
    py = (t.python if t is not None else "") or "python"
    sass = [a for a in (t.arch_list if has_arch else []) if a.startswith("sm_")]
    ptx = [a for a in (t.arch_list if has_arch else []) if a.startswith("compute_")]
    findings, parts = [], []
    for idx, name, cc in devices:
        if cc is None:
            findings.append(Finding("device.capability.unknown", Status.WARN,
                                    f"GPU {idx}" + (f" ({name})" if name else "") + ": compute capability unknown",
                                    "Neither torch nor the driver reported it.",
                                    Fix("Ask the driver directly:", ("nvidia-smi --query-gpu=name,compute_cap --format=csv",))))
            continue
        arch_name = ctx.matrix.arch_name(cc)
        label = f"{name} · cc {cc_str(cc)}" + (f" ({arch_name})" if arch_name else "")
        ev = {"device": f"{idx}: {name}", "compute capability": cc_str(cc),
              "torch arch list": " ".join(t.arch_list) if has_arch else "n/a"}
        if not has_arch:
            parts.append(label)
            findings.append(Finding("device.capability.ok", Status.OK, label + " · no CUDA torch to compare with",
                                    evidence=ev))
            continue
        sel = select_image(sass, ptx, cc)
        if sel.verdict == NATIVE:
            parts.append(f"{label} · torch has {sel.image} SASS")
            findings.append(Finding("device.capability.ok", Status.OK, parts[-1], evidence=ev))
        elif sel.verdict == PTX_JIT:
            parts.append(f"{label} · PTX JIT only ({sel.image})")
            findings.append(Finding(
                "device.capability.ptx-jit", Status.WARN,
                f"GPU {idx} ({name}, cc {cc_str(cc)}): torch {t.version} has no SASS for it; kernels are "
                f"JIT-compiled from {sel.image} PTX",
                "It works, but the first run of every kernel is compiled by the driver (slow start, large JIT cache) "
                "and the code is not tuned for this architecture.", _fix_for(ctx, cc, t, py), ev, "torch"))
        else:
            parts.append(f"{label} · not in torch's arch list")
            findings.append(Finding(
                "device.capability.unsupported", Status.FAIL,
                f"GPU {idx} ({name}, cc {cc_str(cc)}) is not supported by torch {t.version}: "
                f"expect 'no kernel image is available for execution on the device'",
                f"torch's arch list is {' '.join(t.arch_list)}: no SASS for sm_{cc[0]}{cc[1]} and no PTX at or "
                f"below cc {cc_str(cc)}. " + sel.reason, _fix_for(ctx, cc, t, py), ev, "torch"))
    return Outcome(grouped(parts) if parts else "compute capability unknown", findings)
