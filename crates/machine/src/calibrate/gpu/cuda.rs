//! The real [`GpuBench`]: an NVIDIA GPU through cudarc's driver API, NVRTC (the kernels of `crates/machine/kernels/*.cu`,
//! compiled for the device's compute capability on first use, one module per GEMV batch), cuBLAS (f16 and bf16
//! GEMM) and cuBLASLt (fp8 e4m3 GEMM). Every library is loaded at run time and checked for before its first call,
//! because cudarc panics when a library it needs is missing; a missing one is a clean [`GpuError`]. Buffers are
//! plain `cuMemAlloc` allocations (not the stream-ordered pool, whose freed memory stays reserved and would skew
//! the free-memory figure the sizing reads), and all work runs on the legacy default stream.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, result, sys};

use super::{
    Buffer, DeviceInfo, GemmLaunch, GpuBench, GpuDtype, GpuError, KernelLaunch, MemoryInfo,
    Weights, tl2_triple_cols,
};

/// The kernel sources in compilation order (one NVRTC program: the helpers first).
pub(crate) const KERNEL_SOURCES: [(&str, &str); 5] = [
    ("common.cuh", include_str!("../../../kernels/common.cuh")),
    ("fill.cu", include_str!("../../../kernels/fill.cu")),
    (
        "bandwidth.cu",
        include_str!("../../../kernels/bandwidth.cu"),
    ),
    ("dequant.cu", include_str!("../../../kernels/dequant.cu")),
    ("gemv.cu", include_str!("../../../kernels/gemv.cu")),
];

/// Threads per block, as `BLOCK_THREADS` in `crates/machine/kernels/common.cuh`.
const BLOCK_THREADS: u32 = 128;
/// Output rows per GEMV block: one per warp (`WARPS_PER_BLOCK` in `crates/machine/kernels/common.cuh`).
const GEMV_ROWS_PER_BLOCK: u32 = BLOCK_THREADS / 32;
/// Blocks per SM for the grid-stride kernels (fill, read, dequantize): 8 blocks of 4 warps keep 32 warps of loads
/// in flight per SM, enough to saturate DRAM on every NVIDIA GPU since Volta.
const BLOCKS_PER_SM: u32 = 8;
/// Seed of the fill pattern (any constant: the data only has to be finite and not all zero).
const FILL_SEED: u32 = 0x5EED_1234;

/// cuBLASLt workspace: NVIDIA's recommendation for `cublasLtMatmul` is 32 MiB on Hopper (compute capability 9)
/// and newer, 4 MiB before (cuBLAS documentation, "cublasLtMatmul"; cudarc's `Workspace` follows it).
fn lt_workspace_bytes(cc_major: u32) -> usize {
    if cc_major >= 9 { 32 << 20 } else { 4 << 20 }
}

/// The whole NVRTC program: the helpers and every kernel file, in order.
pub(crate) fn kernel_source() -> String {
    let mut src = String::new();
    for (name, text) in KERNEL_SOURCES {
        src.push_str(&format!("// ---- kernels/{name} ----\n"));
        src.push_str(text);
        src.push('\n');
    }
    src
}

/// NVRTC options for a device of compute capability `cc` and a GEMV batch.
pub(crate) fn compile_options(cc: (u32, u32), gemv_batch: u32) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{}{}", cc.0, cc.1),
        format!("-DGEMV_BATCH={gemv_batch}"),
        // Helpers unused by some kernels are expected.
        "--diag-suppress=177".into(),
    ]
}

/// Compiles the kernels to PTX with NVRTC (no GPU needed, only `libnvrtc`).
pub(crate) fn compile_ptx(cc: (u32, u32), gemv_batch: u32) -> Result<String, GpuError> {
    // SAFETY: only checks whether the shared library can be loaded; calls nothing in it.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::MissingLibrary {
            library: "libnvrtc",
            needed_for: "compiling the calibration kernels",
        });
    }
    let options = compile_options(cc, gemv_batch);
    let opts = cudarc::nvrtc::CompileOptions {
        options: options.clone(),
        name: Some("optimizer_calibrate.cu".into()),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(kernel_source(), opts).map_err(|e| {
        let log = match &e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                log.to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        };
        GpuError::Compile {
            options: options.join(" "),
            log,
        }
    })?;
    Ok(ptx.to_src())
}

