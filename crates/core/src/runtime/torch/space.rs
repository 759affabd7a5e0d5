//! The torch runtime's candidate space and search: the memory strategies of each method, the ladders the
//! planner fits and scores, the evaluation of one point, and the suggestions when nothing fits.

use crate::emit::{MemoryComponents, MemoryDevice, Settings};
use crate::runtime::{Candidate, Described, Eval, Runtime, RuntimeId, Size};
use optimizer_memory::torch::{self as mem, Breakdown, Method, Offload, Zero};

use super::{Point, Torch};

impl Torch<'_> {
    /// The strategies of one method on this machine, from the most to the least GPU memory.
    fn strategies(&self, method: Method) -> Vec<(Zero, Offload)> {
        let many = self.processes() > 1;
        match (method, many) {
            (Method::Full, false) => vec![
                (Zero::Off, Offload::None),
                (Zero::Stage2, Offload::Optimizer),
                (Zero::Stage3, Offload::OptimizerAndParams),
            ],
            (Method::Full, true) => vec![
                (Zero::Off, Offload::None),
                (Zero::Stage2, Offload::None),
                (Zero::Stage3, Offload::None),
                (Zero::Stage3, Offload::Optimizer),
                (Zero::Stage3, Offload::OptimizerAndParams),
            ],
            (Method::Lora, true) => vec![(Zero::Off, Offload::None), (Zero::Stage3, Offload::None)],
            (Method::Lora, false) | (Method::LoraInt8 | Method::Qlora, _) => {
                vec![(Zero::Off, Offload::None)]
            }
        }
    }

    /// Every (checkpointing, strategy) of a method.
    fn points_of(&self, method: Method) -> Vec<(bool, (Zero, Offload))> {
        [false, true]
            .into_iter()
            .flat_map(|c| self.strategies(method).into_iter().map(move |z| (c, z)))
            .collect()
    }

    /// The first of the plan's methods (in the order full, LoRA, LoRA over an 8-bit base, QLoRA) with a strategy
    /// that fits at micro-batch 1.
    fn first_fitting_method(&self) -> Option<Method> {
        self.methods.iter().copied().find(|&method| {
            self.points_of(method)
                .into_iter()
                .any(|(checkpointing, (zero, offload))| {
                    let p = Point {
                        method,
                        zero,
                        offload,
                        checkpointing,
                    };
                    self.overflow(&self.breakdown(&p, 1)) == (0, 0)
                })
        })
    }

    /// The smallest data-parallel size over which ZeRO-3 (checkpointing on, micro-batch 1) would fit on GPUs
    /// like these, if any up to 512.
    fn gpus_for_zero3(&self) -> Option<u64> {
        let (cap, reserve) = self.room();
        let room = cap.saturating_sub(reserve).saturating_sub(self.overhead.0);
        (1..=512u32)
            .find(|&n| {
                let mut p = self.params(
                    &Point {
                        method: Method::Full,
                        zero: Zero::Stage3,
                        offload: Offload::None,
                        checkpointing: true,
                    },
                    1,
                );
                p.gpus_per_node = n;
                p.nodes = 1;
                mem::breakdown(&self.inv, &p).gpu_total() <= room
            })
            .map(u64::from)
    }
}

