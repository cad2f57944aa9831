"""Finding environments: real venvs and conda/pyenv-shaped folders on disk (HostSystem), and the corner
cases of conda's configuration and of identity on a FakeSystem."""

from __future__ import annotations

import os

from envs_support import base_python, conda_layout, host_env, make_venv, pyenv_layout, wrapper_python
from fakes.system import FakeSystem

from cudadoctor.facts import conda_envs
from cudadoctor.facts.pythons import Finder, discover
from cudadoctor.system.host import HostSystem


def by_python(envs) -> dict:
    return {e.python: e for e in envs}


def test_conda_layout_roots_envs_dirs_and_environments_txt(tmp_path):
    root = conda_layout(tmp_path / "miniconda3", {"ml": None, "torchy": None})
    extra = conda_layout(tmp_path / "elsewhere", {})  # listed only in environments.txt
    scratch = tmp_path / "scratch" / "envs"
    (scratch / "proj" / "conda-meta").mkdir(parents=True)
    wrapper_python(scratch / "proj" / "bin" / "python", base_python())
    (scratch / "notanenv").mkdir()  # no conda-meta: not an environment
    env = host_env(tmp_path, CONDA_EXE=root / "bin" / "conda")
    home = tmp_path / "home"
    (home / ".conda").mkdir()
    (home / ".conda" / "environments.txt").write_text(f"{root}\n# a comment\n\n{extra}\n")
    (home / ".condarc").write_text(f"channels:\n  - conda-forge\nenvs_dirs:\n  - {scratch}  # work\n  - ~/nowhere\n")
    envs = discover(HostSystem(env)).envs
    conda = {e.name: e for e in envs if e.kind == "conda"}
    assert set(conda) == {"base", "ml", "torchy", "proj", str(extra)}
    assert conda["base"].prefix == str(root) and conda["ml"].prefix == str(root / "envs" / "ml")
    assert any("environments.txt" in w for w in conda[str(extra)].found_as)
    assert any(".condarc" in w for w in conda["proj"].found_as)
    # each conda env runs the same real interpreter, but they are different environments: not merged
    assert len({e.key for e in conda.values()}) == 5


def test_condarc_envs_dirs_forms():
    assert conda_envs.envs_dirs_in("envs_dirs:\n  - /a\n  - '/b c'  # note\n\n  - \"~/d\"\npkgs_dirs:\n  - /p\n") == \
        ["/a", "/b c", "~/d"]
    assert conda_envs.envs_dirs_in("envs_dirs: [/x, '/y']\n") == ["/x", "/y"]
    assert conda_envs.envs_dirs_in("channels: [a]\n") == []


def test_conda_env_vars_apply_to_the_conda_row(tmp_path):
    root = conda_layout(tmp_path / "mc", {"ml": None})
    (root / "envs" / "ml" / "conda-meta" / "state").write_text('{"env_vars": {"CUDA_VISIBLE_DEVICES": "3"}}')
    envs = discover(HostSystem(host_env(tmp_path, CONDA_EXE=root / "bin" / "conda"))).envs
    ml = next(e for e in envs if e.name == "ml")
    assert ml.env == {"CUDA_VISIBLE_DEVICES": "3"} and ml.env_source.endswith("conda-meta/state (conda env config vars)")


def test_pyenv_layout_versions_and_only_the_working_shims(tmp_path):
    root = pyenv_layout(tmp_path / "home" / ".pyenv", ["3.11.7", "3.12.1"])
    envs = discover(HostSystem(host_env(tmp_path, [root / "shims"]))).envs
    pyenv = {e.name: e for e in envs if e.kind == "pyenv"}
    assert set(pyenv) >= {"3.11.7", "3.12.1"}
    paths = [e.python for e in envs] + [a for e in envs for a in e.aliases]
    assert str(root / "shims" / "python3") in paths  # the shim of the selected version
    assert not any(p.endswith("python3.99") for p in paths)  # a python3.X shim of a version not selected


def test_uv_managed_python(tmp_path):
    uvdir = tmp_path / "home" / ".local" / "share" / "uv" / "python" / "cpython-3.12.8-linux-x86_64-gnu" / "bin"
    wrapper_python(uvdir / "python3", base_python())
    envs = discover(HostSystem(host_env(tmp_path))).envs
    uv = [e for e in envs if e.kind == "uv"]
    assert [e.name for e in uv] == ["cpython-3.12.8-linux-x86_64-gnu"]


def test_symlinks_to_one_interpreter_merge_but_venvs_do_not(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(base_python())
    (bindir / "python").symlink_to("python3")
    alias = tmp_path / "alias"
    alias.symlink_to(bindir)  # a folder link, as /bin -> /usr/bin
    venv_py = make_venv(tmp_path / "venv")  # its bin/python links to the same real interpreter
    envs = discover(HostSystem(host_env(tmp_path, [bindir, alias, venv_py.parent]))).envs
    real = [e for e in envs if e.key == "exe:" + os.path.realpath(base_python())]
    assert len(real) == 1
    assert set(real[0].aliases) >= {str(bindir / "python"), str(alias / "python3")}
    venv = [e for e in envs if e.kind == "venv"]
    assert len(venv) == 1 and venv[0].prefix == str(tmp_path / "venv") and venv[0].key != real[0].key


def test_active_venv_and_project_venv(tmp_path):
    proj = tmp_path / "proj"
    (proj / "src" / "pkg").mkdir(parents=True)
    (proj / "pyproject.toml").write_text("[project]\nname='x'\n")
    make_venv(proj / ".venv")
    make_venv(tmp_path / ".venv")  # above the project root: not the project's
    active = make_venv(tmp_path / "active")
    s = HostSystem(host_env(tmp_path, VIRTUAL_ENV=tmp_path / "active"))
    s.cwd = lambda: str(proj / "src" / "pkg")
    envs = discover(s).envs
    assert envs[0].python == str(active) and envs[0].found_as[0].startswith("VIRTUAL_ENV")
    found = {e.prefix: e.found_as for e in envs}
    assert str(proj / ".venv") in found and found[str(proj / ".venv")][0].startswith("project .venv")
    assert str(tmp_path / ".venv") not in found


def test_venv_with_system_site_packages_is_recorded(tmp_path):
    py = make_venv(tmp_path / "ssp", system_site=True)
    e = Finder(HostSystem(host_env(tmp_path))).describe(str(py))
    assert e.kind == "venv" and e.system_site_packages is True and e.base_python


def test_add_accepts_folders_and_interpreters(tmp_path):
    py = make_venv(tmp_path / "v1")
    other = wrapper_python(tmp_path / "w" / "python")
    envs = discover(HostSystem(host_env(tmp_path)), extra=[str(tmp_path / "v1"), str(other)]).envs
    found = by_python(envs)
    assert "--add" in found[str(py)].found_as and "--add" in found[str(other)].found_as


def test_fake_machine_without_home_or_path_finds_nothing_and_does_not_raise():
    fs = FakeSystem(env={})
    assert discover(fs).envs == []
