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
    ("bogus", "unset CUDA_DEVICE_ORDER"), ("pci_bus_id", "export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
    ("", "unset CUDA_DEVICE_ORDER"), ("PCI_BUS_ID ", "export CUDA_DEVICE_ORDER=PCI_BUS_ID"),
    ("fastest_first", "export CUDA_DEVICE_ORDER=FASTEST_FIRST"),
])
def test_an_invalid_device_order_stops_cuda_and_is_a_failure(value, fix0):
    sts = steps(check(h200(env={"CUDA_DEVICE_ORDER": value}, torch=failing_torch(ORDINAL))))
    f = next(f for f in sts["environment"].findings if f.id == "env.cuda-device-order")
    assert f.status is Status.FAIL and "ignored" not in f.summary and f.fix.commands[0].startswith(fix0)
    t = sts["torch.cuda"].findings[0]
    assert t.id == "torch.cuda.device-order-invalid" and t.status is Status.FAIL
    assert t.fix.commands[0].startswith(fix0)


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
def test_force_ptx_jit_is_a_failure_only_when_cuda_reads_it(value, named):
    env = fids(steps(check(h200(env={"CUDA_FORCE_PTX_JIT": value})))["environment"])
    assert (env.get("env.cuda-force-ptx-jit") == "fail") is named


def test_the_op_that_fails_under_forced_ptx_jit_names_the_variable():
    op = {"ok": False, "part": "matmul", "error_type": "AcceleratorError", "error": CUBLAS, "checked": True}
    sts = steps(check(h200(env={"CUDA_FORCE_PTX_JIT": "1"}, torch=FakeCmd(torch_stages(op=op)))))
    f = sts["torch.op"].findings[0]
    assert f.id == "torch.op.failed" and "CUDA_FORCE_PTX_JIT=1" in f.summary
    assert f.fix.commands[0] == "unset CUDA_FORCE_PTX_JIT"
    # without the variable the same failure keeps the old reading
    f = steps(check(h200(torch=FakeCmd(torch_stages(op=op)))))["torch.op"].findings[0]
    assert f.id == "torch.op.failed" and "unset CUDA_FORCE_PTX_JIT" not in f.fix.commands


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
    f = judge({"CUDA_FORCE_PTX_JIT": "1"})
    assert set(f) == {"probe.launch.native-failed"} and f["probe.launch.native-failed"].fix.commands[0] == \
        "unset CUDA_FORCE_PTX_JIT"
    assert "probe.launch.mismatch" in judge({})


def test_the_stub_libcudas_error_has_its_name():
    # the stub answers cuGetErrorName with an error too: the probe said "CUDA_ERROR_34: unknown error"
    assert KNOWN_ERRORS[34] == ("CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library")


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
