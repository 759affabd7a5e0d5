// Matrix-vector products y[b] = W x[b] for b < GEMV_BATCH (set with -DGEMV_BATCH=n at compile time, so the
// accumulators stay in registers), one warp per output row, W in one of the weight layouts below, x and y f32.
// Launch: grid ceil(rows / WARPS_PER_BLOCK) blocks of BLOCK_THREADS threads; x is [GEMV_BATCH][cols], y is
// [GEMV_BATCH][rows]. The weights are read exactly once per launch, which is what decode does per token.

#ifndef GEMV_BATCH
#define GEMV_BATCH 1
#endif

#define GEMV_PROLOGUE                                               \
    const u32 row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32; \
    const u32 lane = threadIdx.x % 32;                              \
    if (row >= rows) {                                              \
        return;                                                     \
    }                                                               \
    float acc[GEMV_BATCH];                                          \
    _Pragma("unroll") for (int b = 0; b < GEMV_BATCH; ++b) {        \
        acc[b] = 0.0f;                                              \
    }

static __device__ __forceinline__ void gemv_store(float* __restrict__ y, const float* acc, u32 row, u32 rows,
                                                  u32 lane, float scale) {
#pragma unroll
    for (int b = 0; b < GEMV_BATCH; ++b) {
        const float v = warp_sum(acc[b]);
        if (lane == 0) {
            y[(u64)b * rows + row] = v * scale;
        }
    }
}

// f16: 8 weights per 16-byte load. cols % 8 == 0.
extern "C" __global__ void gemv_f16(const u16* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                   u32 rows, u32 cols) {
    GEMV_PROLOGUE
    const u32x4* wr = (const u32x4*)(w + (u64)row * cols);
    for (u32 c = lane; c < cols / 8; c += 32) {
        const u32x4 v = wr[c];
        const u32 words[4] = {v.x, v.y, v.z, v.w};
        float wf[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            wf[2 * i] = f16_to_f32((u16)(words[i] & 0xffffu));
            wf[2 * i + 1] = f16_to_f32((u16)(words[i] >> 16));
        }
#pragma unroll
        for (int b = 0; b < GEMV_BATCH; ++b) {
            const f32x4* xb = (const f32x4*)(x + (u64)b * cols + (u64)c * 8);
            const f32x4 x0 = xb[0];
            const f32x4 x1 = xb[1];
            acc[b] += wf[0] * x0.x + wf[1] * x0.y + wf[2] * x0.z + wf[3] * x0.w + wf[4] * x1.x + wf[5] * x1.y +
                      wf[6] * x1.z + wf[7] * x1.w;
        }
    }
    gemv_store(y, acc, row, rows, lane, 1.0f);
}

// q8_0 (ggml block_q8_0): 34 bytes per 32 weights, an f16 scale d then 32 int8; weight j = d * qs[j].
// One lane per block; blocks are 2-byte aligned, so 16-bit loads. cols % 32 == 0.
extern "C" __global__ void gemv_q8_0(const u8* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                    u32 rows, u32 cols) {
    GEMV_PROLOGUE
    const u32 nb = cols / 32;
    const u8* wr = w + (u64)row * nb * 34;
    for (u32 ib = lane; ib < nb; ib += 32) {
        const u16* blk = (const u16*)(wr + (u64)ib * 34);
        const float d = f16_to_f32(blk[0]);
        float part[GEMV_BATCH];
#pragma unroll
        for (int b = 0; b < GEMV_BATCH; ++b) {
            part[b] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const u16 q = blk[1 + j];
            const float q0 = (float)(i8)(q & 0xffu);
            const float q1 = (float)(i8)(q >> 8);
#pragma unroll
            for (int b = 0; b < GEMV_BATCH; ++b) {
                const float* xb = x + (u64)b * cols + (u64)ib * 32 + 2 * j;
                part[b] += q0 * xb[0] + q1 * xb[1];
            }
        }
#pragma unroll
        for (int b = 0; b < GEMV_BATCH; ++b) {
            acc[b] += d * part[b];
        }
    }
    gemv_store(y, acc, row, rows, lane, 1.0f);
}

// q4_0 (ggml block_q4_0): 18 bytes per 32 weights, an f16 scale d then 16 bytes; byte j holds weight j in its low
// nibble and weight j + 16 in its high nibble, each stored +8: weight = d * (nibble - 8). cols % 32 == 0.
extern "C" __global__ void gemv_q4_0(const u8* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                    u32 rows, u32 cols) {
    GEMV_PROLOGUE
    const u32 nb = cols / 32;
    const u8* wr = w + (u64)row * nb * 18;
    for (u32 ib = lane; ib < nb; ib += 32) {
        const u16* blk = (const u16*)(wr + (u64)ib * 18);
        const float d = f16_to_f32(blk[0]);
        float part[GEMV_BATCH];
#pragma unroll
        for (int b = 0; b < GEMV_BATCH; ++b) {
            part[b] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const u32 q = blk[1 + j];  // bytes 2j (low) and 2j + 1 (high)
            const float lo0 = (float)((int)(q & 0xfu) - 8);
            const float hi0 = (float)((int)((q >> 4) & 0xfu) - 8);
            const float lo1 = (float)((int)((q >> 8) & 0xfu) - 8);
            const float hi1 = (float)((int)((q >> 12) & 0xfu) - 8);
#pragma unroll
            for (int b = 0; b < GEMV_BATCH; ++b) {
                const float* xb = x + (u64)b * cols + (u64)ib * 32;
                part[b] += lo0 * xb[2 * j] + lo1 * xb[2 * j + 1] + hi0 * xb[2 * j + 16] + hi1 * xb[2 * j + 17];
            }
        }
#pragma unroll
        for (int b = 0; b < GEMV_BATCH; ++b) {
            acc[b] += d * part[b];
        }
    }
    gemv_store(y, acc, row, rows, lane, 1.0f);
}

