// Adds the architecture its code was compiled for, so a test sees which member ran.
extern "C" __global__ void fb_arch(int *a) { a[threadIdx.x] += __CUDA_ARCH__ / 10; }
