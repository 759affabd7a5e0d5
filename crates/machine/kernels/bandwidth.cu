// Read bandwidth: every byte of the buffer is loaded once in 16-byte words, the way a GEMV streams its weights.
// The XOR of everything read is compared with a constant and stored only on a match, so the compiler must keep
// every load and the kernel writes (almost surely) nothing.

extern "C" __global__ void read_bytes(const u32x4* __restrict__ p, u64 words16, u32* __restrict__ sink) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u32 acc = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words16; i += stride) {
        const u32x4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) {
        sink[0] = acc;
    }
}