fn cuda(call: &str) -> impl Fn(DriverError) -> GpuError + '_ {
    move |e| GpuError::Cuda {
        call: call.to_string(),
        message: e.to_string(),
    }
}

fn blas_error(call: &str, e: impl std::fmt::Debug) -> GpuError {
    GpuError::Cuda {
        call: call.to_string(),
        message: format!("{e:?}"),
    }
}

/// A real NVIDIA GPU.
pub struct CudaBench {
    info: DeviceInfo,
    start: sys::CUevent,
    end: sys::CUevent,
    /// One module per GEMV batch (every other kernel is taken from any of them).
    modules: HashMap<u32, sys::CUmodule>,
    buffers: HashMap<u64, sys::CUdeviceptr>,
    next_id: u64,
    /// Page-locked host memory for host-to-device copies.
    pinned: Option<(*mut c_void, usize)>,
    blas: Option<cudarc::cublas::sys::cublasHandle_t>,
    lt: Option<(
        cudarc::cublaslt::sys::cublasLtHandle_t,
        sys::CUdeviceptr,
        usize,
    )>,
    /// Dropped last: the primary context outlives everything above (see `Drop`).
    ctx: Arc<CudaContext>,
}

impl CudaBench {
    /// Opens GPU `ordinal`. Without `libcuda` this is [`GpuError::NoDriver`], never a panic.
    pub fn new(ordinal: usize) -> Result<CudaBench, GpuError> {
        // SAFETY: only checks whether the shared library can be loaded; calls nothing in it.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        let ctx = CudaContext::new(ordinal).map_err(cuda("cuInit / cuDevicePrimaryCtxRetain"))?;
        let attr = |a| ctx.attribute(a).ok().and_then(|v| u32::try_from(v).ok());
        let (major, minor) = ctx
            .compute_capability()
            .map_err(cuda("cuDeviceGetAttribute(compute capability)"))?;
        let info = DeviceInfo {
            name: ctx.name().map_err(cuda("cuDeviceGetName"))?,
            compute_capability: (
                u32::try_from(major).unwrap_or(0),
                u32::try_from(minor).unwrap_or(0),
            ),
            total_bytes: ctx.total_mem().map_err(cuda("cuDeviceTotalMem"))? as u64,
            l2_bytes: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
                .map_or(0, u64::from),
            sm_count: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .unwrap_or(1)
                .max(1),
        };
        let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(cuda("cuEventCreate"))?;
        let end = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(cuda("cuEventCreate"))?;
        Ok(CudaBench {
            info,
            start,
            end,
            modules: HashMap::new(),
            buffers: HashMap::new(),
            next_id: 1,
            pinned: None,
            blas: None,
            lt: None,
            ctx,
        })
    }

    fn bind(&self) -> Result<(), GpuError> {
        self.ctx.bind_to_thread().map_err(cuda("cuCtxSetCurrent"))
    }

    fn stream() -> sys::CUstream {
        result::stream::null()
    }

    fn ptr(&self, b: Buffer) -> Result<sys::CUdeviceptr, GpuError> {
        self.buffers
            .get(&b.id)
            .copied()
            .ok_or_else(|| GpuError::Cuda {
                call: "buffer lookup".into(),
                message: format!("buffer {} is not allocated", b.id),
            })
    }

    fn function(&mut self, batch: u32, name: &str) -> Result<sys::CUfunction, GpuError> {
        let module = match self.modules.get(&batch) {
            Some(m) => *m,
            None => {
                let ptx = compile_ptx(self.info.compute_capability, batch)?;
                let image = CString::new(ptx).map_err(|_| GpuError::Compile {
                    options: String::new(),
                    log: "NVRTC returned PTX with a NUL byte".into(),
                })?;
                // SAFETY: `image` is NUL-terminated PTX text that outlives the call.
                let m = unsafe { result::module::load_data(image.as_ptr().cast()) }
                    .map_err(cuda("cuModuleLoadData"))?;
                self.modules.insert(batch, m);
                m
            }
        };
        let cname = CString::new(name).map_err(|_| GpuError::Unsupported(name.into()))?;
        // SAFETY: `module` was loaded above and is unloaded only in `Drop`.
        unsafe { result::module::get_function(module, cname) }.map_err(cuda("cuModuleGetFunction"))
    }

