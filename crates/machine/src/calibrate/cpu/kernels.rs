//! The loops `optimizer calibrate` times on a CPU: streaming reads, copies and triads for memory bandwidth, an
//! FP32 FMA loop for the vector peak, and the quantized dot products of llama.cpp's CPU backend (ggml-cpu
//! `ggml_vec_dot_q4_0_q8_0`, `_q8_0_q8_0`, `_q4_K_q8_K`) on ggml's block layouts.
//!
//! The dot products follow ggml's AVX2 code path instruction for instruction (unpack nibbles, `vpsignb` +
//! `vpmaddubsw` + `vpmaddwd`, one FMA per block), so their rate moves with what the engine's kernels can do on a
//! machine; without AVX2 + FMA + F16C they fall back to portable Rust, and the measurement says which (`isa`).
//! Every vectorised kernel is checked against its portable twin in the tests below.

use std::hint::black_box;

/// Weights per block of Q4_0 and Q8_0 (ggml `QK4_0`, `QK8_0`).
pub(crate) const QK: usize = 32;
/// Weights per super-block of the K-quants (ggml `QK_K`).
pub(crate) const QK_K: usize = 256;
/// Bytes of one block: Q4_0 (f16 scale + 16 bytes of nibbles), Q8_0 (f16 scale + 32 int8), Q4_K (two f16,
/// 12 bytes of 6-bit scales and mins, 128 bytes of nibbles), Q8_K (f32 scale, 256 int8, 16 i16 sums).
pub(crate) const Q4_0_BYTES: usize = 18;
pub(crate) const Q8_0_BYTES: usize = 34;
pub(crate) const Q4_K_BYTES: usize = 144;
pub(crate) const Q8_K_BYTES: usize = 292;

/// The instruction set the kernels ran with.
pub(crate) fn isa() -> &'static str {
    if avx2() { "avx2+fma+f16c" } else { "portable" }
}

fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The weight types whose dot product is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DotType {
    Q4_0,
    Q8_0,
    Q4K,
}

impl DotType {
    pub(crate) const ALL: [DotType; 3] = [DotType::Q4_0, DotType::Q8_0, DotType::Q4K];

    /// ggml's name for the type (`q4_0`, `q8_0`, `q4_K`), as used in metric names (lower-cased).
    pub fn name(self) -> &'static str {
        match self {
            DotType::Q4_0 => "q4_0",
            DotType::Q8_0 => "q8_0",
            DotType::Q4K => "q4_k",
        }
    }

    /// Weights per block and bytes per block of the weights and of the activations they are multiplied with.
    pub(crate) fn block(self) -> (usize, usize, usize) {
        match self {
            DotType::Q4_0 => (QK, Q4_0_BYTES, Q8_0_BYTES),
            DotType::Q8_0 => (QK, Q8_0_BYTES, Q8_0_BYTES),
            DotType::Q4K => (QK_K, Q4_K_BYTES, Q8_K_BYTES),
        }
    }
}

// ---- deterministic data ----

/// A small xorshift generator: the data only has to be varied and reproducible, not random.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A float in [-1, 1).
    pub(crate) fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// IEEE half from f32 (round to nearest; the scales written here are normal numbers well inside f16's range).
pub(crate) fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    let mant = b & 0x7f_ffff;
    let mut h = (sign as u32) | ((exp as u32) << 10) | (mant >> 13);
    if mant & 0x1000 != 0 {
        h += 1;
    }
    h as u16
}

/// f32 from IEEE half (normal numbers and zero; what [`f16_bits`] writes).
pub(crate) fn f16_value(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    if exp == 0 {
        return f32::from_bits(sign);
    }
    f32::from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13))
}

