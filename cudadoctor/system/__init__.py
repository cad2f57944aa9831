"""Ports: the only code that touches the machine.

`System` bundles them; `cudadoctor.system.host.HostSystem` is the real one and
`tests/fakes/system.py` the fake every test uses. Code outside `system/` receives a System and
never imports os/subprocess/ctypes for machine access.
"""

from cudadoctor.system.base import System  # noqa: F401
from cudadoctor.system.proc import ProcResult  # noqa: F401
