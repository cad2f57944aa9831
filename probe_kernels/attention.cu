// cudadoctor probe: fused single-head attention O = softmax(scale * Q K^T + mask) V in one pass.
// Q, K, V, O are [BH, L, D] row-major floats with D = CD_HEAD_DIM. One thread owns one query row:
// it keeps its query, a running maximum m, a running denominator l and an unnormalised output
// accumulator in registers, and streams K/V in tiles of CD_KV_TILE rows through shared memory.
// For each key it updates the online softmax (rescaling by exp(m_old - m_new)), so the L x L
// score matrix is never written anywhere. `causal` != 0 masks keys after the query (j > i).
#define CD_HEAD_DIM 64
#define CD_KV_TILE 32

extern "C" __global__ void cd_attention(const float *Q, const float *K, const float *V, float *O,
                                        int L, float scale, int causal)
{
    __shared__ float Ks[CD_KV_TILE][CD_HEAD_DIM + 1];
    __shared__ float Vs[CD_KV_TILE][CD_HEAD_DIM + 1];
    const int bh = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float *q_base = Q + (long long)bh * L * CD_HEAD_DIM;
    const float *k_base = K + (long long)bh * L * CD_HEAD_DIM;
    const float *v_base = V + (long long)bh * L * CD_HEAD_DIM;
    float q[CD_HEAD_DIM], acc[CD_HEAD_DIM];
    float m = __int_as_float(0xff800000), l = 0.0f;  // -inf, without math.h (NVRTC has none)
    const bool active = i < L;
#pragma unroll
    for (int d = 0; d < CD_HEAD_DIM; ++d) {
        q[d] = active ? q_base[(long long)i * CD_HEAD_DIM + d] * scale : 0.0f;
        acc[d] = 0.0f;
    }
    // The last key any query of this block may see (causal) bounds the loop for the whole block.
    int block_last = causal ? min(L, (int)((blockIdx.x + 1) * blockDim.x)) : L;
    for (int t = 0; t < block_last; t += CD_KV_TILE) {
        for (int idx = threadIdx.x; idx < CD_KV_TILE * CD_HEAD_DIM; idx += blockDim.x) {
            int r = idx / CD_HEAD_DIM, c = idx % CD_HEAD_DIM;
            bool in = t + r < L;
            Ks[r][c] = in ? k_base[(long long)(t + r) * CD_HEAD_DIM + c] : 0.0f;
            Vs[r][c] = in ? v_base[(long long)(t + r) * CD_HEAD_DIM + c] : 0.0f;
        }
        __syncthreads();
        if (active) {
            int n = min(CD_KV_TILE, L - t);
            for (int j = 0; j < n; ++j) {
                if (causal && t + j > i)
                    break;
                float s = 0.0f;
#pragma unroll
                for (int d = 0; d < CD_HEAD_DIM; ++d)
                    s += q[d] * Ks[j][d];
                float m_new = fmaxf(m, s);
                float corr = __expf(m - m_new);
                float p = __expf(s - m_new);
                l = l * corr + p;
#pragma unroll
                for (int d = 0; d < CD_HEAD_DIM; ++d)
                    acc[d] = acc[d] * corr + p * Vs[j][d];
                m = m_new;
            }
        }
        __syncthreads();
    }
    if (active) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
        for (int d = 0; d < CD_HEAD_DIM; ++d)
            O[((long long)bh * L + i) * CD_HEAD_DIM + d] = acc[d] * inv;
    }
}