/// `blocks` blocks of weights of type `t`: random quants, realistic normal scales (as
/// benches/llama-bench/make_models.py writes them, so no denormal or NaN slows the float parts).
pub(crate) fn weights(t: DotType, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let (_, bytes, _) = t.block();
    let mut v = vec![0u8; blocks * bytes];
    for b in v.chunks_exact_mut(bytes) {
        for x in b.iter_mut() {
            *x = rng.next_u64() as u8;
        }
        let scale = |rng: &mut Rng| f16_bits(0.002 + 0.01 * rng.unit().abs()).to_le_bytes();
        b[0..2].copy_from_slice(&scale(rng));
        if t == DotType::Q4K {
            b[2..4].copy_from_slice(&scale(rng));
        }
    }
    v
}

/// Quantizes activations to Q8_0 (ggml `quantize_row_q8_0`): per 32 values, d = max|x| / 127.
pub(crate) fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bits(d).to_le_bytes());
        for (q, v) in b[2..].iter_mut().zip(xs) {
            *q = (v * id).round() as i8 as u8;
        }
    }
}

/// Quantizes activations to Q8_K (ggml `quantize_row_q8_K`): per 256 values an f32 scale, int8 quants and
/// the sums of each 16.
pub(crate) fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    for (xs, b) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..4].copy_from_slice(&d.to_le_bytes());
        let mut q = [0i8; QK_K];
        for (q, v) in q.iter_mut().zip(xs) {
            *q = (v * id).round().clamp(-127.0, 127.0) as i8;
        }
        for (o, q) in b[4..4 + QK_K].iter_mut().zip(q) {
            *o = q as u8;
        }
        for j in 0..QK_K / 16 {
            let s: i16 = q[j * 16..(j + 1) * 16].iter().map(|&v| i16::from(v)).sum();
            b[4 + QK_K + 2 * j..4 + QK_K + 2 * j + 2].copy_from_slice(&s.to_le_bytes());
        }
    }
}

// ---- portable dot products (the reference for the vectorised ones) ----

fn dot_q4_0_portable(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q4_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
        let d = f16_value(u16::from_le_bytes([xb[0], xb[1]]))
            * f16_value(u16::from_le_bytes([yb[0], yb[1]]));
        let mut s = 0i32;
        for j in 0..QK / 2 {
            let lo = i32::from(xb[2 + j] & 0x0f) - 8;
            let hi = i32::from(xb[2 + j] >> 4) - 8;
            s += lo * i32::from(yb[2 + j] as i8) + hi * i32::from(yb[2 + j + QK / 2] as i8);
        }
        sum += d * s as f32;
    }
    sum
}

fn dot_q8_0_portable(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q8_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
        let d = f16_value(u16::from_le_bytes([xb[0], xb[1]]))
            * f16_value(u16::from_le_bytes([yb[0], yb[1]]));
        let s: i32 = xb[2..]
            .iter()
            .zip(&yb[2..])
            .map(|(&a, &b)| i32::from(a as i8) * i32::from(b as i8))
            .sum();
        sum += d * s as f32;
    }
    sum
}

/// The 8 six-bit scales and 8 six-bit mins of a Q4_K super-block (ggml `get_scale_min_k4`).
fn q4k_scales(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        if j < 4 {
            sc[j] = s[j] & 63;
            m[j] = s[j + 4] & 63;
        } else {
            sc[j] = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
            m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
    }
    (sc, m)
}

