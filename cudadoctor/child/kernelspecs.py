"""Runs inside the interpreter of the `jupyter` on PATH, as a script: asks its own jupyter_client and
jupyter_core which kernels that Jupyter starts and where it looks for them. Stdlib plus what it finds.

Prints one marked JSON line. A kernelspec that jupyter_client cannot load is left out by it (as
Jupyter itself does); everything else it knows is reported as it reports it.
"""

import json
import sys

MARK = "@@CUDADOCTOR-KERNELS@@"


def main():
    out = {"python": sys.executable, "prefix": sys.prefix, "version": sys.version.split()[0]}
    try:
        import jupyter_core
        from jupyter_core.paths import jupyter_path

        out["jupyter_core"] = str(getattr(jupyter_core, "__version__", ""))
        out["jupyter_path"] = list(jupyter_path("kernels"))
    except Exception as e:  # not installed, or broken
        out["jupyter_core_error"] = "%s: %s" % (type(e).__name__, e)
    try:
        import jupyter_client
        from jupyter_client.kernelspec import KernelSpecManager

        m = KernelSpecManager()
        out["jupyter_client"] = str(getattr(jupyter_client, "__version__", ""))
        out["kernel_dirs"] = list(m.kernel_dirs)
        out["specs"] = m.get_all_specs()
    except Exception as e:
        out["jupyter_client_error"] = "%s: %s" % (type(e).__name__, e)
    sys.stdout.write(MARK + " " + json.dumps(out, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
