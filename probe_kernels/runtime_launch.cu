// cudadoctor probe: the path users hit. A runtime-API program (cudart, as torch and most
// extensions use) launches a kernel and prints the cudaError of the launch and of the
// synchronisation, e.g. "launch=209 cudaErrorNoKernelImageForDevice" when the binary carries no
// image this GPU can run. Output: one JSON line.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void cd_runtime_minimal(int *out) { out[threadIdx.x] = threadIdx.x + 1; }

int main()
{
    int *d = nullptr;
    int h[32] = {0};
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    cudaError_t a = cudaMalloc(&d, sizeof(h));
    if (a != cudaSuccess) {
        printf("{\"stage\":\"malloc\",\"code\":%d,\"name\":\"%s\",\"message\":\"%s\",\"runtime\":%d,\"driver\":%d}\n",
               (int)a, cudaGetErrorName(a), cudaGetErrorString(a), rt, drv);
        return 0;
    }
    cd_runtime_minimal<<<1, 32>>>(d);
    cudaError_t l = cudaGetLastError();
    cudaError_t s = cudaDeviceSynchronize();
    int ok = 0;
    if (l == cudaSuccess && s == cudaSuccess && cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess)
        ok = (h[0] == 1 && h[31] == 32);
    printf("{\"stage\":\"launch\",\"code\":%d,\"name\":\"%s\",\"message\":\"%s\",\"sync_code\":%d,"
           "\"sync_name\":\"%s\",\"result_ok\":%s,\"runtime\":%d,\"driver\":%d}\n",
           (int)l, cudaGetErrorName(l), cudaGetErrorString(l), (int)s, cudaGetErrorName(s), ok ? "true" : "false",
           rt, drv);
    cudaFree(d);
    return 0;
}