    fn grid_stride_blocks(&self) -> u32 {
        self.info.sm_count.saturating_mul(BLOCKS_PER_SM)
    }

    /// Launches `f` with the given argument values (each a pointer to the value).
    fn launch(
        &self,
        f: sys::CUfunction,
        grid: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), GpuError> {
        // SAFETY: `f` comes from a loaded module; every pointer in `args` points at a live value of the type the
        // kernel declares, and the driver copies them before returning.
        unsafe {
            result::launch_kernel(
                f,
                (grid.max(1), 1, 1),
                (BLOCK_THREADS, 1, 1),
                0,
                Self::stream(),
                args,
            )
        }
        .map_err(cuda("cuLaunchKernel"))
    }

    /// Runs `body` between the two events and returns the seconds between them.
    fn timed(
        &mut self,
        body: impl FnOnce(&mut CudaBench) -> Result<(), GpuError>,
    ) -> Result<f64, GpuError> {
        // SAFETY: both events were created in this context; the stream is the legacy default stream.
        unsafe { result::event::record(self.start, Self::stream()) }
            .map_err(cuda("cuEventRecord"))?;
        body(self)?;
        unsafe { result::event::record(self.end, Self::stream()) }
            .map_err(cuda("cuEventRecord"))?;
        unsafe { result::event::synchronize(self.end) }.map_err(cuda("cuEventSynchronize"))?;
        let ms = unsafe { result::event::elapsed(self.start, self.end) }
            .map_err(cuda("cuEventElapsedTime"))?;
        Ok(f64::from(ms) / 1000.0)
    }

    fn weights_ptr(&self, w: &Weights, i: u32) -> Result<sys::CUdeviceptr, GpuError> {
        let base = self.ptr(w.buffer)?;
        Ok(base + u64::from(i % w.copies.max(1)) * w.stride)
    }

