// Dequantization to a row-major f16 matrix [rows][cols], the workspace a quantized matmul fills before a cuBLAS
// f16 GEMM (llama.cpp's cuBLAS path converts src0 to f16 in a pool buffer the same way). Same weight layouts as
// gemv.cu. Launch: a grid-stride loop over `units` (one block of weights, or one byte of a ternary layout).

#define GRID_STRIDE_LOOP(i, units) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (units); i += (u64)gridDim.x * blockDim.x)

// One unit per 32-weight block: (rows * cols / 32) units.
extern "C" __global__ void dequant_q8_0(const u8* __restrict__ w, u16* __restrict__ out, u32 rows, u32 cols) {
    GRID_STRIDE_LOOP(ib, (u64)rows * (cols / 32)) {
        const u16* blk = (const u16*)(w + ib * 34);
        const float d = f16_to_f32(blk[0]);
        u16* o = out + ib * 32;
        for (int j = 0; j < 16; ++j) {
            const u16 q = blk[1 + j];
            o[2 * j] = f32_to_f16(d * (float)(i8)(q & 0xffu));
            o[2 * j + 1] = f32_to_f16(d * (float)(i8)(q >> 8));
        }
    }
}

extern "C" __global__ void dequant_q4_0(const u8* __restrict__ w, u16* __restrict__ out, u32 rows, u32 cols) {
    GRID_STRIDE_LOOP(ib, (u64)rows * (cols / 32)) {
        const u8* blk = w + ib * 18;
        const float d = f16_to_f32(*(const u16*)blk);
        u16* o = out + ib * 32;
        for (int j = 0; j < 16; ++j) {
            const u32 q = blk[2 + j];
            o[j] = f32_to_f16(d * (float)((int)(q & 0xfu) - 8));
            o[j + 16] = f32_to_f16(d * (float)((int)(q >> 4) - 8));
        }
    }
}

// One unit per byte (4 weights): rows * cols / 4 units.
extern "C" __global__ void dequant_i2_s(const u8* __restrict__ w, u16* __restrict__ out, u32 rows, u32 cols) {
    const u64 n_bytes = (u64)rows * cols / 4;
    const float scale = tensor_scale(w, n_bytes);
    GRID_STRIDE_LOOP(i, n_bytes) {
        const u32 byte = w[i];
        const u64 block = i / 32;
        const u64 pos = i % 32;
        for (int g = 0; g < 4; ++g) {
            const float t = (float)((int)((byte >> (6 - 2 * g)) & 3u) - 1);
            out[block * 128 + g * 32 + pos] = f32_to_f16(scale * t);
        }
    }
}

extern "C" __global__ void dequant_tl1(const u8* __restrict__ w, u16* __restrict__ out, u32 rows, u32 cols) {
    const u64 n_bytes = (u64)rows * cols / 4;
    const float scale = tensor_scale(w, n_bytes);
    GRID_STRIDE_LOOP(i, n_bytes) {
        const u32 byte = w[i];
        const u32 hi = byte >> 4;
        const u32 lo = byte & 0xfu;
        u16* o = out + i * 4;
        o[0] = f32_to_f16(scale * (float)((int)(hi / 3u) - 1));
        o[1] = f32_to_f16(scale * (float)((int)(hi % 3u) - 1));
        o[2] = f32_to_f16(scale * (float)((int)(lo / 3u) - 1));
        o[3] = f32_to_f16(scale * (float)((int)(lo % 3u) - 1));
    }
}

static __device__ __forceinline__ void tl2_triple(u16* o, float scale, u32 mag, u32 negative) {
    const int v = negative ? -(int)mag : (int)mag;
    const int u = v + 13;
    o[0] = f32_to_f16(scale * (float)(u / 9 - 1));
    o[1] = f32_to_f16(scale * (float)((u / 3) % 3 - 1));
    o[2] = f32_to_f16(scale * (float)(u % 3 - 1));
}

// One unit per magnitude byte (two triples) and per pair byte of every row: rows * (k3/6 + (cols-k3)/4) units.
extern "C" __global__ void dequant_tl2(const u8* __restrict__ w, u16* __restrict__ out, u32 rows, u32 cols, u32 k3) {
    const u32 mag_bytes = k3 / 6;
    const u32 sign_bytes = k3 / 24;
    const u32 pair_bytes = (cols - k3) / 4;
    const u32 row_bytes = mag_bytes + sign_bytes + pair_bytes;
    const float scale = tensor_scale(w, (u64)rows * row_bytes);
    const u32 units_per_row = mag_bytes + pair_bytes;
    GRID_STRIDE_LOOP(i, (u64)rows * units_per_row) {
        const u64 row = i / units_per_row;
        const u32 unit = (u32)(i % units_per_row);
        const u8* wr = w + row * row_bytes;
        u16* o = out + row * cols;
        if (unit < mag_bytes) {
            const u32 byte = wr[unit];
            const u32 signs = wr[mag_bytes + unit / 4];
            const u32 first = unit * 2;  // triple index within the row
            tl2_triple(o + first * 3, scale, byte >> 4, (signs >> (first % 8)) & 1u);
            tl2_triple(o + (first + 1) * 3, scale, byte & 0xfu, (signs >> ((first + 1) % 8)) & 1u);
        } else {
            const u32 p = unit - mag_bytes;
            const u32 byte = wr[mag_bytes + sign_bytes + p];
            const u32 hi = byte >> 4;
            const u32 lo = byte & 0xfu;
            u16* q = o + k3 + p * 4;
            q[0] = f32_to_f16(scale * (float)((int)(hi / 3u) - 1));
            q[1] = f32_to_f16(scale * (float)((int)(hi % 3u) - 1));
            q[2] = f32_to_f16(scale * (float)((int)(lo / 3u) - 1));
            q[3] = f32_to_f16(scale * (float)((int)(lo % 3u) - 1));
        }
    }
}
