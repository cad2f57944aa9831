// cudadoctor probe: single-precision GEMM C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// cd_gemm_naive: one thread per C element, every operand read from global memory.
// cd_gemm_tiled: 32x32 tiles staged in shared memory. Each tile row is padded by one float
// (TILE + 1 columns) so the column-wise reads of Bs by a warp hit 32 different banks instead of
// one (no shared-memory bank conflicts).
#define CD_TILE 32

extern "C" __global__ void cd_gemm_naive(const float *A, const float *B, float *C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N)
        return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[row * K + k] * B[k * N + col];
    C[row * N + col] = acc;
}

extern "C" __global__ void cd_gemm_tiled(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float As[CD_TILE][CD_TILE + 1];
    __shared__ float Bs[CD_TILE][CD_TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * CD_TILE + ty;
    int col = blockIdx.x * CD_TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += CD_TILE) {
        As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
        Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < CD_TILE; ++k)
            acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = acc;
}