    fn blas(&mut self) -> Result<cudarc::cublas::sys::cublasHandle_t, GpuError> {
        if let Some(h) = self.blas {
            return Ok(h);
        }
        // SAFETY: only checks whether the shared library can be loaded.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GpuError::MissingLibrary {
                library: "libcublas",
                needed_for: "f16/bf16 GEMM",
            });
        }
        let h =
            cudarc::cublas::result::create_handle().map_err(|e| blas_error("cublasCreate", e))?;
        self.blas = Some(h);
        Ok(h)
    }

    fn lt(
        &mut self,
    ) -> Result<
        (
            cudarc::cublaslt::sys::cublasLtHandle_t,
            sys::CUdeviceptr,
            usize,
        ),
        GpuError,
    > {
        if let Some(lt) = self.lt {
            return Ok(lt);
        }
        // SAFETY: only checks whether the shared library can be loaded.
        if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
            return Err(GpuError::MissingLibrary {
                library: "libcublasLt",
                needed_for: "fp8 GEMM",
            });
        }
        let h = cudarc::cublaslt::result::create_handle()
            .map_err(|e| blas_error("cublasLtCreate", e))?;
        let bytes = lt_workspace_bytes(self.info.compute_capability.0);
        // SAFETY: the context is current; the allocation is freed in `Drop`.
        let ws = match unsafe { result::malloc_sync(bytes) } {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `h` was just created and is not used elsewhere.
                let _ = unsafe { cudarc::cublaslt::result::destroy_handle(h) };
                return Err(cuda("cuMemAlloc (cuBLASLt workspace)")(e));
            }
        };
        self.lt = Some((h, ws, bytes));
        Ok((h, ws, bytes))
    }

    fn dequant(
        &mut self,
        g: &GemmLaunch,
        w: sys::CUdeviceptr,
        out: sys::CUdeviceptr,
    ) -> Result<(), GpuError> {
        let f = self.function(1, &format!("dequant_{}", g.dtype.name()))?;
        let grid = self.grid_stride_blocks();
        let (mut w, mut out, mut rows, mut cols) = (w, out, g.shape.rows, g.shape.cols);
        let mut k3 = tl2_triple_cols(g.shape.cols).unwrap_or(0);
        let mut args: Vec<*mut c_void> = vec![
            (&mut w as *mut u64).cast(),
            (&mut out as *mut u64).cast(),
            (&mut rows as *mut u32).cast(),
            (&mut cols as *mut u32).cast(),
        ];
        if g.dtype == GpuDtype::Tl2 {
            args.push((&mut k3 as *mut u32).cast());
        }
        self.launch(f, grid, &mut args)
    }

    fn cublas_gemm(
        &mut self,
        g: &GemmLaunch,
        a: sys::CUdeviceptr,
        b: sys::CUdeviceptr,
        c: sys::CUdeviceptr,
        n: i32,
    ) -> Result<(), GpuError> {
        use cudarc::cublas::sys::{
            cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t,
        };
        let h = self.blas()?;
        let t = if g.dtype == GpuDtype::Bf16 {
            cudaDataType_t::CUDA_R_16BF
        } else {
            cudaDataType_t::CUDA_R_16F
        };
        let (m, k) = dims(g)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Column-major: C (rows x n) = op(A) (rows x cols) * B (cols x n), with A the row-major weights (a
        // cols x rows column-major matrix, transposed) and B the row-major activations (cols x n column-major).
        // SAFETY: the pointers are live allocations sized by the caller for these dimensions.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                h,
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                m,
                n,
                k,
                (&alpha as *const f32).cast(),
                a as *const c_void,
                t,
                k,
                b as *const c_void,
                t,
                k,
                (&beta as *const f32).cast(),
                c as *mut c_void,
                t,
                m,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| blas_error("cublasGemmEx", e))
    }

    fn time_fp8(&mut self, g: &GemmLaunch, launches: u32, n: i32) -> Result<f64, GpuError> {
        use cudarc::cublaslt::{result as lt, sys as lts};
        let (h, ws, ws_bytes) = self.lt()?;
        let (m, k) = dims(g)?;
        let (m, k, n) = (m as u64, k as u64, n as u64);
        let desc = lt::create_matmul_desc(
            lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lts::cudaDataType_t::CUDA_R_32F,
        )
        .map_err(|e| blas_error("cublasLtMatmulDescCreate", e))?;
        let mut handles = LtObjects {
            desc,
            layouts: Vec::new(),
            pref: None,
        };
        // cuBLAS's CUBLAS_OP_T; FP8 matmuls need A transposed ("TN" layout).
        let transpose: i32 = 1;
        // SAFETY: `desc` is live; the value is an i32 as the attribute requires.
        unsafe {
            lt::set_matmul_desc_attribute(
                desc,
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const i32).cast(),
                std::mem::size_of::<i32>(),
            )
        }
        .map_err(|e| blas_error("cublasLtMatmulDescSetAttribute", e))?;
        let layout = |t, r: u64, c: u64, ld: u64| {
            lt::create_matrix_layout(t, r, c, ld as i64)
                .map_err(|e| blas_error("cublasLtMatrixLayoutCreate", e))
        };
        let a_l = layout(lts::cudaDataType_t::CUDA_R_8F_E4M3, k, m, k)?;
        handles.layouts.push(a_l);
        let b_l = layout(lts::cudaDataType_t::CUDA_R_8F_E4M3, k, n, k)?;
        handles.layouts.push(b_l);
        let c_l = layout(lts::cudaDataType_t::CUDA_R_16BF, m, n, m)?;
        handles.layouts.push(c_l);
        let pref = lt::create_matmul_pref()
            .map_err(|e| blas_error("cublasLtMatmulPreferenceCreate", e))?;
        handles.pref = Some(pref);
        let ws_u64 = ws_bytes as u64;
        // SAFETY: `pref` is live; the value is a u64 as the attribute requires.
        unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                lts::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws_u64 as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        }
        .map_err(|e| blas_error("cublasLtMatmulPreferenceSetAttribute", e))?;
        // SAFETY: all descriptors are live.
        let heuristic = unsafe { lt::get_matmul_algo_heuristic(h, desc, a_l, b_l, c_l, c_l, pref) }
            .map_err(|e| blas_error("cublasLtMatmulAlgoGetHeuristic (fp8)", e))?;
        let x = self.ptr(g.input)?;
        let y = self.ptr(g.output)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let result = self.timed(|me| {
            for i in 0..launches {
                let w = me.weights_ptr(&g.weights, i)?;
                // SAFETY: descriptors, algorithm and workspace are live; the buffers are sized for m, n, k.
                unsafe {
                    lt::matmul(
                        h,
                        desc,
                        (&alpha as *const f32).cast(),
                        (&beta as *const f32).cast(),
                        w as *const c_void,
                        a_l,
                        x as *const c_void,
                        b_l,
                        y as *const c_void,
                        c_l,
                        y as *mut c_void,
                        c_l,
                        &heuristic.algo,
                        ws as *mut c_void,
                        ws_bytes,
                        std::ptr::null_mut(),
                    )
                }
                .map_err(|e| blas_error("cublasLtMatmul (fp8)", e))?;
            }
            Ok(())
        });
        drop(handles);
        result
    }
}