// I2_S (BitNet fork, x86 layout, QK_I2_S = 128): 32 bytes per 128 weights; byte p of a block holds weights
// g*32 + p for g = 0..3, g = 0 in bits 7:6 down to g = 3 in bits 1:0; codes 0, 1, 2 mean -1, 0, +1. One f32 scale
// for the whole tensor after rows * cols / 4 bytes. 16 bytes (half a block) per lane and load. cols % 128 == 0.
extern "C" __global__ void gemv_i2_s(const u8* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                    u32 rows, u32 cols) {
    GEMV_PROLOGUE
    const u32 row_bytes = cols / 4;
    const u32x4* wr = (const u32x4*)(w + (u64)row * row_bytes);
    for (u32 c = lane; c < row_bytes / 16; c += 32) {
        const u32x4 v = wr[c];
        const u32 words[4] = {v.x, v.y, v.z, v.w};
        const u32 block = c / 2;
        const u32 pos0 = (c % 2) * 16;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const u32 byte = (words[i / 4] >> (8 * (i % 4))) & 0xffu;
            const u32 k = block * 128 + pos0 + i;
#pragma unroll
            for (int g = 0; g < 4; ++g) {
                const float t = (float)((int)((byte >> (6 - 2 * g)) & 3u) - 1);
#pragma unroll
                for (int b = 0; b < GEMV_BATCH; ++b) {
                    acc[b] += t * x[(u64)b * cols + k + g * 32];
                }
            }
        }
    }
    gemv_store(y, acc, row, rows, lane, tensor_scale(w, (u64)rows * row_bytes));
}

// TL1 (BitNet fork's lookup-table layout, untiled): one 4-bit index 3*w0 + w1 + 4 per pair of consecutive
// weights, two per byte with the first pair in the high nibble; one f32 scale after rows * cols / 4 bytes.
// cols % 64 == 0.
extern "C" __global__ void gemv_tl1(const u8* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                   u32 rows, u32 cols) {
    GEMV_PROLOGUE
    const u32 row_bytes = cols / 4;
    const u32x4* wr = (const u32x4*)(w + (u64)row * row_bytes);
    for (u32 c = lane; c < row_bytes / 16; c += 32) {
        const u32x4 v = wr[c];
        const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const u32 byte = (words[i / 4] >> (8 * (i % 4))) & 0xffu;
            const u32 k = (c * 16 + i) * 4;
#pragma unroll
            for (int b = 0; b < GEMV_BATCH; ++b) {
                const f32x4 xv = *(const f32x4*)(x + (u64)b * cols + k);
                acc[b] += tl1_dot(byte >> 4, xv.x, xv.y) + tl1_dot(byte & 0xfu, xv.z, xv.w);
            }
        }
    }
    gemv_store(y, acc, row, rows, lane, tensor_scale(w, (u64)rows * row_bytes));
}

// TL2 (BitNet fork's lookup-table layout, untiled): the first k3 columns in triples, each a 4-bit magnitude (two
// per byte, the first triple in the high nibble) plus a sign bit (8 per byte, the first triple in bit 0); the
// remaining cols - k3 columns in TL1 pairs. Per row: k3/6 magnitude bytes, k3/24 sign bytes, (cols - k3)/4 pair
// bytes; rows follow each other; one f32 scale after them all. k3 % 96 == 0, cols % 16 == 0.
extern "C" __global__ void gemv_tl2(const u8* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                   u32 rows, u32 cols, u32 k3) {
    GEMV_PROLOGUE
    const u32 mag_bytes = k3 / 6;
    const u32 sign_bytes = k3 / 24;
    const u32 pair_bytes = (cols - k3) / 4;
    const u32 row_bytes = mag_bytes + sign_bytes + pair_bytes;
    const u8* wr = w + (u64)row * row_bytes;
    const u32* mags = (const u32*)wr;
    const u8* signs = wr + mag_bytes;
    const u32* pairs = (const u32*)(wr + mag_bytes + sign_bytes);
    // Eight triples per step: 4 magnitude bytes and their sign byte.
    for (u32 t = lane; t < sign_bytes; t += 32) {
        const u32 m = mags[t];
        const u32 s = signs[t];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const u32 mag = (m >> (8 * (i / 2) + ((i % 2) ? 0 : 4))) & 0xfu;
            const u32 neg = (s >> i) & 1u;
            const u32 k = (t * 8 + i) * 3;
#pragma unroll
            for (int b = 0; b < GEMV_BATCH; ++b) {
                const float* xb = x + (u64)b * cols + k;
                acc[b] += tl2_dot(mag, neg, xb[0], xb[1], xb[2]);
            }
        }
    }
    for (u32 t = lane; t < pair_bytes / 4; t += 32) {
        const u32 word = pairs[t];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const u32 byte = (word >> (8 * i)) & 0xffu;
            const u32 k = k3 + (t * 4 + i) * 4;
#pragma unroll
            for (int b = 0; b < GEMV_BATCH; ++b) {
                const float* xb = x + (u64)b * cols + k;
                acc[b] += tl1_dot(byte >> 4, xb[0], xb[1]) + tl1_dot(byte & 0xfu, xb[2], xb[3]);
            }
        }
    }
    gemv_store(y, acc, row, rows, lane, tensor_scale(w, (u64)rows * row_bytes));
}
