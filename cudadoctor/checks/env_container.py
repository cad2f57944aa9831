"""The container runtime's variables (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES), judged by what this
container has: the NVIDIA runtime reads them once, when a container starts. Set in a shell inside a container that
has its GPU (seen on the H200, session 35: `NVIDIA_VISIBLE_DEVICES=void` and `NVIDIA_DRIVER_CAPABILITIES=graphics`
exported there changed nothing for torch or nvidia-smi), they say nothing about this container; where the GPU, libcuda
or nvidia-smi is missing, they are the likely reason."""

from __future__ import annotations

from cudadoctor.checks.common import driver_view
from cudadoctor.model import FactState, Finding, Fix, Status

DOCS_SPECIALIZED = "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html"


def _has_gpu(ctx) -> bool:
    nodes = ctx.fact("device_nodes").value
    return bool(driver_view(ctx).gpus) or bool(nodes is not None and nodes.gpu_files())


def visible_devices_finding(ctx, nvd: str):
    if nvd.strip().lower() not in ("void", "none", ""):
        return None
    shown = nvd or "(empty)"
    if _has_gpu(ctx):
        return Finding("env.nvidia-visible-devices", Status.OK,
                       f"NVIDIA_VISIBLE_DEVICES={shown} is set, but this container has its GPU: the runtime reads it "
                       "only when a container starts", evidence={"NVIDIA_VISIBLE_DEVICES": nvd})
    return Finding("env.nvidia-visible-devices", Status.FAIL,
                   f"NVIDIA_VISIBLE_DEVICES={shown}: the container runtime exposes no GPU",
                   fix=Fix("Start the container with GPUs.",
                           ("docker run --gpus all ...", "export NVIDIA_VISIBLE_DEVICES=all"), DOCS_SPECIALIZED),
                   evidence={"NVIDIA_VISIBLE_DEVICES": nvd})


def capabilities_finding(ctx, caps: str):
    have = {c.strip() for c in caps.split(",")}
    lack = [c for c in ("compute", "utility") if c not in have and "all" not in have]
    if not lack:
        return None
    ud = ctx.fact("userspace_driver").value
    smi = ctx.fact("nvidia_smi")
    missing = [c for c in lack if (c == "compute" and ud is not None and not ud.libcuda)
               or (c == "utility" and smi.state is FactState.NOT_FOUND)]
    if not missing:  # what they would have mounted is here: the variable changed after the container started
        return Finding("env.nvidia-driver-capabilities", Status.OK,
                       f"NVIDIA_DRIVER_CAPABILITIES={caps} lacks {', '.join(lack)}, but this container has "
                       + " and ".join({"compute": "libcuda", "utility": "nvidia-smi"}[c] for c in lack)
                       + ": the runtime reads it only when a container starts",
                       evidence={"NVIDIA_DRIVER_CAPABILITIES": caps})
    return Finding("env.nvidia-driver-capabilities", Status.WARN,
                   f"NVIDIA_DRIVER_CAPABILITIES={caps} lacks {', '.join(missing)}",
                   detail="'compute' mounts libcuda (CUDA), 'utility' mounts nvidia-smi and NVML; this container "
                          "has no " + " and no ".join({"compute": "libcuda", "utility": "nvidia-smi"}[c] for c in missing)
                          + ".",
                   fix=Fix("Start the container with compute and utility.",
                           ("docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ...",)),
                   evidence={"NVIDIA_DRIVER_CAPABILITIES": caps})


def container_runtime_findings(ctx, env: dict) -> list:
    out = []
    if "NVIDIA_VISIBLE_DEVICES" in env:
        out.append(visible_devices_finding(ctx, env["NVIDIA_VISIBLE_DEVICES"]))
    if "NVIDIA_DRIVER_CAPABILITIES" in env:
        out.append(capabilities_finding(ctx, env["NVIDIA_DRIVER_CAPABILITIES"]))
    return [f for f in out if f is not None]