fn dot_q4k_portable(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q4_K_BYTES).zip(y.chunks_exact(Q8_K_BYTES)) {
        let d = f16_value(u16::from_le_bytes([xb[0], xb[1]]));
        let dmin = f16_value(u16::from_le_bytes([xb[2], xb[3]]));
        let yd = f32::from_le_bytes([yb[0], yb[1], yb[2], yb[3]]);
        let (sc, m) = q4k_scales(&xb[4..16]);
        let qs = &xb[16..];
        let q8 = &yb[4..4 + QK_K];
        let bsums = |j: usize| {
            i32::from(i16::from_le_bytes([
                yb[4 + QK_K + 2 * j],
                yb[5 + QK_K + 2 * j],
            ]))
        };
        let mut sumi = 0i32;
        let mut summ = 0i32;
        for j in 0..QK_K / 64 {
            let q4 = &qs[32 * j..32 * j + 32];
            let (lo, hi) = (2 * j, 2 * j + 1);
            let mut sl = 0i32;
            let mut sh = 0i32;
            for l in 0..32 {
                sl += i32::from(q4[l] & 0x0f) * i32::from(q8[64 * j + l] as i8);
                sh += i32::from(q4[l] >> 4) * i32::from(q8[64 * j + 32 + l] as i8);
            }
            sumi += i32::from(sc[lo]) * sl + i32::from(sc[hi]) * sh;
            summ += i32::from(m[lo]) * (bsums(2 * lo) + bsums(2 * lo + 1))
                + i32::from(m[hi]) * (bsums(2 * hi) + bsums(2 * hi + 1));
        }
        sum += yd * d * sumi as f32 - yd * dmin * summ as f32;
    }
    sum
}

