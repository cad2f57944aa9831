"""CPU checks of the probe kernels' maths: Python ports of the tiled GEMM loop and of the fused attention's
online softmax (the algorithms in probe_kernels/*.cu, step for step) against the references the launch
child checks the GPU with."""

from __future__ import annotations

import math
import os
import random
import re

from cudadoctor.probes.launch import HEAD_DIM, TILE, attention_reference

KERNELS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "probe_kernels")


def test_constants_match_the_cuda_sources():
    gemm = open(os.path.join(KERNELS, "gemm.cu")).read()
    att = open(os.path.join(KERNELS, "attention.cu")).read()
    assert int(re.search(r"#define CD_TILE (\d+)", gemm).group(1)) == TILE
    assert int(re.search(r"#define CD_HEAD_DIM (\d+)", att).group(1)) == HEAD_DIM
    # padding against bank conflicts: tiles are TILE x (TILE + 1)
    assert "[CD_TILE][CD_TILE + 1]" in gemm
    # the fused kernel never allocates an L x L buffer
    assert "L * L" not in att and "[L]" not in att


def tiled_gemm(A, B, M, N, K, tile):
    """The cd_gemm_tiled loop: zero-filled edge tiles, accumulate tile by tile."""
    C = [[0.0] * N for _ in range(M)]
    for by in range(0, M, tile):
        for bx in range(0, N, tile):
            for t in range(0, K, tile):
                As = [[A[r][t + c] if r < M and t + c < K else 0.0 for c in range(tile)] for r in range(by, by + tile)]
                Bs = [[B[t + r][c] if t + r < K and c < N else 0.0 for c in range(bx, bx + tile)] for r in range(tile)]
                for ty in range(tile):
                    for tx in range(tile):
                        if by + ty < M and bx + tx < N:
                            C[by + ty][bx + tx] += sum(As[ty][k] * Bs[k][tx] for k in range(tile))
    return C


def test_tiled_gemm_equals_naive_on_ragged_sizes():
    rng = random.Random(7)
    M, N, K, tile = 13, 9, 21, 4  # not multiples of the tile: exercises the zero-filled edges
    A = [[rng.uniform(-1, 1) for _ in range(K)] for _ in range(M)]
    B = [[rng.uniform(-1, 1) for _ in range(N)] for _ in range(K)]
    C = tiled_gemm(A, B, M, N, K, tile)
    for i in range(M):
        for j in range(N):
            ref = sum(A[i][k] * B[k][j] for k in range(K))
            assert abs(C[i][j] - ref) <= 1e-12 * max(1.0, abs(ref))


def online_attention_row(Q, K, V, L, bh, i, scale, causal, kv_tile):
    """cd_attention for one query row: running max m, denominator l, rescaled accumulator."""
    base = bh * L * HEAD_DIM
    q = [x * scale for x in Q[base + i * HEAD_DIM: base + (i + 1) * HEAD_DIM]]
    m, l, acc = -math.inf, 0.0, [0.0] * HEAD_DIM
    for t in range(0, L, kv_tile):
        for j in range(t, min(t + kv_tile, L)):
            if causal and j > i:
                break
            k = K[base + j * HEAD_DIM: base + (j + 1) * HEAD_DIM]
            v = V[base + j * HEAD_DIM: base + (j + 1) * HEAD_DIM]
            s = sum(a * b for a, b in zip(q, k))
            m_new = max(m, s)
            corr = math.exp(m - m_new) if m != -math.inf else 0.0
            p = math.exp(s - m_new)
            l = l * corr + p
            acc = [a * corr + p * vd for a, vd in zip(acc, v)]
            m = m_new
    return [a / l for a in acc]


def test_online_softmax_equals_the_materialised_reference():
    rng = random.Random(3)
    L, BH = 70, 2
    n = BH * L * HEAD_DIM
    Q, K, V = ([rng.uniform(-1, 1) * 4 for _ in range(n)] for _ in range(3))  # large scores: rescaling matters
    scale = 1.0 / math.sqrt(HEAD_DIM)
    for bh, i, causal in [(0, 0, True), (0, 33, True), (1, 69, True), (1, 5, False), (0, 64, False)]:
        got = online_attention_row(Q, K, V, L, bh, i, scale, causal, kv_tile=32)
        ref = attention_reference(Q, K, V, L, bh, i, scale, causal)
        assert max(abs(a - b) for a, b in zip(got, ref)) < 1e-12


def test_attention_reference_is_a_real_softmax():
    """The first causal row attends to key 0 only: the output is V[0] exactly."""
    rng = random.Random(5)
    L = 8
    n = L * HEAD_DIM
    Q, K, V = ([rng.uniform(-1, 1) for _ in range(n)] for _ in range(3))
    assert attention_reference(Q, K, V, L, 0, 0, 0.125, True) == V[:HEAD_DIM]
    # with identical keys, the weights are uniform: the output is the mean of V's rows
    K1 = K[:HEAD_DIM] * L
    out = attention_reference(Q, K1, V, L, 0, 3, 0.125, False)
    mean = [sum(V[j * HEAD_DIM + d] for j in range(L)) / L for d in range(HEAD_DIM)]
    assert max(abs(a - b) for a, b in zip(out, mean)) < 1e-12
