// Shared helpers for the calibration kernels (optimizer `calibrate`, src/calibrate/gpu). Compiled at run time by
// NVRTC with no include path: nothing here may include a toolkit header, so the f16 conversions are PTX `cvt`
// instructions and the vector types are our own.
//
// Every matrix is row-major: `rows` output features, each a row of `cols` weights (ggml's ne[0] = cols).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

struct __attribute__((aligned(16))) u32x4 {
    u32 x, y, z, w;
};

struct __attribute__((aligned(16))) f32x4 {
    float x, y, z, w;
};

// Threads per block of every kernel here: four warps, one output row per warp in the GEMVs.
#define BLOCK_THREADS 128
#define WARPS_PER_BLOCK (BLOCK_THREADS / 32)

static __device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

static __device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

// The scale of a BitNet tensor (I2_S, TL1, TL2): one f32 after the packed weights, as the BitNet fork's
// quantize_i2_s stores it (`scale_ptr = (float*)((char*)i2_weight + n / 4)`); TL2's packed part is shorter, so
// the caller passes the offset.
static __device__ __forceinline__ float tensor_scale(const u8* w, u64 scale_offset) {
    return *(const float*)(w + scale_offset);
}

// Ternary decoding. I2_S: a 2-bit code 0, 1, 2 means -1, 0, +1. TL1: a 4-bit index 3*w0 + w1 + 4 for the pair
// (w0, w1). TL2: a 4-bit magnitude |9*w0 + 3*w1 + w2| and a sign bit (set: negative) for the triple.
static __device__ __forceinline__ float tl1_dot(u32 idx, float x0, float x1) {
    const int w0 = (int)(idx / 3u) - 1;
    const int w1 = (int)(idx % 3u) - 1;
    return (float)w0 * x0 + (float)w1 * x1;
}

static __device__ __forceinline__ float tl2_dot(u32 mag, u32 negative, float x0, float x1, float x2) {
    const int v = negative ? -(int)mag : (int)mag;
    const int u = v + 13;  // 9*(w0+1) + 3*(w1+1) + (w2+1), in 0..26
    const int w0 = u / 9 - 1;
    const int w1 = (u / 3) % 3 - 1;
    const int w2 = u % 3 - 1;
    return (float)w0 * x0 + (float)w1 * x1 + (float)w2 * x2;
}
