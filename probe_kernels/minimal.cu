// cudadoctor probe: the smallest useful kernel. Each thread writes 3*i + 7 and thread 0 also writes
// __CUDA_ARCH__ of the image that actually ran (e.g. 900 for sm_90 SASS, 800 when the driver
// JIT-compiled compute_80 PTX), so the probe sees which image the driver picked.
extern "C" __global__ void cd_minimal(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = 3 * i + 7;
    if (i == 0)
        out[n] =
#ifdef __CUDA_ARCH__
            __CUDA_ARCH__;
#else
            0;
#endif
}
