"""WSL2 checks on fixture trees built from real outputs posted in public issues (tests/data/wsl/README.md)."""

from __future__ import annotations

from libs_support import FakeCmd, FakeSystem, data, finding_ids

from cudadoctor.checks.registry import Context, load_all, run_one
from cudadoctor.facts.driver import parse_ldconfig, parse_smi_banner
from cudadoctor.facts.registry import Options, gather
from cudadoctor.facts.types import LdconfigInfo, TorchInfo
from cudadoctor.model import Fact, Status

WSL_FILES = [line.split()[-1] for line in data("wsl", "ls_wsl_lib.txt").splitlines()
             if line and not line.startswith("#")]


def wsl_system(proc_version: str = "proc_version_wsl2.txt", dxg: bool = True, dpkg: str = "dpkg_wsl_ok.txt",
               libcuda: bool = True, env: dict = None) -> FakeSystem:
    s = FakeSystem(env=env or {"PATH": "/usr/local/sbin:/usr/bin:/bin:/usr/lib/wsl/lib",
                               "WSL_DISTRO_NAME": "Ubuntu-22.04"})
    s.add_file("/proc/version", data("wsl", proc_version))
    s.add_file("/etc/os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    if dxg:
        s.add_file("/dev/dxg", b"")
    for name in WSL_FILES:
        if name.startswith("/"):
            name = name.rsplit("/", 1)[1]
        if not libcuda and name.startswith("libcuda"):
            continue
        if name == "nvidia-smi":
            s.add_exe("/usr/lib/wsl/lib/nvidia-smi")
        else:
            s.add_file(f"/usr/lib/wsl/lib/{name}", b"\x7fELF")
    s.add_file("/etc/ld.so.conf.d/ld.wsl.conf", "/usr/lib/wsl/lib\n")
    s.add_exe("/usr/bin/dpkg-query", FakeCmd(stdout=data("wsl", dpkg)))
    return s


def ldconfig_fact(text: str = None) -> Fact:
    return Fact.found(LdconfigInfo(libraries=parse_ldconfig(text or data("wsl", "ldconfig_wsl.txt"))))


def run_wsl(s: FakeSystem, torch: TorchInfo = None, ld: Fact = None):
    facts = gather(s, ["platform", "wsl"], Options(), given={"ldconfig": ld or ldconfig_fact()})
    facts["torch"] = Fact.found(torch or TorchInfo(installed=True, version="2.8.0+cu128", cuda="12.8"))
    return run_one(load_all()["wsl"], Context(facts=facts)), facts


def test_platform_detects_wsl2_from_proc_version():
    _, facts = run_wsl(wsl_system())
    p = facts["platform"].value
    assert p.is_wsl and p.wsl_version == 2


def test_healthy_wsl2():
    r, facts = run_wsl(wsl_system())
    ids = finding_ids(r)
    assert r.status is Status.OK, r.findings
    assert ids["wsl.version"] is Status.OK
    assert ids["wsl.libcuda"] is Status.OK
    # three regular files (WSL#8587, #7314): ldconfig's complaint is explained, not a problem
    assert ids["wsl.ldconfig-not-symlink"] is Status.OK
    w = facts["wsl"].value
    assert w.libcuda_resolved == "/usr/lib/wsl/lib/libcuda.so.1" and w.libcuda_resolved_via == "ldconfig cache"
    assert w.cuda_toolkit_packages == ["cuda-toolkit-12-8 12.8.1-1", "cuda-toolkit-config-common 12.8.90-1"]


def test_not_wsl_skips():
    s = FakeSystem()
    s.add_file("/proc/version", data("libs", "proc_version.txt").splitlines()[0])
    r, facts = run_wsl(s)
    assert r.status is Status.SKIP
    assert finding_ids(r) == {"wsl.not-wsl": Status.SKIP}
    assert facts["wsl"].state.value == "not_applicable"


def test_wsl1_fails():
    r, _ = run_wsl(wsl_system("proc_version_wsl1.txt", dxg=False))
    ids = finding_ids(r)
    assert ids["wsl.wsl1"] is Status.FAIL
    fix = next(f for f in r.findings if f.id == "wsl.wsl1").fix
    assert "wsl --set-version Ubuntu-22.04 2" in fix.commands


def test_no_dev_dxg():
    r, _ = run_wsl(wsl_system(dxg=False))
    assert finding_ids(r)["wsl.no-dxg"] is Status.FAIL


def test_no_libcuda_in_wsl_lib():
    r, _ = run_wsl(wsl_system(libcuda=False), ld=ldconfig_fact("\tlibcudart.so.11.0 (libc6,x86-64) => /x\n"))
    assert finding_ids(r)["wsl.no-libcuda"] is Status.FAIL


def test_linux_driver_packages_inside_wsl():
    s = wsl_system(dpkg="dpkg_linux_driver.txt")
    s.add_file("/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.12", b"\x7fELF")
    s.symlinks["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] = "libcuda.so.535.104.12"
    ld = ldconfig_fact("\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
                       "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/wsl/lib/libcuda.so.1\n")
    r, facts = run_wsl(s, ld=ld)
    ids = finding_ids(r)
    assert ids["wsl.linux-driver-installed"] is Status.FAIL
    assert ids["wsl.libcuda-not-wsl"] is Status.FAIL
    assert ids["wsl.cuda-meta-package"] is Status.WARN
    pk = next(f for f in r.findings if f.id == "wsl.linux-driver-installed")
    cmd = pk.fix.commands[0]
    assert cmd.startswith("sudo apt-get remove --purge ")
    assert "libnvidia-compute-535" in cmd and "cuda-drivers" in cmd
    assert "nvidia-dkms-535" not in cmd  # 'rc' = removed, config files only
    assert "cuda-toolkit-12-2" not in cmd


def test_libcuda_shadowed_by_ld_library_path():
    env = {"PATH": "/usr/bin:/usr/lib/wsl/lib", "LD_LIBRARY_PATH": "/opt/driver/lib"}
    s = wsl_system(env=env)
    s.add_file("/opt/driver/lib/libcuda.so.1", b"\x7fELF")
    r, _ = run_wsl(s)
    assert finding_ids(r)["wsl.libcuda-not-wsl"] is Status.FAIL


def test_linux_nvidia_smi_first_on_path():
    s = wsl_system(env={"PATH": "/usr/bin:/usr/lib/wsl/lib"})
    s.add_exe("/usr/bin/nvidia-smi")
    r, _ = run_wsl(s)
    assert finding_ids(r)["wsl.nvidia-smi-not-wsl"] is Status.WARN


def test_cpu_only_torch_under_wsl():
    r, _ = run_wsl(wsl_system(), torch=TorchInfo(installed=True, version="2.8.0+cpu", python="/venv/bin/python"))
    assert finding_ids(r)["wsl.cpu-only-torch"] is Status.WARN


def test_dpkg_timeout_does_not_break_the_fact():
    s = wsl_system()
    s.add_exe("/usr/bin/dpkg-query", FakeCmd(hang=True))
    r, facts = run_wsl(s)
    assert facts["wsl"].ok
    assert facts["wsl"].value.packages_error
    assert facts["wsl"].value.linux_driver_packages == []


def test_wsl_nvidia_smi_banner_parses():
    b = parse_smi_banner(data("wsl", "nvidia_smi_wsl.txt"))
    assert b["driver_version"] == "516.94" and b["cuda_version"] == "11.6"
