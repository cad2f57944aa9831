# Sourced by every benchmarks/gpu/*.sh: install cudadoctor from the carried wheels (.whl/, built by
# the lead with `pip wheel --no-deps -w .whl .` plus any runtime dependency the GPU image lacks) into
# /tmp/site once per machine, and set the environment every GPU script shares.
#   . "$(dirname "$0")/_install.sh"
REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TORCH_PY=${TORCH_PY:-/opt/torch/.venv/bin/python3}
[ -x "$TORCH_PY" ] || TORCH_PY=$(command -v python3)
if [ ! -x /tmp/site/bin/cudadoctor ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site "$REPO"/.whl/*.whl \
    >/dev/null 2>&1 || { echo "install of .whl/*.whl into /tmp/site failed"; exit 2; }
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 NO_COLOR=1
# NVLink multicast stays off on the shared machines (never unset these, never set NCCL_NVLS_ENABLE=1).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd /tmp || exit 2  # never import the checkout by accident: `python -m cudadoctor` must use the wheel
