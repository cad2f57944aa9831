"""Which symbol names are torch's own (a module of its own: explain reads it at start-up, without the scan's imports).

A name is torch's when only torch (or the extension's own libraries) can define it: a C++ name in which one of torch's
namespaces appears anywhere (c10::, c10d::, at::, torch::, caffe2::, as the function's scope, a class's, or a template
argument: pybind11::detail::type_caster<at::Tensor>::load), or a C name of torch's Python API (THPVariableClass,
THPVariable_Wrap, also mangled), of AOTInductor's shim (aoti_torch_*) or of the stable ABI (torch_call_dispatcher,
torch_library_impl). A C library or CUDA runtime function mentions none of these.
"""

from __future__ import annotations

import re

# a nested name N with cv-qualifiers (r V K) and a ref-qualifier (R for &, O for &&: torch::Library::_def(...) & is
# _ZNR5torch7Library4_def..., the name torchvision 0.28's _C.so failed on under torch 2.11 on the H200), then one of
# torch's namespaces followed by a name's length or an operator (c10::operator<< is _ZN3c10lsERSo...)
_NAMESPACE = re.compile(r"N[rVK]*[RO]?(?:3c10|4c10d|2at|5torch|6caffe2)(?=\d|[a-z]{2})")
_C_NAME = re.compile(r"^(?:THP[A-Z]|aoti_torch_|torch_[a-z])")
_MANGLED_THP = re.compile(r"^_Z\d+THP[A-Z]")


def is_torch_name(name: str) -> bool:
    if name.startswith("_Z"):
        return bool(_MANGLED_THP.match(name) or _NAMESPACE.search(name))
    return bool(_C_NAME.match(name))
