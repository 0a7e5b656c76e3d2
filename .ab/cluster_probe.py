"""Does cuLaunchKernel (CuPy's launch) honour a kernel's compile-time __cluster_dims__? Each block
reads rank+1's shared memory through mapa; without clusters that address would fault."""
import cupy as cp
src = r'''
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(32, 1) k8(float* o) {
  unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  __shared__ float x[32];
  x[threadIdx.x] = r * 100 + blockIdx.x;
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
  unsigned a = (unsigned)__cvta_generic_to_shared(x + threadIdx.x), b;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(b) : "r"(a), "r"((r + 1) % 8));
  float v; asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(b) : "memory");
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
  o[blockIdx.x * 32 + threadIdx.x] = v;
}'''
k = cp.RawModule(code=src, options=("-arch=sm_90",)).get_function("k8")
o = cp.zeros(16 * 32, cp.float32)
k((16,), (32,), (o,))
got = cp.asnumpy(o).reshape(16, 32)[:, 0]
want = [((b % 8 + 1) % 8) * 100 + (b // 8) * 8 + (b % 8 + 1) % 8 for b in range(16)]
print("cluster probe:", "OK" if list(got) == want else f"WRONG got {got} want {want}")