// ---- AVX2 dot products (ggml-cpu's x86 path) ----

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// The product of two f16 scales, broadcast. The pair goes through one `vmovd` (which zeroes the rest of the
    /// register): converting each half with an insert into a register would let the compiler pick the loop's
    /// accumulator as the insert's source and chain every block on the previous FMA (seen: 16 cycles a block).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn scale_product(a: u16, b: u16) -> __m256 {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(
            (u32::from(a) | (u32::from(b) << 16)) as i32,
        ));
        _mm256_broadcastss_ps(_mm_mul_ss(v, _mm_movehdup_ps(v)))
    }

    /// Two f16 values as f32 (lanes 0 and 1), through one `vmovd` (see [`scale_product`]).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn halves(pair: u32) -> (f32, f32) {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(pair as i32));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn mul_sum_i8_pairs_float(x: __m256i, y: __m256i) -> __m256 {
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        let dot = _mm256_maddubs_epi16(ax, sy);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
    }

    /// # Safety
    /// The CPU supports AVX2, FMA and F16C; `x` and `y` hold the same number of blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q4_0(x: &[u8], y: &[u8]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mask = _mm256_set1_epi8(0x0f);
        let eight = _mm256_set1_epi8(8);
        let n = x.len() / Q4_0_BYTES;
        debug_assert!(y.len() >= n * Q8_0_BYTES);
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        for i in 0..n {
            // SAFETY: block i of each slice (both hold n blocks): 2 + 16 bytes of weights, 2 + 32 of activations.
            let (dx, dy, tmp, qy) = unsafe {
                let xb = xp.add(i * Q4_0_BYTES);
                let yb = yp.add(i * Q8_0_BYTES);
                (
                    xb.cast::<u16>().read_unaligned(),
                    yb.cast::<u16>().read_unaligned(),
                    _mm_loadu_si128(xb.add(2).cast()),
                    _mm256_loadu_si256(yb.add(2).cast()),
                )
            };
            let d = scale_product(u16::from_le(dx), u16::from_le(dy));
            let bytes =
                _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
            let qx = _mm256_sub_epi8(_mm256_and_si256(mask, bytes), eight);
            acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
        }
        hsum(acc)
    }

    /// # Safety
    /// As [`dot_q4_0`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q8_0(x: &[u8], y: &[u8]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (xb, yb) in x.chunks_exact(Q8_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
            let d = scale_product(
                u16::from_le_bytes([xb[0], xb[1]]),
                u16::from_le_bytes([yb[0], yb[1]]),
            );
            // SAFETY: 32 bytes from offset 2 of 34-byte blocks.
            let (qx, qy) = unsafe {
                (
                    _mm256_loadu_si256(xb.as_ptr().add(2).cast()),
                    _mm256_loadu_si256(yb.as_ptr().add(2).cast()),
                )
            };
            acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
        }
        hsum(acc)
    }

    /// ggml's `get_scale_shuffle_k4(i)`: bytes 2i and 2i+1 repeated across the register.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn scale_shuffle(i: usize) -> __m256i {
        let pair = (2 * i as i16) | ((2 * i as i16 + 1) << 8);
        _mm256_set1_epi16(pair)
    }

    /// # Safety
    /// As [`dot_q4_0`], with Q4_K weights and Q8_K activations.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q4k(x: &[u8], y: &[u8]) -> f32 {
        const KMASK1: u32 = 0x3f3f_3f3f;
        const KMASK2: u32 = 0x0f0f_0f0f;
        const KMASK3: u32 = 0x0303_0303;
        let m4 = _mm256_set1_epi8(0x0f);
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        for (xb, yb) in x.chunks_exact(Q4_K_BYTES).zip(y.chunks_exact(Q8_K_BYTES)) {
            let yd = f32::from_le_bytes([yb[0], yb[1], yb[2], yb[3]]);
            let (xd, xmin) = halves(u32::from_le_bytes([xb[0], xb[1], xb[2], xb[3]]));
            let d = yd * xd;
            let dmin = -yd * xmin;
            let word = |i: usize| {
                u32::from_le_bytes([xb[4 + 4 * i], xb[5 + 4 * i], xb[6 + 4 * i], xb[7 + 4 * i]])
            };
            let mut utmp = [word(0), word(1), word(2), 0];
            utmp[3] = ((utmp[2] >> 4) & KMASK2) | (((utmp[1] >> 6) & KMASK3) << 4);
            let uaux = utmp[1] & KMASK1;
            utmp[1] = (utmp[2] & KMASK2) | (((utmp[0] >> 6) & KMASK3) << 4);
            utmp[2] = uaux;
            utmp[0] &= KMASK1;
            let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
                utmp[3] as i32,
                utmp[2] as i32,
                utmp[1] as i32,
                utmp[0] as i32,
            ));
            // SAFETY: the 16 i16 sums at offset 260 of a 292-byte Q8_K block.
            let q8sums = unsafe { _mm256_loadu_si256(yb.as_ptr().add(4 + QK_K).cast()) };
            let q8s = _mm_hadd_epi16(
                _mm256_extracti128_si256(q8sums, 0),
                _mm256_extracti128_si256(q8sums, 1),
            );
            let prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
            let sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
            let scales = _mm256_set_m128i(sc128, sc128);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..QK_K / 64 {
                let scale_l = _mm256_shuffle_epi8(scales, scale_shuffle(2 * j));
                let scale_h = _mm256_shuffle_epi8(scales, scale_shuffle(2 * j + 1));
                // SAFETY: 32 bytes of nibbles at 16 + 32j (< 144) and 64 int8 at 4 + 64j (< 260).
                let (q4bits, q8l, q8h) = unsafe {
                    (
                        _mm256_loadu_si256(xb.as_ptr().add(16 + 32 * j).cast()),
                        _mm256_loadu_si256(yb.as_ptr().add(4 + 64 * j).cast()),
                        _mm256_loadu_si256(yb.as_ptr().add(4 + 64 * j + 32).cast()),
                    )
                };
                let q4l = _mm256_and_si256(q4bits, m4);
                let q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
                let p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
                let p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        let acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        let acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
        hsum(acc) + _mm_cvtss_f32(acc_m)
    }

    /// FP32 FMAs: `rounds` × 12 independent 8-lane accumulators (enough to cover two FMA pipes of 4-5 cycles
    /// latency), 2 × 8 × 12 FLOP per round. Returns a value that depends on every FMA.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn fma(rounds: u64, seed: f32) -> f32 {
        let a = _mm256_set1_ps(0.999_999);
        let b = _mm256_set1_ps(1e-7);
        let mut acc = [_mm256_set1_ps(seed); 12];
        for (i, v) in acc.iter_mut().enumerate() {
            *v = _mm256_add_ps(*v, _mm256_set1_ps(i as f32));
        }
        for _ in 0..rounds {
            for v in acc.iter_mut() {
                *v = _mm256_fmadd_ps(*v, a, b);
            }
        }
        let mut s = _mm256_setzero_ps();
        for v in acc {
            s = _mm256_add_ps(s, v);
        }
        hsum(s)
    }
}

