"""No secret leaves the machine: every output format of check, env and libs, with secrets planted in the
environment, in list-like variables, in paths cudadoctor reports, and in a proxy URL. `--markdown` also
hides the user, home and host names."""

from __future__ import annotations

import socket

import pytest
from faultkit import need_command, target_python

HF = "hf_Zq8kT3mPw9LxR2vN7bYc4JdF6gHs1AeUoQ"
GH = "ghp_9fK2mX7qL4vB8nR3tY6wZ1cD5hJ0sAeGpUi"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ3vLp8Tk"
AWS_ID = "AKIAQ7XR4MZP2LK9WB3D"
PROXY_PW = "Pr0xyP4ss-w0rd!x"
PIP_PW = "s3cr3tIndexPw77"
DB_PW = "correct-horse-battery-staple"
WANDB = "5f0c2e9a7b3d41e8a6c2b9d0e7f1a3c5b8d2e4f6"
SECRETS = [HF, GH, AWS_SECRET, AWS_ID, PROXY_PW, PIP_PW, DB_PW, WANDB]


def secret_env(tmp) -> dict:
    return {
        "HF_TOKEN": HF,
        "HUGGING_FACE_HUB_TOKEN": HF,
        "GITHUB_TOKEN": GH,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_ACCESS_KEY_ID": AWS_ID,
        "HTTPS_PROXY": f"http://bob:{PROXY_PW}@proxy.example:3128",
        "https_proxy": f"http://bob:{PROXY_PW}@proxy.example:3128",
        "PIP_INDEX_URL": f"https://ci:{PIP_PW}@pypi.corp.example/simple",
        "MY_DB_PASSWORD": DB_PW,
        "WANDB_API_KEY": WANDB,
        # secrets inside values cudadoctor does show
        "LD_LIBRARY_PATH": f"/opt/{GH}/lib:/usr/local/nvidia/lib64:{tmp}/{HF}/lib",
        "CUDA_HOME": f"{tmp}/{GH}/cuda",  # does not exist: reported by the nvcc step
        "CUDA_CACHE_PATH": f"{tmp}/cache/token={PIP_PW}",
        "NCCL_SOCKET_IFNAME": f"eth0,{AWS_ID}",
        "PYTHONPATH": f"{tmp}/{HF}:{tmp}/x",
        "TORCH_CUDA_ARCH_LIST": "9.0",
    }


def assert_clean(r, extra=()):
    for s in list(SECRETS) + list(extra):
        assert s not in r.out and s not in r.err, f"secret {s[:6]}... leaked:\n" + _around(r.out + r.err, s)
        # nor a recognisable piece of one (a value cut by truncation before scrubbing)
        for piece in (s[:12], s[-12:]):
            assert piece not in r.out + r.err, f"part of secret {s[:6]}... leaked:\n" + _around(r.out + r.err, piece)


def _around(text: str, s: str) -> str:
    i = text.find(s)
    return text[max(0, i - 200):i + 200] if i >= 0 else ""


@pytest.mark.parametrize("fmt", [["--json"], ["--markdown"], [], ["-v"]])
def test_check_leaks_no_secret(faults, fmt):
    r = faults.run("check", *fmt, env=secret_env(faults.tmp), codes=(0, 1), limit=15)
    assert r.out.strip()
    assert_clean(r)


def test_secret_in_the_target_interpreter_path_and_its_errors(faults):
    """The interpreter lives under a folder named like a token, and torch's import error quotes a secret."""
    from faultkit import fake_torch

    root = fake_torch(faults.tmp / HF / "site", f"""
        raise ImportError("libcudnn.so.9: cannot open shared object file (tried {GH}/lib and {AWS_SECRET})")
        """)
    py = target_python(faults.tmp / GH / "bin", pythonpath=root)
    for fmt in (["--json"], ["--markdown"], ["-v"]):
        r = faults.run("check", *fmt, "--python", py, env=secret_env(faults.tmp), codes=(1,), limit=15)
        assert_clean(r)


@pytest.mark.parametrize("cut", [400, 500])
def test_secret_cut_by_truncation(faults, cut):
    """A tool's message is shortened for the report (400 characters in the fact's error, 500 in the
    evidence); a secret straddling the cut must not leak in part."""
    head = "NVIDIA-SMI has failed because it couldn't communicate with the driver. "
    pad = "x" * (cut - len(head) - 20)  # the secret starts 20 characters before the cut
    faults.tool("nvidia-smi", f"""
        echo "{head}{pad}$AWS_SECRET_ACCESS_KEY tail"
        exit 9
        """)
    for fmt in (["--json"], ["--markdown"], ["-v"]):
        r = faults.run("check", *fmt, "--only", "driver", env=secret_env(faults.tmp), codes=(1,))
        assert_clean(r)


@pytest.mark.parametrize("fmt", [["--json"], ["--markdown"], [], ["-v"]])
def test_env_leaks_no_secret(faults, fmt):
    need_command("env")
    r = faults.run("env", *fmt, env=secret_env(faults.tmp), codes=(0, 1), limit=15)
    assert r.out.strip()
    assert_clean(r)
    # the allow-listed variables are still shown (redacted where needed), the secret ones not at all
    if fmt == ["--json"]:
        assert "LD_LIBRARY_PATH" in r.out and "AWS_SECRET_ACCESS_KEY" not in r.out and "HF_TOKEN" not in r.out


@pytest.mark.parametrize("fmt", [["--json"], [], ["-v"]])
def test_libs_leaks_no_secret(faults, fmt):
    need_command("libs")
    # a library folder named like a token, first on LD_LIBRARY_PATH, with a CUDA library in it
    d = faults.tmp / HF / "lib"
    d.mkdir(parents=True)
    (d / "libcudart.so.13").write_bytes(b"\x7fELF" + b"\0" * 60)
    env = secret_env(faults.tmp)
    r = faults.run(*(["libs"] + fmt), env=env, codes=(0, 1), limit=15)
    assert r.out.strip()
    assert_clean(r)


def test_markdown_hides_user_home_and_host(faults):
    user = "zed-the-user"
    host = socket.gethostname()
    home = faults.tmp / "home" / user
    home.mkdir(parents=True)
    py = target_python(home / "venv" / "bin")
    env = {"HOME": str(home), "USER": user, "LOGNAME": user, "CUDA_HOME": f"/srv/{host}/{user}/cuda",
           "LD_LIBRARY_PATH": f"{home}/lib:/srv/{host}/lib"}
    outs = [faults.run("check", "--markdown", "--python", py, env=env, codes=(0, 1), limit=15)]
    try:
        need_command("env")
        outs.append(faults.run("env", "--markdown", "--python", py, env=env, codes=(0, 1), limit=15))
    except pytest.skip.Exception:
        pass
    assert "<details>" in outs[0].out
    for r in outs:
        assert str(home) not in r.out and user not in r.out, r.out
        if len(host) >= 4:
            assert host not in r.out, r.out
        assert "~" in r.out  # the home folder is shown as ~, so paths stay useful


def test_explain_does_not_echo_a_token_from_the_log(faults, tmp_path):
    need_command("explain")
    log = tmp_path / "train.log"
    log.write_text(f"RuntimeError: CUDA error: no kernel image is available ({HF})\n")
    r = faults.run("explain", "--file", log, "--json", env=secret_env(faults.tmp), codes=(0,))
    assert_clean(r)
