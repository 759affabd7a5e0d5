// Fills a buffer with hashed bytes whose every 2- and 4-byte word is a finite float of magnitude below 2 in f16,
// bf16, f32 and fp8 e4m3 alike (mask 0xBB clears bit 6 of every byte: the top exponent bit of each format), so
// GEMMs run on realistic data: all-zero operands draw less power and clock higher than real weights do.

extern "C" __global__ void fill_finite(u8* __restrict__ p, u64 bytes, u32 seed) {
    const u64 words = bytes / 4;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u32* p32 = (u32*)p;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        u32 h = (u32)i * 2654435761u ^ (u32)(i >> 32) ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        h *= 3266489917u;
        h ^= h >> 16;
        p32[i] = h & 0xBBBBBBBBu;
    }
    if (blockIdx.x == 0 && threadIdx.x < (bytes & 3)) {
        p[words * 4 + threadIdx.x] = (u8)(0x3Bu ^ threadIdx.x);
    }
}