impl Runtime for Torch<'_> {
    type Point = Point;

    fn id(&self) -> RuntimeId {
        RuntimeId::Torch
    }

    fn engine(&self) -> (&'static str, &'static str) {
        ("transformers", mem::STACK[0].1)
    }

    fn ladders(&self) -> Vec<Vec<Point>> {
        // With the method open, only the first method in order that fits takes part (all of them when none does,
        // so the nearest is found): quantizing the base is for when the model would not fit otherwise, and the
        // speed model does not price bitsandbytes' dequantization, so a score would favour it unfairly.
        let methods = match self.first_fitting_method() {
            Some(m) if self.methods.len() > 1 => vec![m],
            _ => self.methods.clone(),
        };
        let mut out = Vec::new();
        for method in methods {
            for (checkpointing, (zero, offload)) in self.points_of(method) {
                out.push(vec![Point {
                    method,
                    zero,
                    offload,
                    checkpointing,
                }]);
            }
        }
        out
    }

    fn size(&self) -> Size {
        let share = u32::try_from(self.share()).unwrap_or(u32::MAX);
        if share <= 1 {
            Size::Fixed(1)
        } else {
            Size::LargestFit {
                floor: 1,
                max: share,
                step: 1,
            }
        }
    }

    fn evaluate(&self, p: &Point, size: u32) -> Result<Eval, crate::runtime::PlanError> {
        let micro = self.micro(size);
        let b = self.breakdown(p, micro);
        let (gpu_over, host_over) = self.overflow(&b);
        let components = self.components(&b);
        let per_gpu = b.gpu_total().saturating_add(self.overhead.0);
        let (_, reserve) = self.room();
        let host = &self.req.fleet.host;
        let mut memory = vec![MemoryDevice {
            device: "cpu".into(),
            components: if p.offload == Offload::None {
                // DeepSpeed's CPU estimate without offload: each process loading the model (ZeRO-3: the largest
                // module) in FP32.
                MemoryComponents {
                    weights_bytes: b.host,
                    ..MemoryComponents::default()
                }
            } else {
                MemoryComponents {
                    optimizer_state_bytes: b.host,
                    ..MemoryComponents::default()
                }
            },
            total_bytes: b.host,
            capacity_bytes: host.capacity_bytes,
            reserve_bytes: host.reserve_bytes,
        }];
        for g in &self.gpus {
            memory.push(MemoryDevice {
                device: g.id.to_string(),
                components: components.clone(),
                total_bytes: per_gpu,
                capacity_bytes: g.capacity_bytes,
                reserve_bytes: reserve,
            });
        }
        let step = self.step(p, micro);
        let prediction = crate::perf::Prediction {
            prefill_tokens_per_s: step.tokens_per_s,
            decode_tokens_per_s: 0.0,
            time_to_first_token_ms: 0.0,
            time_per_output_token_ms: 0.0,
        };
        let mut notes = Vec::new();
        if p.offload != Offload::None {
            notes.push(format!(
                "ZeRO offload keeps {:.1} GiB of optimizer state{} in host memory (DeepSpeed's own estimate, {}x buffer)",
                Self::gib(b.host),
                if p.offload == Offload::OptimizerAndParams { " and parameters" } else { "" },
                mem::zero::ADDITIONAL_BUFFER_FACTOR
            ));
        }
        Ok(Eval {
            memory,
            total_bytes: per_gpu
                .saturating_mul(self.gpus.len() as u64)
                .saturating_add(b.host),
            overflow: gpu_over.max(host_over),
            ladder_overflow: gpu_over,
            prediction,
            knee: 0.0,
            notes,
        })
    }

    fn follow_up(&self, _ladder: &[Point], _p: &Point, _e: &Eval) -> Option<Vec<Point>> {
        None
    }

    fn variant(&self, p: &Point) -> String {
        p.method.name().into()
    }

    fn measured_here(&self, _p: &Point, _t: &crate::evidence::ThroughputPoint) -> bool {
        // The store records serving throughputs (llama-bench, llama-server, vLLM); no training row describes a
        // step, so none replaces a training prediction.
        false
    }

    fn sequences(&self, _p: &Point) -> u32 {
        u32::try_from(self.workload().concurrency).unwrap_or(u32::MAX)
    }

    fn preferred_variant(&self) -> String {
        self.method.name().into()
    }

    fn variant_key(&self) -> &'static str {
        "settings.method"
    }

    fn variant_noun(&self) -> &'static str {
        "training method"
    }

    fn variant_wish(&self) -> &'static str {
        "asks for"
    }

    fn variant_not_traded(&self, other: &str, preferred: &str, gain_pct: f64) -> String {
        format!(
            "scores {gain_pct:.1} % better with {} {other}, but the workload asks for {preferred}",
            self.variant_noun()
        )
    }

    fn variant_kept(&self, preferred: &str, other: &str, gain_pct: f64) -> String {
        format!(
            "the workload's preferred {} {preferred} fits and is kept; {other} would score {gain_pct:.1} % better but changes what is trained",
            self.variant_noun()
        )
    }

    fn min_gain(&self, _variant: &str) -> Option<(f64, String)> {
        None
    }

    fn group(&self, p: &Point) -> (u8, usize) {
        let z = match (p.zero, p.offload) {
            (Zero::Off, _) => 0,
            (Zero::Stage2, Offload::None) => 2,
            (Zero::Stage2, _) => 3,
            (Zero::Stage3, Offload::None) => 4,
            (Zero::Stage3, Offload::Optimizer) => 5,
            (Zero::Stage3, Offload::OptimizerAndParams) => 6,
        };
        (z * 2 + u8::from(p.checkpointing), self.gpus.len())
    }

    fn summary(&self, c: &Candidate<Point>) -> (Settings, Vec<String>) {
        (
            Settings::Torch(self.settings(c)),
            self.gpus.iter().map(|g| g.id.to_string()).collect(),
        )
    }

    fn label(&self, c: &Candidate<Point>) -> String {
        let s = self.settings(c);
        format!(
            "{} {}{}, micro-batch {} x {} tokens{}",
            s.method,
            match s.zero_stage {
                0 if s.data_parallel > 1 => format!("data parallel over {} GPUs", s.data_parallel),
                0 => "on one GPU".to_string(),
                z if s.data_parallel == 1 => format!("ZeRO-{z} on one GPU"),
                z => format!("ZeRO-{z} over {} GPUs", s.data_parallel),
            },
            if s.offload != "none" {
                format!(", {} offloaded", s.offload)
            } else {
                String::new()
            },
            s.micro_batch,
            s.sequence_length,
            if s.gradient_checkpointing {
                ", gradient checkpointing"
            } else {
                ""
            }
        )
    }

    fn describe(&self, c: &Candidate<Point>) -> Described {
        self.describe_chosen(c)
    }

    fn suggestions(&self, near: &Candidate<Point>, _all: &[Candidate<Point>]) -> Vec<String> {
        let gib = Self::gib;
        let (cap, reserve) = self.room();
        let room = cap.saturating_sub(reserve).saturating_sub(self.overhead.0);
        let mut s = vec![format!(
            "the nearest configuration ({}) needs {:.2} GiB more{}",
            self.label(near),
            gib(near.eval.overflow),
            if near.eval.ladder_overflow > 0 {
                " on each GPU"
            } else {
                " of host memory"
            }
        )];
        let fits = |p: &Point, seq: u32| -> Option<Breakdown> {
            let mut params = self.params(p, 1);
            params.sequence = u64::from(seq);
            let b = mem::breakdown(&self.inv, &params);
            (b.gpu_total() <= room).then_some(b)
        };
        let ckpt = |method| Point {
            method,
            zero: Zero::Off,
            offload: Offload::None,
            checkpointing: true,
        };
        for method in [Method::Lora, Method::LoraInt8, Method::Qlora] {
            if method <= near.point.method {
                continue;
            }
            if let Some(b) = fits(&ckpt(method), self.sequence) {
                s.push(format!(
                    "{} instead of {}: {:.2} GiB per GPU at micro-batch 1 with gradient checkpointing (base {:.2} GiB, adapters, gradients and optimizer {:.2} GiB, activations {:.2} GiB)",
                    match method {
                        Method::Qlora => "QLoRA, LoRA over an NF4 base (resolve -w fine-tune-qlora)",
                        Method::LoraInt8 => "LoRA over an 8-bit base (a workload with base_quantization: int8)",
                        _ => "LoRA (resolve -w fine-tune-lora)",
                    },
                    near.point.method.name(),
                    gib(b.gpu_total() + self.overhead.0),
                    gib(b.weights),
                    gib(b.adapters + b.gradients + b.optimizer),
                    gib(b.activations + b.logits)
                ));
                break;
            }
        }
        // Shorter sequences with the nearest strategy.
        let mut seq = self.sequence / 2;
        while seq >= 128 {
            if fits(
                &Point {
                    checkpointing: true,
                    ..near.point.clone()
                },
                seq,
            )
            .is_some()
            {
                s.push(format!(
                    "shorter sequences: {seq} tokens fits with gradient checkpointing at micro-batch 1 ({} now) (resolve -c {seq})",
                    self.sequence
                ));
                break;
            }
            seq /= 2;
        }
        if near.point.method == Method::Full {
            if let Some(n) = self.gpus_for_zero3()
                && n > self.processes()
            {
                {
                    s.push(format!(
                        "more GPUs: ZeRO-3 over {n} GPUs like {} fits ({} here): parameters, gradients and optimizer states are split {n} ways (resolve --hardware {n}x:{})",
                        self.gpus[0].name,
                        self.processes(),
                        self.gpus[0].profile
                    ));
                }
            }
            // ZeRO-Offload on these GPUs, with the host memory it would need.
            let off = if self.processes() > 1 {
                Point {
                    method: Method::Full,
                    zero: Zero::Stage3,
                    offload: Offload::OptimizerAndParams,
                    checkpointing: true,
                }
            } else {
                Point {
                    method: Method::Full,
                    zero: Zero::Stage2,
                    offload: Offload::Optimizer,
                    checkpointing: true,
                }
            };
            if let Some(b) = fits(&off, self.sequence) {
                let host = &self.req.fleet.host;
                s.push(format!(
                    "CPU offload: ZeRO-{} with the optimizer{} on the host fits the GPUs ({:.2} GiB each) with {:.0} GiB of host memory (DeepSpeed's estimate; {:.0} GiB available here)",
                    if off.zero == Zero::Stage3 { 3 } else { 2 },
                    if off.offload == Offload::OptimizerAndParams { " and parameters" } else { "" },
                    gib(b.gpu_total() + self.overhead.0),
                    gib(b.host),
                    gib(host.capacity_bytes.saturating_sub(host.reserve_bytes))
                ));
            }
        }
        s
    }
}
