"""Variables the CUDA driver reads as it starts, judged as CUDA really treats them (reproduced on the H200, session 35;
recordings tests/data/h200/s35_*.txt, console output of `check` before these fixes):

- CUDA_DEVICE_ORDER other than FASTEST_FIRST / PCI_BUS_ID exactly (lower case, empty, a trailing space): torch's
  "Error 101: invalid device ordinal"; `check` said "not a valid value (ignored)" as a warning and "read torch's reason".
- CUDA_FORCE_PTX_JIT=1 (only "1"; 0, 2, true, yes and empty are ignored): torch's matmul failed
  CUBLAS_STATUS_INTERNAL_ERROR, Triton "no kernel image", cudadoctor's own sm_90 kernel 209 with "please report it";
  no step named the variable.
- the toolkit's stub libcuda first on LD_LIBRARY_PATH: torch's "Error 34: CUDA driver is a stub library"; the torch.cuda
  step said only "read torch's reason", the driver-API probe "CUDA_ERROR_34: unknown error"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import check, steps
from scenarios import h200, torch_stages
from fakes.system import FakeCmd

from cudadoctor.checks.probe_launch import check_probe_launch
from cudadoctor.checks.registry import Context
from cudadoctor.facts.types import EnvInfo
from cudadoctor.model import Fact, Status
from cudadoctor.probes.driver_api import KNOWN_ERRORS
from cudadoctor.probes.run import LaunchInfo

H200 = Path(__file__).parent / "data" / "h200"


def recorded_init_error(name: str) -> str:
    """torch's own words, from the torch.cuda line of a recorded `check` on the H200."""
    line = next(x for x in (H200 / name).read_text().splitlines() if x.startswith("✗ 2 torch sees CUDA"))
    return re.search(r"is False: (RuntimeError: .*?)  \(torch\.cuda", line).group(1)


ORDINAL = recorded_init_error("s35_device_order_check_before.txt")
STUB = recorded_init_error("s35_stub_libcuda_check_before.txt")
CUBLAS = re.search(r"(CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasCreate\(handle\)`)",
                   (H200 / "s35_force_ptx_jit_check_before.txt").read_text()).group(1)


def failing_torch(err: str) -> FakeCmd:
    return FakeCmd(torch_stages(available=False, count=0, init_error=err))


def fids(step) -> dict:
    return {f.id: f.status.value for f in step.findings}


