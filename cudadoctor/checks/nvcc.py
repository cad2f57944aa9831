"""Step 5, `toolkit.nvcc`: every nvcc found, and the one extension builds use vs torch.version.cuda."""

from __future__ import annotations

import os

from cudadoctor.checks.common import cu_tag, env_vars, major_minor, q, torch_base_version
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.model import Finding, Fix, Status

CPP_EXT_DOC = "https://pytorch.org/docs/stable/cpp_extension.html"


def extension_toolkit(tk, exists) -> tuple:
    """(root, nvcc path, how) as torch.utils.cpp_extension._find_cuda_home() picks it:
    CUDA_HOME or CUDA_PATH, else the nvcc on PATH, else /usr/local/cuda."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if tk.home_var == var and tk.home:
            return tk.home, os.path.join(tk.home, "bin", "nvcc"), f"${var}"
    if tk.path_nvcc:
        real = tk.path_nvcc
        return os.path.dirname(os.path.dirname(real)), real, "nvcc on PATH"
    if exists("/usr/local/cuda/bin/nvcc"):
        return "/usr/local/cuda", "/usr/local/cuda/bin/nvcc", "/usr/local/cuda"
    return "", "", ""


def _install_for(tk, nvcc: str):
    for i in tk.installs:
        if i.nvcc == nvcc or i.realpath == nvcc or os.path.join(i.root, "bin", "nvcc") == nvcc:
            return i
    return None


def same_major_variant(ctx: Context, torch_version: str, major: int) -> str:
    """The newest cuXYZ wheel variant of this torch release built for CUDA `major`.x ('' if none):
    only the major must match for extension builds."""
    m = ctx.matrix
    try:
        variants = m.torch_variants(torch_version) if hasattr(m, "torch_variants") else []
    except Exception:  # noqa: BLE001 - the matrix is best effort here
        variants = []
    same = [v for v in variants or [] if major_minor(v.get("cuda")) and major_minor(v.get("cuda"))[0] == major]
    if not same:
        return ""
    best = max(same, key=lambda v: major_minor(v.get("cuda")))
    return str(best.get("cu") or best.get("cu_tag") or cu_tag(best.get("cuda")))


def builds_extensions(env: dict) -> bool:
    return any(env.get(k) for k in ("CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST"))


@step("toolkit.nvcc", "nvcc vs torch", 50, facts=("toolkit", "torch", "env"))
def check_nvcc(ctx: Context) -> Outcome:
    """nvcc on PATH / CUDA_HOME / /usr/local/cuda*, and its version against torch.version.cuda."""
    tf, t = ctx.fact("toolkit"), ctx.fact("torch").value
    tk = tf.value
    env = env_vars(ctx)
    torch_cuda = t.cuda if t is not None and t.installed else None
    findings = []
    if tk is None or not tk.installs:
        extra = builds_extensions(env)
        home_note = []
        if tk is not None and tk.home_var and tk.home_exists is False:
            home_note.append(Finding(
                "toolkit.cuda-home.missing", Status.WARN, f"{tk.home_var}={tk.home} does not exist",
                "Extension builds (pip install flash-attn, torch.utils.cpp_extension) look for nvcc there and fail.",
                Fix(f"Unset {tk.home_var} or point it at an installed toolkit:",
                    (f"unset {tk.home_var}", "ls -d /usr/local/cuda*")), {tk.home_var: tk.home}))
        tag = cu_tag(torch_cuda) if torch_cuda else ""
        f = Finding(
            "toolkit.nvcc.absent", Status.WARN if extra else Status.OK,
            "no nvcc: fine for running torch; building CUDA extensions (flash-attn, load_inline) needs a toolkit",
            "torch wheels carry their own CUDA runtime, so nvcc is only needed to compile CUDA code." +
            (" CUDA_HOME/CUDA_PATH or TORCH_CUDA_ARCH_LIST is set, so you seem to build extensions." if extra else ""),
            Fix(f"Install a CUDA toolkit matching torch's CUDA {torch_cuda}:" if torch_cuda else "Install a CUDA toolkit:",
                ((f"sudo apt install cuda-toolkit-{torch_cuda.replace('.', '-')}  # NVIDIA's apt repository"
                  if torch_cuda else "https://developer.nvidia.com/cuda-downloads"),
                 f"conda install -c nvidia cuda-toolkit={torch_cuda}" if torch_cuda else ""),
                "https://developer.nvidia.com/cuda-toolkit-archive") if extra else None,
            {"searched": tf.source}, "extension builds")
        if f.fix is not None:
            f = Finding(f.id, f.status, f.summary, f.detail,
                        Fix(f.fix.text, tuple(c for c in f.fix.commands if c), f.fix.docs), f.evidence, f.affects)
        summary = "no nvcc (not needed to run torch)" + (f" · torch CUDA {torch_cuda} ({tag})" if torch_cuda else "")
        return Outcome(summary, [f] + home_note)

    for i in tk.installs:
        if i.error:
            findings.append(Finding(
                "toolkit.nvcc.unreadable", Status.WARN, f"{i.nvcc}: {i.error}",
                "This nvcc could not tell its version (it hung, crashed or printed something unexpected).",
                Fix("Run it yourself:", (f"{q(i.nvcc)} --version",)), {"nvcc": i.nvcc}))
    root, ext_nvcc, how = extension_toolkit(tk, lambda p: any(i.nvcc == p or i.realpath == p for i in tk.installs))
    chosen = _install_for(tk, ext_nvcc) if ext_nvcc else None
    listing = ", ".join(f"{i.version or '?'} ({i.where})" for i in tk.installs)

    # CUDA_HOME problems
    if tk.home_var and tk.home_exists is False:
        findings.append(Finding(
            "toolkit.cuda-home.missing", Status.WARN, f"{tk.home_var}={tk.home} does not exist",
            "torch.utils.cpp_extension takes the toolkit from there and will not find nvcc.",
            Fix(f"Point {tk.home_var} at an installed toolkit:",
                tuple(f"export {tk.home_var}={i.root}" for i in tk.installs[:2]) or (f"unset {tk.home_var}",)),
            {tk.home_var: tk.home}))
    elif tk.home_var and tk.home_nvcc and tk.path_nvcc:
        home_i, path_i = _install_for(tk, tk.home_nvcc), _install_for(tk, tk.path_nvcc)
        if home_i is not None and path_i is not None and home_i is not path_i and home_i.version != path_i.version:
            findings.append(Finding(
                "toolkit.cuda-home.differs", Status.WARN,
                f"{tk.home_var} ({home_i.version}, {home_i.where}) differs from the nvcc on PATH ({path_i.version}, {path_i.nvcc})",
                "Build systems disagree on which toolkit to use: setup.py/cpp_extension takes "
                f"{tk.home_var}, CMake and Makefiles often take PATH. Mixed toolkits give link errors.",
                Fix("Use one toolkit for both:",
                    (f"export PATH={home_i.root}/bin:$PATH",
                     f"export {tk.home_var}={path_i.root}  # or this instead" if path_i.is_toolkit is not False else
                     f"# {path_i.nvcc} is not inside a CUDA toolkit folder: take {os.path.dirname(path_i.nvcc)} off PATH")),
                {tk.home_var: tk.home, "PATH nvcc": tk.path_nvcc}))

    if chosen is None or not chosen.version:
        summary = f"nvcc: {listing}"
        if not findings:
            findings.append(Finding("toolkit.nvcc.ok", Status.OK, summary))
        return Outcome(summary, findings)

    summary = f"nvcc {chosen.version} ({chosen.where})"
    path_i = _install_for(tk, tk.path_nvcc) if tk.path_nvcc else None
    if path_i is not None and path_i is not chosen and path_i.version and path_i.version != chosen.version:
        summary = f"nvcc {chosen.version} (${tk.home_var}) · PATH nvcc {path_i.version} ({path_i.nvcc})"
    elif len(tk.installs) > 1:
        summary += f" · {len(tk.installs)} found"
    ev = {"nvcc for extensions": f"{ext_nvcc} via {how}", "all": listing}
    if not torch_cuda:
        summary += " · no CUDA torch to compare with"
        findings.insert(0, Finding("toolkit.nvcc.ok", Status.OK, summary, evidence=ev))
        return Outcome(summary, findings)
    nv, tv = major_minor(chosen.version), major_minor(torch_cuda)
    ev["torch.version.cuda"] = torch_cuda
    match_root = next((i.root for i in tk.installs if major_minor(i.version) and tv and major_minor(i.version)[0] == tv[0]), "")
    if nv and tv and nv[0] != tv[0]:
        cmds = []
        if match_root:
            cmds.append(f"export CUDA_HOME={match_root} PATH={match_root}/bin:$PATH")
        else:
            cmds.append(f"sudo apt install cuda-toolkit-{torch_cuda.replace('.', '-')}  # a toolkit matching torch")
        alt = same_major_variant(ctx, t.version, nv[0])
        if alt:
            cmds.append(f"# or keep this nvcc and install torch {torch_base_version(t.version)} built for CUDA "
                        f"{nv[0]}.x: {q(t.python or 'python')} -m pip install --force-reinstall "
                        f"torch=={torch_base_version(t.version)} --index-url https://download.pytorch.org/whl/{alt}")
        findings.insert(0, Finding(
            "toolkit.nvcc.major-mismatch", Status.FAIL,
            f"nvcc {chosen.version} ({chosen.where}) ≠ torch CUDA {torch_cuda}: extension builds will fail",
            "torch.utils.cpp_extension refuses an nvcc whose major version differs from torch's CUDA "
            "('The detected CUDA version mismatches the version that was used to compile PyTorch'): "
            "pip install flash-attn, load_inline and similar builds stop there.",
            Fix("Build with a toolkit of torch's CUDA major:", tuple(cmds), CPP_EXT_DOC), ev, "extension builds"))
        return Outcome(summary + f" ≠ torch CUDA {torch_cuda}", findings)
    if nv and tv and nv[1] != tv[1]:
        findings.insert(0, Finding(
            "toolkit.nvcc.minor-mismatch", Status.WARN,
            f"nvcc {chosen.version} vs torch CUDA {torch_cuda}: same major, different minor",
            "Extension builds work (torch only warns), but the extension links a different CUDA minor than "
            "torch; prefer the same minor when a toolkit for it is at hand.",
            Fix("Optional: build with the toolkit that matches torch exactly:",
                (f"sudo apt install cuda-toolkit-{torch_cuda.replace('.', '-')}",
                 f"export CUDA_HOME=/usr/local/cuda-{torch_cuda} PATH=/usr/local/cuda-{torch_cuda}/bin:$PATH"),
                CPP_EXT_DOC), ev, "extension builds"))
        return Outcome(summary + f" vs torch CUDA {torch_cuda}", findings)
    findings.insert(0, Finding("toolkit.nvcc.ok", Status.OK, summary + f" = torch CUDA {torch_cuda}", evidence=ev))
    return Outcome(summary + f" = torch CUDA {torch_cuda}", findings)
