"""Which symbol names are torch's own (a module of its own: explain reads it at start-up, without the scan's imports)."""

from __future__ import annotations

import re

# Itanium-mangled names in torch's namespaces: a nested name N, its cv-qualifiers (r V K) and ref-qualifier (R for &,
# O for &&: torch::Library::_def(...) & is _ZNR5torch7Library4_def..., the name torchvision 0.28's _C.so failed on
# under torch 2.11 on the H200), then c10::, at::, torch:: or caffe2:: and a name or an operator (c10::operator<< is
# _ZN3c10lsERSo...); vtables/typeinfo and thunks; and the C names
# torch exports for its Python API and its stable ABI
_TORCH_NAME = re.compile(
    r"^(?:_Z(?:T[VIS]|Th-?n?\d+_|Tv-?n?\d+_-?n?\d+_)?N[rVK]*[RO]?(?:3c10|2at|5torch|6caffe2)(?!E)"
    r"|THP[A-Z]|aoti_torch_)")


def is_torch_name(name: str) -> bool:
    return bool(_TORCH_NAME.match(name))