/// FLOP per round of [`fma`].
pub(crate) const FMA_FLOP_PER_ROUND: f64 = 2.0 * 8.0 * 12.0;

/// Runs `rounds` rounds of independent FP32 FMAs ([`FMA_FLOP_PER_ROUND`] FLOP each).
pub(crate) fn fma(rounds: u64, seed: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU supports the features the function is compiled for (checked just above).
        return unsafe { avx2::fma(rounds, seed) };
    }
    // Portable: the same 96 independent multiply-adds a round, left to the compiler to vectorise.
    let mut acc = [0f32; 96];
    for (i, v) in acc.iter_mut().enumerate() {
        *v = seed + i as f32;
    }
    for _ in 0..rounds {
        for v in acc.iter_mut() {
            *v = *v * 0.999_999 + 1e-7;
        }
        black_box(&mut acc);
    }
    acc.iter().sum()
}

/// The dot product of one row of weights of type `t` with the quantized activations, as ggml-cpu computes it.
pub(crate) fn dot(t: DotType, x: &[u8], y: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU supports AVX2, FMA and F16C (checked just above); the slices hold whole blocks.
        return unsafe {
            match t {
                DotType::Q4_0 => avx2::dot_q4_0(x, y),
                DotType::Q8_0 => avx2::dot_q8_0(x, y),
                DotType::Q4K => avx2::dot_q4k(x, y),
            }
        };
    }
    dot_portable(t, x, y)
}

/// The portable dot product (the vectorised one's reference).
pub(crate) fn dot_portable(t: DotType, x: &[u8], y: &[u8]) -> f32 {
    match t {
        DotType::Q4_0 => dot_q4_0_portable(x, y),
        DotType::Q8_0 => dot_q8_0_portable(x, y),
        DotType::Q4K => dot_q4k_portable(x, y),
    }
}

/// Quantizes activations for type `t` (Q8_0 for Q4_0/Q8_0 weights, Q8_K for Q4_K).
pub(crate) fn quantize(t: DotType, x: &[f32], out: &mut [u8]) {
    match t {
        DotType::Q4_0 | DotType::Q8_0 => quantize_q8_0(x, out),
        DotType::Q4K => quantize_q8_k(x, out),
    }
}

// ---- memory streams ----

/// Sums a buffer (a read stream); the compiler vectorises the independent lanes.
pub(crate) fn read(buf: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    for c in buf.chunks_exact(8) {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = l.wrapping_add(*v);
        }
    }
    lanes.iter().fold(0, |a, b| a.wrapping_add(*b))
}

/// `dst = src` (a copy stream: one read, one write).
pub(crate) fn copy(dst: &mut [u64], src: &[u64]) {
    dst.copy_from_slice(src);
}