/// (m, k) = (rows, cols) as cuBLAS's `int`.
fn dims(g: &GemmLaunch) -> Result<(i32, i32), GpuError> {
    let m = i32::try_from(g.shape.rows)
        .map_err(|_| GpuError::Unsupported(format!("{} rows exceed cuBLAS's int", g.shape.rows)))?;
    let k = i32::try_from(g.shape.cols).map_err(|_| {
        GpuError::Unsupported(format!("{} columns exceed cuBLAS's int", g.shape.cols))
    })?;
    Ok((m, k))
}

/// cuBLASLt descriptors destroyed on drop.
struct LtObjects {
    desc: cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
    layouts: Vec<cudarc::cublaslt::sys::cublasLtMatrixLayout_t>,
    pref: Option<cudarc::cublaslt::sys::cublasLtMatmulPreference_t>,
}

impl Drop for LtObjects {
    fn drop(&mut self) {
        use cudarc::cublaslt::result as lt;
        // SAFETY: each object was created once and is destroyed once, here.
        unsafe {
            if let Some(p) = self.pref {
                let _ = lt::destroy_matmul_pref(p);
            }
            for l in &self.layouts {
                let _ = lt::destroy_matrix_layout(*l);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

impl GpuBench for CudaBench {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory(&mut self) -> Result<MemoryInfo, GpuError> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(cuda("cuMemGetInfo"))?;
        Ok(MemoryInfo {
            free_bytes: free as u64,
            total_bytes: total as u64,
        })
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, GpuError> {
        self.bind()?;
        let size = usize::try_from(bytes.max(1)).map_err(|_| GpuError::OutOfMemory {
            requested_bytes: bytes,
        })?;
        // SAFETY: the context is current; the pointer is freed by `free` or `Drop`.
        match unsafe { result::malloc_sync(size) } {
            Ok(p) => {
                let id = self.next_id;
                self.next_id += 1;
                self.buffers.insert(id, p);
                Ok(Buffer { id, bytes })
            }
            Err(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
                Err(GpuError::OutOfMemory {
                    requested_bytes: bytes,
                })
            }
            Err(e) => Err(cuda("cuMemAlloc")(e)),
        }
    }

    fn free(&mut self, buffer: Buffer) -> Result<(), GpuError> {
        self.bind()?;
        let p = self.ptr(buffer)?;
        self.buffers.remove(&buffer.id);
        // SAFETY: `p` came from cuMemAlloc and is freed once (removed from the map first). cuMemFree waits for
        // work using it to finish.
        unsafe { result::free_sync(p) }.map_err(cuda("cuMemFree"))
    }

    fn fill(&mut self, buffer: Buffer, bytes: u64) -> Result<(), GpuError> {
        self.bind()?;
        let f = self.function(1, "fill_finite")?;
        let mut p = self.ptr(buffer)?;
        let mut n = bytes.min(buffer.bytes);
        let mut seed = FILL_SEED ^ (buffer.id as u32);
        let grid = self.grid_stride_blocks();
        self.launch(
            f,
            grid,
            &mut [
                (&mut p as *mut u64).cast(),
                (&mut n as *mut u64).cast(),
                (&mut seed as *mut u32).cast(),
            ],
        )?;
        // SAFETY: synchronizes the legacy default stream of the current context.
        unsafe { result::stream::synchronize(Self::stream()) }.map_err(cuda("cuStreamSynchronize"))
    }

    fn time_kernel(&mut self, launch: &KernelLaunch, launches: u32) -> Result<f64, GpuError> {
        self.bind()?;
        match launch {
            KernelLaunch::Read { src, bytes, sink } => {
                let f = self.function(1, "read_bytes")?;
                let mut p = self.ptr(*src)?;
                let mut words = (*bytes).min(src.bytes) / 16;
                let mut s = self.ptr(*sink)?;
                let grid = self.grid_stride_blocks();
                self.timed(|me| {
                    for _ in 0..launches {
                        me.launch(
                            f,
                            grid,
                            &mut [
                                (&mut p as *mut u64).cast(),
                                (&mut words as *mut u64).cast(),
                                (&mut s as *mut u64).cast(),
                            ],
                        )?;
                    }
                    Ok(())
                })
            }
            KernelLaunch::Gemv {
                dtype,
                shape,
                batch,
                weights,
                input,
                output,
            } => {
                let (dtype, rows, cols, batch) = (*dtype, shape.rows, shape.cols, *batch);
                let f = self.function(batch, &launch.name())?;
                let mut x = self.ptr(*input)?;
                let mut y = self.ptr(*output)?;
                let grid = rows.div_ceil(GEMV_ROWS_PER_BLOCK);
                let weights = *weights;
                self.timed(|me| {
                    for i in 0..launches {
                        let mut w = me.weights_ptr(&weights, i)?;
                        let (mut r, mut c) = (rows, cols);
                        let mut k3 = tl2_triple_cols(cols).unwrap_or(0);
                        let mut args: Vec<*mut c_void> = vec![
                            (&mut w as *mut u64).cast(),
                            (&mut x as *mut u64).cast(),
                            (&mut y as *mut u64).cast(),
                            (&mut r as *mut u32).cast(),
                            (&mut c as *mut u32).cast(),
                        ];
                        if dtype == GpuDtype::Tl2 {
                            args.push((&mut k3 as *mut u32).cast());
                        }
                        me.launch(f, grid, &mut args)?;
                    }
                    Ok(())
                })
            }
        }
    }

    fn time_gemm(&mut self, g: &GemmLaunch, launches: u32) -> Result<f64, GpuError> {
        self.bind()?;
        let n = i32::try_from(g.batch).map_err(|_| {
            GpuError::Unsupported(format!("batch {} exceeds cuBLAS's int", g.batch))
        })?;
        if g.dtype == GpuDtype::Fp8E4m3 {
            if let Some(why) = self.info.unsupported(g.dtype) {
                return Err(GpuError::Unsupported(why));
            }
            return self.time_fp8(g, launches, n);
        }
        let x = self.ptr(g.input)?;
        let y = self.ptr(g.output)?;
        let ws = g.workspace.map(|w| self.ptr(w)).transpose()?;
        if g.dtype.is_quantized() && ws.is_none() {
            return Err(GpuError::Unsupported(format!(
                "a {} GEMM needs an f16 workspace",
                g.dtype
            )));
        }
        // Create the handle and compile the dequantization kernels before the clock starts.
        self.blas()?;
        if g.dtype.is_quantized() {
            self.function(1, &format!("dequant_{}", g.dtype.name()))?;
        }
        let g = *g;
        self.timed(|me| {
            for i in 0..launches {
                let w = me.weights_ptr(&g.weights, i)?;
                let a = match ws {
                    Some(ws) => {
                        me.dequant(&g, w, ws)?;
                        ws
                    }
                    None => w,
                };
                me.cublas_gemm(&g, a, x, y, n)?;
            }
            Ok(())
        })
    }

    fn time_copy_d2d(
        &mut self,
        src: Buffer,
        dst: Buffer,
        bytes: u64,
        launches: u32,
    ) -> Result<f64, GpuError> {
        self.bind()?;
        let s = self.ptr(src)?;
        let d = self.ptr(dst)?;
        let n = usize::try_from(bytes.min(src.bytes).min(dst.bytes)).unwrap_or(usize::MAX);
        self.timed(|_| {
            for _ in 0..launches {
                // SAFETY: both are live allocations of at least `n` bytes.
                unsafe { result::memcpy_dtod_async(d, s, n, Self::stream()) }
                    .map_err(cuda("cuMemcpyDtoDAsync"))?;
            }
            Ok(())
        })
    }

    fn time_copy_h2d(&mut self, dst: Buffer, bytes: u64, launches: u32) -> Result<f64, GpuError> {
        self.bind()?;
        let d = self.ptr(dst)?;
        let n = usize::try_from(bytes.min(dst.bytes)).unwrap_or(usize::MAX);
        if self.pinned.is_none_or(|(_, len)| len < n) {
            if let Some((p, _)) = self.pinned.take() {
                // SAFETY: `p` came from cuMemHostAlloc and is freed once.
                unsafe { result::free_host(p) }.map_err(cuda("cuMemFreeHost"))?;
            }
            // SAFETY: page-locked host allocation of `n` bytes, freed above or in `Drop`.
            let p = unsafe { result::malloc_host(n, 0) }.map_err(cuda("cuMemHostAlloc"))?;
            // SAFETY: `p` points at `n` writable bytes; touching them is all this does.
            unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0x3B, n) };
            self.pinned = Some((p, n));
        }
        let (p, _) = self.pinned.unwrap_or((std::ptr::null_mut(), 0));
        // SAFETY: `p` points at at least `n` initialized bytes that live until `Drop`.
        let host = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
        self.timed(|_| {
            for _ in 0..launches {
                // SAFETY: `d` is a live allocation of at least `n` bytes; `host` stays valid and pinned.
                unsafe { result::memcpy_htod_async(d, host, Self::stream()) }
                    .map_err(cuda("cuMemcpyHtoDAsync"))?;
            }
            Ok(())
        })
    }
}

impl Drop for CudaBench {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: every handle below was created by this value and is destroyed once; the context (dropped after
        // this body) is still alive.
        unsafe {
            let _ = result::ctx::synchronize();
            for (_, p) in self.buffers.drain() {
                let _ = result::free_sync(p);
            }
            if let Some((p, _)) = self.pinned.take() {
                let _ = result::free_host(p);
            }
            if let Some(h) = self.blas.take() {
                let _ = cudarc::cublas::result::destroy_handle(h);
            }
            if let Some((h, ws, _)) = self.lt.take() {
                let _ = cudarc::cublaslt::result::destroy_handle(h);
                let _ = result::free_sync(ws);
            }
            for (_, m) in self.modules.drain() {
                let _ = result::module::unload(m);
            }
            let _ = result::event::destroy(self.start);
            let _ = result::event::destroy(self.end);
        }
    }
}

/// A short real run for the device machine: GPU 0, the quick plan at the first default shape with every GEMV
/// layout, f16 GEMM, and no peaks. Returns [`GpuError::NoDriver`] on a machine without an NVIDIA driver.
#[cfg(test)]
pub(crate) fn run_real_smoke() -> Result<super::GpuCalibration, GpuError> {
    use super::{DEFAULT_SHAPES, GpuPlan};
    use std::sync::atomic::AtomicBool;
    let mut bench = CudaBench::new(0)?;
    let plan = GpuPlan::quick(&DEFAULT_SHAPES[..1], None);
    let stop = AtomicBool::new(false);
    Ok(super::run(&mut bench, &plan, &mut |_| {}, &stop))
}