@pytest.mark.parametrize("value, fix0", [
    ("bogus", "export CUDA_DEVICE_ORDER=PCI_BUS_ID  # nvidia-smi's order; or: unset"),
    ("pci_bus_id", "export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
    ("", "export CUDA_DEVICE_ORDER=PCI_BUS_ID  # nvidia-smi's order; or: unset"),
    ("PCI_BUS_ID ", "export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
    ("fastest_first", "export CUDA_DEVICE_ORDER=FASTEST_FIRST"),
])
def test_an_invalid_device_order_stops_cuda_and_is_a_failure(value, fix0):
    sts = steps(check(h200(env={"CUDA_DEVICE_ORDER": value}, torch=failing_torch(ORDINAL))))
    f = next(f for f in sts["environment"].findings if f.id == "env.cuda-device-order")
    assert f.status is Status.FAIL and f.fix.commands[0].startswith(fix0) and len(f.fix.commands) == 1
    t = sts["torch.cuda"].findings[0]
    assert t.id == "torch.cuda.device-order-invalid" and t.status is Status.FAIL
    assert t.fix.commands[0].startswith(fix0) and t.evidence["CUDA_DEVICE_ORDER"] == value
    assert "Error 101: invalid device ordinal" in t.summary  # torch's own words kept, not cut off


def test_a_device_order_this_driver_accepted_is_a_warning():
    # (review s35) CUDA started with it (torch.cuda OK): another driver may refuse it, this one did not
    sts = steps(check(h200(env={"CUDA_DEVICE_ORDER": "pci"})))
    assert sts["torch.cuda"].status is Status.OK
    assert fids(sts["environment"])["env.cuda-device-order"] == "warn"


def test_a_certain_cause_is_named_even_when_the_driver_step_failed_for_another_reason():
    # (review s35) a shadowed libnvidia-ml fails the driver step but does not stop cuInit: torch's 101 with an invalid
    # CUDA_DEVICE_ORDER is still that variable's, not "fix the driver step first"
    from cudadoctor.checks.torch_cuda import check_torch_cuda
    from cudadoctor.model import Finding, StepResult

    sys_ = h200(env={"CUDA_DEVICE_ORDER": "pci_bus_id"}, torch=failing_torch(ORDINAL))
    from cudadoctor.facts import registry as facts

    names = ["torch", "nvidia_smi", "nvml", "kernel_module", "platform", "other_envs", "device_nodes", "env", "libs"]
    ctx = Context(facts=facts.gather(sys_, names, facts.Options()))
    ctx.results["driver"] = StepResult("driver", "NVIDIA driver", Status.FAIL, "shadowed", (
        Finding("driver.nvml-shadowed", Status.FAIL, "libnvidia-ml from LD_LIBRARY_PATH"),))
    out = check_torch_cuda(ctx)
    assert out.findings[0].id == "torch.cuda.device-order-invalid"


@pytest.mark.parametrize("value", ["PCI_BUS_ID", "FASTEST_FIRST"])
def test_the_two_valid_device_orders_are_not_judged(value):
    sts = steps(check(h200(env={"CUDA_DEVICE_ORDER": value})))
    assert "env.cuda-device-order" not in fids(sts["environment"]) and sts["torch.cuda"].status is Status.OK


def test_error_101_without_a_bad_device_order_is_not_blamed_on_it():
    sts = steps(check(h200(torch=failing_torch(ORDINAL))))
    assert fids(sts["torch.cuda"]) == {"torch.cuda.unavailable": "fail"}


def test_the_stub_libcuda_is_named_by_the_torch_step_with_the_folder_to_drop():
    sts = steps(check(h200(env={"LD_LIBRARY_PATH": "/tmp/s/stubs:/usr/local/nvidia/lib64:/usr/local/nvidia/lib"},
                           torch=failing_torch(STUB))))
    f = sts["torch.cuda"].findings[0]
    assert f.id == "torch.cuda.stub-libcuda" and f.status is Status.FAIL and "/tmp/s/stubs" in f.summary
    assert f.fix.commands[0] == "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
    assert fids(sts["environment"])["env.ld-library-path.stubs"] == "fail"


def test_a_stub_from_elsewhere_points_at_the_linker_cache():
    f = steps(check(h200(torch=failing_torch(STUB))))["torch.cuda"].findings[0]
    assert f.id == "torch.cuda.stub-libcuda" and f.fix.commands[0].startswith("ldconfig -p | grep libcuda")


@pytest.mark.parametrize("value, named", [("1", True), ("0", False), ("2", False), ("true", False), ("", False)])
def test_force_ptx_jit_is_judged_only_when_cuda_reads_it(value, named):
    env = fids(steps(check(h200(env={"CUDA_FORCE_PTX_JIT": value})))["environment"])
    assert ("env.cuda-force-ptx-jit" in env) is named


def test_force_ptx_jit_fails_where_the_op_failed_under_it_and_warns_where_it_ran():
    # (review s35) a torch whose wheel ships PTX for this GPU runs under it, more slowly: a warning, not a failure
    assert fids(steps(check(h200(env={"CUDA_FORCE_PTX_JIT": "1"})))["environment"])["env.cuda-force-ptx-jit"] == "warn"
    op = {"ok": False, "part": "matmul", "error_type": "AcceleratorError", "error": CUBLAS, "checked": True}
    sts = steps(check(h200(env={"CUDA_FORCE_PTX_JIT": "1"}, torch=FakeCmd(torch_stages(op=op)))))
    assert fids(sts["environment"])["env.cuda-force-ptx-jit"] == "fail"


def test_the_op_that_fails_under_forced_ptx_jit_names_the_variable():
    op = {"ok": False, "part": "matmul", "error_type": "AcceleratorError", "error": CUBLAS, "checked": True}
    sts = steps(check(h200(env={"CUDA_FORCE_PTX_JIT": "1"}, torch=FakeCmd(torch_stages(op=op)))))
    f = sts["torch.op"].findings[0]
    assert f.id == "torch.op.failed" and f.evidence.get("CUDA_FORCE_PTX_JIT") == "1"
    assert f.fix.commands[0] == "unset CUDA_FORCE_PTX_JIT"
    # without the variable the same failure keeps the old reading
    f = steps(check(h200(torch=FakeCmd(torch_stages(op=op)))))["torch.op"].findings[0]
    assert f.id == "torch.op.failed" and "CUDA_FORCE_PTX_JIT" not in f.evidence


def test_an_unrelated_op_failure_under_forced_ptx_jit_is_not_blamed_on_it():
    # (review s35) an illegal address is the kernel's own, whatever the variable says
    op = {"ok": False, "part": "matmul", "error_type": "AcceleratorError", "checked": True,
          "error": "CUDA error: an illegal memory access was encountered"}
    f = steps(check(h200(env={"CUDA_FORCE_PTX_JIT": "1"}, torch=FakeCmd(torch_stages(op=op)))))["torch.op"].findings[0]
    assert f.id == "torch.op.failed" and "CUDA_FORCE_PTX_JIT" not in f.evidence


def test_cudadoctors_own_kernel_under_forced_ptx_jit_is_not_a_mismatch_to_report():
    # the H200's rows under CUDA_FORCE_PTX_JIT=1: the native sm_90 build gave 209, the PTX builds ran
    rows = [{"name": "native", "sass": ["sm_90"], "ptx": [], "predicted": "native", "driver_api": "no-kernel-image",
             "match": False, "driver_error": "cuModuleLoadDataEx -> 209 CUDA_ERROR_NO_BINARY_FOR_GPU"},
            {"name": "ptx-only", "sass": [], "ptx": ["compute_90"], "predicted": "ptx-jit", "driver_api": "ptx-jit",
             "match": True}]
    info = LaunchInfo(cc="9.0", device="NVIDIA H200", compiler="nvcc 13.0", rows=rows)

    def judge(env: dict):
        out = check_probe_launch(Context(facts={"probe_launch": Fact.found(info, "probe"),
                                                "env": Fact.found(EnvInfo(vars=env))}))
        return {f.id: f for f in out.findings}
    # (review s35) expected under the variable: the probe's SASS-only build is not judged, not a failure
    f = judge({"CUDA_FORCE_PTX_JIT": "1"})
    assert set(f) == {"probe.launch.forced-ptx-jit"} and f["probe.launch.forced-ptx-jit"].status is Status.SKIP
    assert f["probe.launch.forced-ptx-jit"].fix.commands[0] == "unset CUDA_FORCE_PTX_JIT"
    assert "probe.launch.mismatch" in judge({}) and "probe.launch.native-failed" in judge({})


def test_the_stub_libcudas_error_has_its_name():
    # the stub answers cuGetErrorName with an error too (34): the probe said "CUDA_ERROR_34: unknown error"
    from cudadoctor.probes.driver_api import Driver

    d = Driver.__new__(Driver)
    d._fn = lambda name: (lambda *a: 34)
    assert (d.error_name(34), d.error_string(34)) == KNOWN_ERRORS[34] == (
        "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library")
    assert (d.error_name(4242), d.error_string(4242)) == ("CUDA_ERROR_4242", "unknown error")


def test_explain_reads_101_at_device_count_as_the_device_order_first():
    # torch's recorded words: 101 from cudaGetDeviceCount() itself (no index asked for yet); the cause listed first is
    # CUDA_DEVICE_ORDER's, with the variable's value from this shell
    import json

    from typer.testing import CliRunner

    from cudadoctor.cli import app

    r = CliRunner().invoke(app, ["explain", "--offline", "--json", ORDINAL])
    top = json.loads(r.stdout)["matches"][0]
    assert top["id"] == "visible-devices" and "CUDA_DEVICE_ORDER" in top["causes"][0]
    # an index out of range elsewhere keeps the old order
    r = CliRunner().invoke(app, ["explain", "--offline", "--json", "RuntimeError: CUDA error: invalid device ordinal"])
    top = json.loads(r.stdout)["matches"][0]
    assert top["id"] == "visible-devices" and "CUDA_DEVICE_ORDER" not in top["causes"][0]


@pytest.mark.parametrize("env, error, fix0", [
    # the probe's recorded errors on the H200 (s35_*_check_after.txt)
    ({"LD_LIBRARY_PATH": "/tmp/s/stubs:/usr/local/nvidia/lib64"}, "cuInit: CUDA_ERROR_STUB_LIBRARY: CUDA driver is a stub library",
     "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64"),
    ({"CUDA_DEVICE_ORDER": "pci_bus_id"}, "cuInit: CUDA_ERROR_INVALID_DEVICE: invalid device ordinal",
     "export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
    ({}, "cuInit: CUDA_ERROR_INVALID_DEVICE: invalid device ordinal", "cudadoctor probe"),
])
def test_the_probe_that_cannot_start_cuda_names_the_variable_behind_it(env, error, fix0):
    from cudadoctor.model import FactState

    out = check_probe_launch(Context(facts={"probe_launch": Fact(FactState.FAILED, None, "probe", error),
                                            "env": Fact.found(EnvInfo(vars=env))}))
    f = out.findings[0]
    assert f.id == "probe.launch.failed" and f.fix.commands[0] == fix0


def _run(facts: dict, only: tuple) -> dict:
    from cudadoctor.checks import registry as checks

    return {r.id: r for r in checks.run_steps(checks.ordered(only), facts)}


def _stub_machine(link_dir: str = ""):
    # tests/test_libs.py's stub scenario: the toolkit's stubs folder first on LD_LIBRARY_PATH, torch's maps show it;
    # `link_dir`: as on the H200 (s35_stub_*_final.txt), a folder of one's own named stubs holding a link to the stub
    # first on LD_LIBRARY_PATH instead (torch's maps then show only the stub's real path)
    from libs_support import base_facts, data, h200_system, h200_torch

    stub_dir = "/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs"
    s = h200_system(dict(h200_system().env, LD_LIBRARY_PATH=f"{link_dir or stub_dir}:/usr/local/nvidia/lib64"))
    s.add_file(stub_dir + "/libcuda.so", b"\x7fELF")
    s.symlinks[stub_dir + "/libcuda.so.1"] = "libcuda.so"
    if link_dir:
        s.symlinks[link_dir + "/libcuda.so.1"] = stub_dir + "/libcuda.so"
    maps = [p for p in data("libs", "h200_maps.txt").split() if "libcuda.so" not in p] + [stub_dir + "/libcuda.so"]
    torch = h200_torch(libraries=maps, available=False, init_error=STUB)
    return base_facts(s, torch=Fact.found(torch))


def test_a_loaded_stub_is_named_by_torch_and_libraries_and_not_again_by_the_environment():
    r = _run(_stub_machine(), ("torch.cuda", "libraries", "environment"))
    t = r["torch.cuda"].findings[0]
    assert t.id == "torch.cuda.stub-libcuda" and t.fix.commands[0] == "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64"
    assert t.evidence["via"].startswith("LD_LIBRARY_PATH entry")
    assert {f.id: f.status.value for f in r["libraries"].findings}["libs.stub-libcuda"] == "fail"
    # one fault, one problem: the environment step's own stubs finding would repeat the libraries step's fix
    assert "env.ld-library-path.stubs" not in {f.id for f in r["environment"].findings}
    alone = _run(_stub_machine(), ("environment",))
    assert {f.id: f.status.value for f in alone["environment"].findings}["env.ld-library-path.stubs"] == "fail"


def test_a_stub_linked_from_a_folder_of_ones_own_is_named_once_with_that_folder():
    # (the H200, session 35: /tmp/s/stubs/libcuda.so.1 -> the toolkit's stub; the environment step still repeated the
    # libraries step's finding, whose evidence named no LD_LIBRARY_PATH entry)
    r = _run(_stub_machine("/tmp/s/stubs"), ("torch.cuda", "libraries", "environment"))
    t = r["torch.cuda"].findings[0]
    assert t.id == "torch.cuda.stub-libcuda" and t.fix.commands[0] == "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64"
    assert "env.ld-library-path.stubs" not in {f.id for f in r["environment"].findings}


def test_a_stub_from_the_linker_cache_is_fixed_there_not_in_ld_library_path():
    # (review s35) a stubs folder on LD_LIBRARY_PATH that did not give the loaded stub: dropping it would change nothing
    from types import SimpleNamespace

    from cudadoctor.checks.libraries import stub_fix

    info = SimpleNamespace(ld_library_path=["/usr/local/cuda/lib64/stubs", "/usr/local/nvidia/lib64"])
    cache = SimpleNamespace(via="ldconfig cache", path="/usr/local/cuda/lib64/stubs/libcuda.so.1")
    found, text, cmds = stub_fix(info, cache)
    assert cmds[0].startswith("grep -rn stubs /etc/ld.so.conf") and "linker cache" in found
    env = SimpleNamespace(via="LD_LIBRARY_PATH entry /opt/app/lib", path="/opt/app/lib/libcuda.so.1")
    info = SimpleNamespace(ld_library_path=["/opt/app/lib", "/usr/local/nvidia/lib64"])
    assert stub_fix(info, env)[2] == ("export LD_LIBRARY_PATH=/usr/local/nvidia/lib64",)


@pytest.mark.parametrize("vars_", [None, {"CUDA_DEVICE_ORDER": None}, {"CUDA_DEVICE_ORDER": 5, "CUDA_FORCE_PTX_JIT": 1}])
def test_odd_saved_environments_do_not_crash_the_steps(vars_):
    # (review s35) a saved report may hold null or numbers where strings were
    from libs_support import base_facts

    facts = base_facts(torch=Fact.found(failing_torch_info(ORDINAL)), env=Fact.found(EnvInfo(vars=vars_)))
    r = _run(facts, ("torch.cuda", "torch.op", "environment", "probe.launch"))
    assert all(s.status is not Status.ERROR for s in r.values()), {k: v.summary for k, v in r.items()}


def failing_torch_info(err: str):
    from libs_support import h200_torch

    return h200_torch(available=False, init_error=err)


def test_a_carriage_return_at_the_end_of_the_device_order_is_read_as_cuda_reads_it():
    # (the H200, session 35: CUDA_DEVICE_ORDER='PCI_BUS_ID\r', from a .env file with Windows line endings, gave torch's
    # 101 while `check` saw 'PCI_BUS_ID' (the env fact shows values without it) and blamed nothing; CUDA_VISIBLE_DEVICES,
    # PYTORCH_CUDA_ALLOC_CONF, LD_LIBRARY_PATH, CUDA_MODULE_LOADING and TORCH_CUDA_ARCH_LIST with one worked there)
    sys_ = h200(env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID\r", "CUDA_VISIBLE_DEVICES": "0\r"}, torch=failing_torch(ORDINAL))
    sts = steps(check(sys_))
    t = sts["torch.cuda"].findings[0]
    assert t.id == "torch.cuda.device-order-invalid" and t.evidence["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID\r"
    assert t.fix.commands[0].startswith("export CUDA_DEVICE_ORDER=PCI_BUS_ID") and "dos2unix" in t.fix.commands[0]
    assert fids(sts["environment"])["env.cuda-device-order"] == "fail"
    # the CUDA_VISIBLE_DEVICES beside it, which CUDA read as 0, is not judged as hiding the GPU
    assert not [f for f in sts["environment"].findings if f.id.startswith("env.cuda-visible-devices") and
                f.status is not Status.OK]


@pytest.mark.parametrize("value, warned", [("1", True), ("0", False), ("", False)])
def test_disable_ptx_jit_is_a_warning_about_ptx_only_code(value, warned):
    env = fids(steps(check(h200(env={"CUDA_DISABLE_PTX_JIT": value})))["environment"])
    assert (env.get("env.cuda-disable-ptx-jit") == "warn") is warned


def _cvd_cases():
    from scenarios import UUID

    low = "gpu-" + UUID[4:]
    # (value, what torch.cuda.device_count() gave on the H200, session 35, .gpu/s35l.sh; env finding expected)
    return [(UUID[:8], 1, "env.cuda-visible-devices"), (UUID, 1, "env.cuda-visible-devices"),
            (low, 0, "env.cuda-visible-devices.none"), ("0 ", 1, "env.cuda-visible-devices"),
            (" 0", 1, "env.cuda-visible-devices"), ("0,0", 0, "env.cuda-visible-devices.none"),
            ("-1", 0, "env.cuda-visible-devices.none"), ("1", 0, "env.cuda-visible-devices.none"),
            ("0,1", 1, "env.cuda-visible-devices.truncated"), ("GPU-bogus", 0, "env.cuda-visible-devices.none"),
            ("0,GPU-bogus", 1, "env.cuda-visible-devices.truncated"), ("GPU-bogus,0", 0, "env.cuda-visible-devices.none"),
            ("all", 0, "env.cuda-visible-devices.none"), ("0-0", 1, "env.cuda-visible-devices"),
            ("00", 1, "env.cuda-visible-devices")]


@pytest.mark.parametrize("value, torch_count, env_id", _cvd_cases())
def test_cuda_visible_devices_is_read_as_cuda_read_it_on_the_h200(value, torch_count, env_id):
    # before: '0-0' (torch saw the GPU) failed as "leaves no GPU visible"; '0,0' and a lower-case 'gpu-' UUID (torch saw
    # none) were "torch.cuda.is_available() is False" with no cause named
    torch = FakeCmd(torch_stages(visible=value)) if torch_count else FakeCmd(
        torch_stages(available=False, count=0, visible=value, init_error=""))
    sts = steps(check(h200(env={"CUDA_VISIBLE_DEVICES": value}, torch=torch)))
    env = {f.id: f.status.value for f in sts["environment"].findings if f.id.startswith("env.cuda-visible-devices")}
    assert list(env) == [env_id]
    t = sts["torch.cuda"].findings[0].id
    assert t == ("torch.cuda.ok" if torch_count else "torch.cuda.hidden-by-visible-devices")


def test_first_line_of_an_error_text():
    from cudadoctor.checks.common import first_line

    assert first_line("\n  \nRuntimeError: CUDA error: boom\nmore\n") == "RuntimeError: CUDA error: boom"
    assert first_line("   \n\t") == "" and first_line(None, "unknown error") == "unknown error"
    assert first_line("x" * 500, limit=300) == "x" * 300