/// `a = b + s·c` (STREAM's triad: two reads, one write).
pub(crate) fn triad(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
        *a = b + s * c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activations(n: usize, rng: &mut Rng) -> Vec<f32> {
        (0..n).map(|_| rng.unit()).collect()
    }

    fn check(t: DotType) {
        let mut rng = Rng::new(7);
        let cols = 4 * QK_K;
        let (per, _, ybytes) = t.block();
        let x = weights(t, cols / per, &mut rng);
        let a = activations(cols, &mut rng);
        let mut y = vec![0u8; cols / per * ybytes];
        quantize(t, &a, &mut y);
        let fast = dot(t, &x, &y);
        let slow = dot_portable(t, &x, &y);
        assert!(
            (fast - slow).abs() <= 1e-4 * slow.abs().max(1.0),
            "{t:?}: vectorised {fast} vs portable {slow}"
        );
    }

    #[test]
    fn vectorised_q4_0_dot_matches_the_portable_one() {
        check(DotType::Q4_0);
    }

    #[test]
    fn vectorised_q8_0_dot_matches_the_portable_one() {
        check(DotType::Q8_0);
    }

    #[test]
    fn vectorised_q4_k_dot_matches_the_portable_one() {
        check(DotType::Q4K);
    }

    #[test]
    fn portable_dots_match_dequantized_float_arithmetic() {
        // Q8_0 x Q8_0 against the float sum of the dequantized values: the portable kernel is itself right.
        let mut rng = Rng::new(3);
        let x = weights(DotType::Q8_0, 4, &mut rng);
        let a = activations(4 * QK, &mut rng);
        let mut y = vec![0u8; 4 * Q8_0_BYTES];
        quantize_q8_0(&a, &mut y);
        let deq = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(Q8_0_BYTES)
                .flat_map(|blk| {
                    let d = f16_value(u16::from_le_bytes([blk[0], blk[1]]));
                    blk[2..].iter().map(move |&q| d * f32::from(q as i8))
                })
                .collect()
        };
        let want: f32 = deq(&x).iter().zip(deq(&y)).map(|(a, b)| a * b).sum();
        let got = dot_portable(DotType::Q8_0, &x, &y);
        assert!(
            (want - got).abs() <= 1e-4 * want.abs().max(1e-3),
            "{want} vs {got}"
        );
    }

    #[test]
    fn portable_q4_k_dot_matches_ggml_dequantization() {
        // ggml `dequantize_row_q4_K`: per 64 weights, d·sc·(low nibble) − dmin·m, then d·sc'·(high nibble) − dmin·m'.
        let mut rng = Rng::new(11);
        let x = weights(DotType::Q4K, 2, &mut rng);
        let a = activations(2 * QK_K, &mut rng);
        let mut y = vec![0u8; 2 * Q8_K_BYTES];
        quantize_q8_k(&a, &mut y);
        let mut want = 0f64;
        for (xb, yb) in x.chunks_exact(Q4_K_BYTES).zip(y.chunks_exact(Q8_K_BYTES)) {
            let d = f16_value(u16::from_le_bytes([xb[0], xb[1]]));
            let dmin = f16_value(u16::from_le_bytes([xb[2], xb[3]]));
            let (sc, m) = q4k_scales(&xb[4..16]);
            let yd = f32::from_le_bytes([yb[0], yb[1], yb[2], yb[3]]);
            for j in 0..4 {
                for l in 0..32 {
                    let q = xb[16 + 32 * j + l];
                    let lo =
                        d * f32::from(sc[2 * j]) * f32::from(q & 15) - dmin * f32::from(m[2 * j]);
                    let hi = d * f32::from(sc[2 * j + 1]) * f32::from(q >> 4)
                        - dmin * f32::from(m[2 * j + 1]);
                    want += f64::from(lo * yd * f32::from(yb[4 + 64 * j + l] as i8));
                    want += f64::from(hi * yd * f32::from(yb[4 + 64 * j + 32 + l] as i8));
                }
            }
        }
        let got = f64::from(dot_portable(DotType::Q4K, &x, &y));
        assert!(
            (want - got).abs() <= 1e-3 * want.abs().max(1e-3),
            "{want} vs {got}"
        );
    }

    #[test]
    fn f16_round_trips_normal_scales() {
        for v in [0.002f32, 0.0117, 1.0, -3.5] {
            let back = f16_value(f16_bits(v));
            assert!((back - v).abs() <= v.abs() * 1e-3, "{v} -> {back}");
        }
    }

    #[test]
    fn fma_depends_on_every_round() {
        assert_ne!(fma(10, 1.0), fma(11, 1.0));
    }
}
