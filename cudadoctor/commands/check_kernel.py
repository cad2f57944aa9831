"""`check --kernel NAME`: check the interpreter a Jupyter kernel really runs, with the environment
variables its kernel.json sets, and say so in the report."""

from __future__ import annotations

import dataclasses

KERNEL_FACT = "jupyter_kernel"


def kernel_target(system, name: str, python, facts_file) -> tuple:
    """(a HostSystem with the kernel's env applied, its interpreter, the kernelspec); usage errors for
    what cannot be checked."""
    from cudadoctor.cli import fail_usage
    from cudadoctor.facts.kernelspecs import resolve_kernel
    from cudadoctor.system.host import HostSystem

    if python is not None:
        raise fail_usage("--kernel and --python cannot be used together (the kernel names its interpreter)")
    if facts_file is not None:
        raise fail_usage("--kernel cannot be used with --facts (a saved report is re-judged as it was made)")
    if not name.strip():
        raise fail_usage("--kernel needs a kernel name (`jupyter kernelspec list` shows them)")
    k, info = resolve_kernel(system, name)
    if k is None:
        known = ", ".join(sorted({x.name for x in info.kernels})) or "none found"
        raise fail_usage(f"--kernel {name}: no such Jupyter kernel (kernels here: {known}; searched "
                         f"{', '.join(info.dirs[:6])}{' ...' if len(info.dirs) > 6 else ''})")
    if k.error:
        raise fail_usage(f"--kernel {name}: {k.kernel_json}: {k.error}")
    if k.language and not k.language.lower().startswith("python"):
        raise fail_usage(f"--kernel {name}: a {k.language} kernel, not Python: cudadoctor checks Python kernels")
    if not k.interpreter:
        raise fail_usage(f"--kernel {name}: {k.interpreter_how or 'no interpreter in its argv'} "
                         f"({' '.join(k.argv)}); check that interpreter with --python PATH")
    env = dict(system.env)
    env.update(k.env_applied)
    env.pop("PYTHONEXECUTABLE", None)  # jupyter_client drops it for Python kernels
    return HostSystem(env=env), k.interpreter, k


def kernel_env(k):
    from cudadoctor.facts.python_types import PythonEnv

    return PythonEnv(python=k.interpreter, kind="kernel", name=k.name, kernel=k, env=dict(k.env_applied),
                     env_source=k.kernel_json)


def add_kernel_to_report(report, k, strict: bool) -> None:
    """The kernelspec as a fact of the report, and findings about a variable that kernel.json sets
    pointed at kernel.json (the fix is there, not in the user's shell)."""
    from cudadoctor.checks.envs_verdict import blame_overrides
    from cudadoctor.doctor import exit_code
    from cudadoctor.model import Fact

    from cudadoctor.redact import allowed_vars

    # the report shows only allow-listed variables: the kernel's others are dropped from the fact
    public = dataclasses.replace(k, env=allowed_vars(k.env)[0], env_applied=allowed_vars(k.env_applied)[0])
    report.facts[KERNEL_FACT] = Fact.found(public, k.kernel_json)
    e = kernel_env(k)
    report.steps = [dataclasses.replace(st, findings=tuple(blame_overrides(f, e) for f in st.findings))
                    for st in report.steps]
    report.exit_code = exit_code(report.steps, strict)


def kernel_line(k, env, hide_identity: bool = False) -> str:
    from cudadoctor.redact import Redactor
    from cudadoctor.render.envs import env_text

    sets = env_text(k.env_applied)
    text = (f"Jupyter kernel {k.name} ({k.kernel_json}) runs {k.interpreter} [{k.interpreter_how}]" +
            (f" with {sets} from its kernel.json" if sets else "") +
            (f"; shadowed by {k.shadowed_by}" if k.shadowed_by else ""))
    return Redactor(env, hide_identity=hide_identity)(text)
