"""`cudadoctor matrix ...`: output, --json and exit codes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudadoctor.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["matrix", *args])


def js(*args):
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_driver():
    d = js("driver", "--cuda", "12.4")
    assert d["full"]["linux"] == "550.54.14" and d["minor_compat"]["linux"] == "525.60.13"
    r = run("driver", "--cuda", "12.4")
    assert r.exit_code == 0 and "550.54.14" in r.stdout


def test_driver_newer_than_data():
    d = js("driver", "--cuda", "14.1")
    assert d["full"] is None and d["note"]


def test_cuda():
    d = js("cuda", "--driver", "535.104.05")
    assert d["max_cuda"] == "12.2" and d["branch"] == 535 and d["minor_compat"]["major"] == 12
    d = js("cuda", "--driver", "700.10")
    assert d["max_cuda"] == "13.5" and "data stops" in d["note"]  # R620 -> 13.5 (NVREDIST)


@pytest.mark.parametrize("q", ["8.9", "sm_89", "RTX 4090"])
def test_arch(q):
    d = js("arch", q)
    assert d["cc"] == "8.9" and d["architecture"] == "Ada Lovelace"
    assert d["nvcc"]["first"] == "11.8" and d["nvcc"]["last"] is None
    assert d["torch"]["newest_torch"] == "2.15"


def test_arch_pascal():
    d = js("arch", "6.1")
    assert d["nvcc"]["last"] == "12.9"
    assert {v["cu"] for v in d["torch"]["variants"] if v["torch"] == "2.9"} == {"cu126"}


def test_torch():
    d = js("torch", "2.8.0")
    assert [v["cu"] for v in d["variants"]] == ["cu126", "cu128", "cu129"]
    assert d["pypi_default"] == "cu128"
    assert d["variants"][1]["cudnn"] == "9.10.2.21"
    d = js("torch", "3.1")
    assert d["release"] == "2.15" and "data stops" in d["note"]


def test_compiler():
    d = js("compiler", "--cuda", "12.1")
    assert d["gcc_max"] == 12
    d = js("compiler", "--cuda", "13.9")
    assert d["gcc_max"] == 16 and "data stops" in d["note"]  # 13.4-13.5 host_config.h (NVCRT)


def test_recommend_offline():
    d = js("recommend", "--cc", "12.0", "--driver", "570.133.07", "--limit", "0")
    assert d["recommendations"][0]["cu"] == "cu128" and d["recommendations"][0]["torch"] == "2.11"
    assert all(r["cuda"].startswith("12.") for r in d["recommendations"])


@pytest.mark.parametrize("args", [
    ("driver", "--cuda", "abc"),
    ("driver", "--cuda", "8.0"),
    ("cuda", "--driver", "latest"),
    ("cuda", "--driver", "100.1"),
    ("arch", "Radeon RX 7900"),
    ("arch", "4.4"),
    ("arch", "RTX 6000"),
    ("torch", "two"),
    ("torch", "1.0"),
    ("compiler", "--cuda", "x.y"),
    ("compiler", "--cuda", "7.0"),
    ("recommend", "--cc", "GTX 9999", "--driver", "580.1"),
])
def test_bad_input_exit_2(args):
    r = run(*args)
    assert r.exit_code == 2
    assert "cudadoctor:" in r.stderr and "Traceback" not in r.output
    assert r.stdout == ""
