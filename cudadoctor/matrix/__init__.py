"""The version matrix: data in matrix/*.toml (shipped in the wheel), read into typed queries.

Every row carries `source` and `confidence` ("verified" or "inferred").
"""

from __future__ import annotations

import functools
import sys

from cudadoctor.paths import data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_table(name: str) -> dict:
    with open(data_dir("matrix") / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


class Matrix:
    def __init__(self) -> None:
        self.archs = read_table("archs").get("arch", [])

    def arch_for_cc(self, cc: tuple):
        """The row of matrix/archs.toml for compute capability (major, minor), or None."""
        key = f"{cc[0]}.{cc[1]}"
        return next((a for a in self.archs if a.get("cc") == key), None)

    def arch_name(self, cc: tuple) -> str:
        row = self.arch_for_cc(cc)
        return row["architecture"] if row else ""


@functools.lru_cache(maxsize=1)
def load() -> Matrix:
    return Matrix()
