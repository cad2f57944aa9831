"""The two children of the topology facts, run for real against tiny fake driver libraries compiled here
(the real pynvml and ctypes calls, the real argument passing): the NVML links child and the driver-API
peer child. The fakes describe the H200 machine of tests/data/multigpu: two GPUs at 00:06.0 and 00:07.0,
18 NVLink 4.0 links each into an unseen NVSwitch (FFFFFFFF:FF:FF.0), peer access both ways."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pynvml")
sys.path.insert(0, str(Path(__file__).parent / "faults"))
from fakelibs import build, compiler  # noqa: E402

from cudadoctor.facts.gpu_links import GpuLinksInfo, GpuPeersInfo, pairs  # noqa: E402
from cudadoctor.model import from_jsonable  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

NVML_C = r"""
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } pci_t;
typedef struct { unsigned long long total, free, used; } mem_t;
static long H[2] = {1, 2};
static int idx(void *h) { return (long)h == 2 ? 1 : 0; }
int nvmlInitWithFlags(unsigned f) { (void)f; return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return r == 2 ? "Invalid Argument" : "Not Supported"; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { if (i > 1) return 2; *h = (void *)H[i]; return 0; }
int nvmlDeviceGetName(void *h, char *s, unsigned n) { (void)h; snprintf(s, n, "NVIDIA H200"); return 0; }
int nvmlDeviceGetUUID(void *h, char *s, unsigned n) { snprintf(s, n, "GPU-0000000%d-0000-0000-0000-000000000000", idx(h)); return 0; }
int nvmlDeviceGetPciInfo_v3(void *h, pci_t *p) {
    memset(p, 0, sizeof *p); snprintf(p->busId, 32, "00000000:00:0%d.0", 6 + idx(h)); return 0; }
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) { (void)h; m->total = 150754820096ULL; m->free = m->total; m->used = 0; return 0; }
int nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned *v) { (void)h; *v = 5; return 0; }
int nvmlDeviceGetMaxPcieLinkWidth(void *h, unsigned *v) { (void)h; *v = 16; return 0; }
int nvmlDeviceGetCudaComputeCapability(void *h, int *a, int *b) { (void)h; *a = 9; *b = 0; return 0; }
static int down(void *h, unsigned l) {
    const char *d = getenv("FAKE_LINK_DOWN");  /* "GPU:LINK" */
    return d && idx(h) == atoi(d) && (int)l == atoi(strchr(d, ':') + 1);
}
int nvmlDeviceGetNvLinkState(void *h, unsigned l, unsigned *v) { if (l >= 18) return 2; *v = !down(h, l); return 0; }
int nvmlDeviceGetNvLinkVersion(void *h, unsigned l, unsigned *v) { (void)h; if (l >= 18) return 2; *v = 6; return 0; }
int nvmlDeviceGetNvLinkRemoteDeviceType(void *h, unsigned l, int *v) { (void)h; if (l >= 18) return 2; *v = 2; return 0; }
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned l, pci_t *p) {
    (void)h; if (l >= 18) return 2; memset(p, 0, sizeof *p); snprintf(p->busId, 32, "FFFFFFFF:FF:FF.0"); return 0; }
int nvmlDeviceGetNvLinkErrorCounter(void *h, unsigned l, int c, unsigned long long *v) {
    (void)h; if (l >= 18) return 2; *v = c == 3 ? l + 3 : 0; return 0; }
int nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, int *v) { (void)a; (void)b; *v = 30; return 0; }
int nvmlDeviceGetP2PStatus(void *a, void *b, int i, int *v) { (void)a; (void)b; *v = i == 4 ? 5 : 0; return 0; }
"""

CUDA_C = r"""
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
static int ord[2] = {0, 1};
static void order(void) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v && !strcmp(v, "1,0")) { ord[0] = 1; ord[1] = 0; }
}
int cuInit(unsigned f) { (void)f; order(); return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuGetErrorName(int e, const char **s) { (void)e; *s = "CUDA_ERROR_INVALID_DEVICE"; return 0; }
int cuGetErrorString(int e, const char **s) { (void)e; *s = "invalid device ordinal"; return 0; }
int cuDeviceGetCount(int *n) { *n = 2; return 0; }
int cuDeviceGet(int *d, int o) { if (o < 0 || o > 1) return 101; *d = o; return 0; }
int cuDeviceGetPCIBusId(char *s, int n, int d) { snprintf(s, n, "0000:00:0%d.0", 6 + ord[d]); return 0; }
int cuDeviceGetName(char *s, int n, int d) { (void)d; snprintf(s, n, "NVIDIA H200"); return 0; }
int cuDeviceGetUuid_v2(unsigned char *u, int d) { memset(u, 0, 16); u[3] = (unsigned char)ord[d]; return 0; }
int cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = 150754820096ULL; return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { (void)d; *v = a == 75 ? 9 : 0; return 0; }
int cuDeviceCanAccessPeer(int *v, int a, int b) {
    const char *no = getenv("FAKE_NO_PEER"); *v = !(no && *no) && a != b; return 0; }
int cuDeviceGetP2PAttribute(int *v, int attr, int a, int b) { (void)a; (void)b; *v = attr == 1 ? 0 : 1; return 0; }
"""

pytestmark = pytest.mark.skipif(not compiler(), reason="needs a C compiler to build the fake driver libraries")


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fakedriver")
    build(d, "libnvidia-ml.so.1", NVML_C)
    build(d, "libcuda.so.1", CUDA_C)
    return d


def _child(libs: Path, module: str, **env) -> str:
    e = dict(os.environ, LD_LIBRARY_PATH=str(libs), PYTHONPATH=str(REPO), **env)
    p = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=60, env=e)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_nvml_links_child_reads_every_link_and_pair(libs):
    raw = json.loads(_child(libs, "cudadoctor.system.nvml_links").strip().splitlines()[-1])
    assert raw["error"] == "" and len(raw["gpus"]) == 2
    g0 = raw["gpus"][0]
    assert g0["bus"] == "00000000:00:06.0" and g0["memory_total_mib"] == 143771 and g0["compute_capability"] == "9.0"
    assert len(g0["links"]) == 18 and g0["links"][5]["crc_data"] == 8 and g0["links"][5]["remote_type"] == 2
    pair = next(p for p in raw["pairs"] if (p["a"], p["b"]) == (0, 1))
    assert pair["ancestor"] == 30 and pair["p2p_read"] == 0  # the read index works (pynvml's constant is a tuple)
    info = from_jsonable(GpuLinksInfo, raw)
    assert [p.label for p in pairs(info)] == ["NV18"]


def test_nvml_links_child_sees_a_link_down(libs):
    raw = json.loads(_child(libs, "cudadoctor.system.nvml_links", FAKE_LINK_DOWN="1:7").strip().splitlines()[-1])
    info = from_jsonable(GpuLinksInfo, raw)
    assert len(info.gpus[1].active_links) == 17 and [p.label for p in pairs(info)] == ["NV17"]


def test_peer_child_maps_ordinals_to_bus_ids_under_the_users_order(libs):
    rec = json.loads(_child(libs, "cudadoctor.probes.peer", CUDA_VISIBLE_DEVICES="1,0").split("@@CDPEER@@")[1])
    info = from_jsonable(GpuPeersInfo, rec)
    assert info.visible_devices == "1,0" and info.driver_cuda == "13.0"
    assert [(d.ordinal, d.bus) for d in info.devices] == [(0, "0000:00:07.0"), (1, "0000:00:06.0")]
    assert info.devices[0].uuid == "GPU-00000001-0000-0000-0000-000000000000"
    assert info.access(0, 1) is True and info.peers[0].atomics is True


def test_peer_child_reports_no_access(libs):
    rec = json.loads(_child(libs, "cudadoctor.probes.peer", FAKE_NO_PEER="1").split("@@CDPEER@@")[1])
    assert [p["access"] for p in rec["peers"]] == [False, False]


def test_peer_child_without_libcuda(tmp_path):
    e = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), PYTHONPATH=str(REPO))
    code = "import sys; import cudadoctor.probes.driver_api as D; " \
           "D.Driver.__init__.__defaults__ = ('/nonexistent/libcuda.so.1',); " \
           "import cudadoctor.probes.peer as P; sys.exit(P.main())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=e)
    rec = json.loads(p.stdout.split("@@CDPEER@@")[1])
    assert rec["error"]["name"] == "no-libcuda"
