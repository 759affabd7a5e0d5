//! A deterministic [`GpuBench`] for tests and for exercising `calibrate` without a GPU (hyperfine's mock
//! executor): device memory with a reported free figure and a separate limit on what allocations really get,
//! and a throughput model that turns each operation into seconds. It records every allocation attempt.

use std::collections::HashMap;

use super::{Buffer, DeviceInfo, GemmLaunch, GpuBench, GpuError, KernelLaunch, MemoryInfo};

/// What a mock operation is, for the throughput model.
#[derive(Debug, Clone, PartialEq)]
pub enum MockOp {
    Kernel(KernelLaunch),
    Gemm(GemmLaunch),
    CopyD2D { bytes: u64 },
    CopyH2D { bytes: u64 },
}

/// Seconds one launch of an operation takes.
pub(crate) type ThroughputModel = Box<dyn Fn(&MockOp) -> f64>;

/// A mock GPU.
pub struct MockBench {
    info: DeviceInfo,
    /// What `memory()` reports as free before any of our allocations.
    reported_free_bytes: u64,
    /// What allocations can really get in total (another tenant or fragmentation may hold the rest).
    allocatable_bytes: u64,
    live: HashMap<u64, u64>,
    next_id: u64,
    model: ThroughputModel,
    /// Every allocation attempt: (bytes, succeeded).
    pub allocations: Vec<(u64, bool)>,
    /// Launches timed, in order.
    pub ops: Vec<MockOp>,
}

impl MockBench {
    /// An H100-like device (compute capability 9.0, 50 MiB L2, 132 SMs) with `free_bytes` free, all of it
    /// allocatable, and a roofline throughput model: 3 TB/s memory, 800 TFLOP/s, 5 us per launch.
    pub fn new(free_bytes: u64) -> MockBench {
        MockBench {
            info: DeviceInfo {
                name: "Mock GPU".into(),
                compute_capability: (9, 0),
                total_bytes: free_bytes,
                l2_bytes: 50 << 20,
                sm_count: 132,
            },
            reported_free_bytes: free_bytes,
            allocatable_bytes: free_bytes,
            live: HashMap::new(),
            next_id: 1,
            model: Box::new(roofline(3.0e12, 8.0e14, 5.0e-6)),
            allocations: Vec::new(),
            ops: Vec::new(),
        }
    }

    /// Allocations fail beyond `bytes` in total, whatever `memory()` reports.
    #[cfg(test)]
    pub(crate) fn with_allocatable(mut self, bytes: u64) -> MockBench {
        self.allocatable_bytes = bytes;
        self
    }

    pub fn with_model(mut self, model: ThroughputModel) -> MockBench {
        self.model = model;
        self
    }

    /// The device reports compute capability `major.minor`.
    #[cfg(test)]
    pub(crate) fn with_compute_capability(mut self, major: u32, minor: u32) -> MockBench {
        self.info.compute_capability = (major, minor);
        self
    }

    /// Bytes allocated and not freed.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live.values().sum()
    }

    fn seconds(&mut self, op: MockOp, launches: u32) -> Result<f64, GpuError> {
        let s = (self.model)(&op) * f64::from(launches);
        self.ops.push(op);
        Ok(s)
    }
}

/// Time = launch overhead + the larger of bytes over bandwidth and FLOPs over peak, with the bytes and FLOPs
/// the operation really moves and performs.
pub fn roofline(bytes_per_s: f64, flops: f64, launch_s: f64) -> impl Fn(&MockOp) -> f64 {
    move |op| {
        let (bytes, ops) = match op {
            MockOp::Kernel(KernelLaunch::Read { bytes, .. }) => (*bytes as f64, 0.0),
            MockOp::Kernel(KernelLaunch::Gemv {
                shape,
                batch,
                weights,
                ..
            }) => (
                weights.bytes as f64 + f64::from(*batch) * f64::from(shape.rows + shape.cols) * 4.0,
                2.0 * f64::from(shape.rows) * f64::from(shape.cols) * f64::from(*batch),
            ),
            MockOp::Gemm(g) => (
                g.weights.bytes as f64
                    + g.batch as f64 * f64::from(g.shape.rows + g.shape.cols) * 2.0,
                2.0 * f64::from(g.shape.rows) * f64::from(g.shape.cols) * g.batch as f64,
            ),
            MockOp::CopyD2D { bytes } => (2.0 * *bytes as f64, 0.0),
            MockOp::CopyH2D { bytes } => (*bytes as f64 * 50.0, 0.0),
        };
        launch_s + (bytes / bytes_per_s).max(ops / flops)
    }
}

impl GpuBench for MockBench {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory(&mut self) -> Result<MemoryInfo, GpuError> {
        Ok(MemoryInfo {
            free_bytes: self.reported_free_bytes.saturating_sub(self.live_bytes()),
            total_bytes: self.info.total_bytes,
        })
    }

    fn alloc(&mut self, bytes: u64) -> Result<Buffer, GpuError> {
        let fits = self
            .live_bytes()
            .checked_add(bytes)
            .is_some_and(|total| total <= self.allocatable_bytes);
        self.allocations.push((bytes, fits));
        if !fits {
            return Err(GpuError::OutOfMemory {
                requested_bytes: bytes,
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(id, bytes);
        Ok(Buffer { id, bytes })
    }

    fn free(&mut self, buffer: Buffer) -> Result<(), GpuError> {
        self.live
            .remove(&buffer.id)
            .map(|_| ())
            .ok_or_else(|| GpuError::Cuda {
                call: "mock free".into(),
                message: format!("buffer {} is not allocated", buffer.id),
            })
    }

    fn fill(&mut self, buffer: Buffer, bytes: u64) -> Result<(), GpuError> {
        match self.live.get(&buffer.id) {
            Some(&size) if bytes <= size => Ok(()),
            _ => Err(GpuError::Cuda {
                call: "mock fill".into(),
                message: format!("{bytes} bytes into buffer {}", buffer.id),
            }),
        }
    }

    fn time_kernel(&mut self, launch: &KernelLaunch, launches: u32) -> Result<f64, GpuError> {
        self.seconds(MockOp::Kernel(*launch), launches)
    }

    fn time_gemm(&mut self, gemm: &GemmLaunch, launches: u32) -> Result<f64, GpuError> {
        for b in [Some(gemm.input), Some(gemm.output), gemm.workspace]
            .into_iter()
            .flatten()
        {
            if !self.live.contains_key(&b.id) {
                return Err(GpuError::Cuda {
                    call: "mock gemm".into(),
                    message: format!("buffer {} is not allocated", b.id),
                });
            }
        }
        self.seconds(MockOp::Gemm(*gemm), launches)
    }

    fn time_copy_d2d(
        &mut self,
        _src: Buffer,
        _dst: Buffer,
        bytes: u64,
        launches: u32,
    ) -> Result<f64, GpuError> {
        self.seconds(MockOp::CopyD2D { bytes }, launches)
    }

    fn time_copy_h2d(&mut self, _dst: Buffer, bytes: u64, launches: u32) -> Result<f64, GpuError> {
        self.seconds(MockOp::CopyH2D { bytes }, launches)
    }
}
