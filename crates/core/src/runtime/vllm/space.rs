//! vLLM's candidate space and search: the ladders of tensor-parallel size × KV cache dtype × CUDA graphs,
//! the evaluation of one point at one `--max-model-len`, and the suggestions when nothing fits.

use crate::emit::{MemoryComponents, MemoryDevice, Settings};
use crate::perf::{self, Shape};
use crate::runtime::{Candidate, Described, Eval, Runtime, RuntimeId, Size};
use optimizer_memory::vllm::{self as mem, KvCacheDtype};

use super::admission::SeqBound;
use super::{EAGER_LAUNCH_PER_LAYER_S, Point, Vllm};
use crate::runtime::llama_cpp::quantize::largest_below;

impl Runtime for Vllm<'_> {
    type Point = Point;

    fn id(&self) -> RuntimeId {
        RuntimeId::Vllm
    }

    fn engine(&self) -> (&'static str, &'static str) {
        ("vllm", mem::VERSION)
    }

    /// Each point's `--max-num-seqs` is chosen here, at the size knob's floor ([`Vllm::choose_seqs`]): the pool
    /// it reads barely moves with `--max-model-len` (only the admission need grows with it).
    fn ladders(&self) -> Vec<Vec<Point>> {
        let len = match self.size() {
            Size::Fixed(s) => s,
            Size::LargestFit { floor, .. } => floor,
        };
        let n = self.gpus.len() as u32;
        let point = |tp: u32, kv: KvCacheDtype, eager: bool| Point {
            tp,
            pp: 1,
            nnodes: 1,
            dp: 1,
            ep: false,
            gpus: (0..tp.min(n) as usize).collect(),
            replicas: 1,
            kv,
            max_num_seqs: 1,
            seqs_bound: SeqBound::Workload,
            enforce_eager: eager,
        };
        // Layouts across nodes are planned when no node holds the model: then each is a ladder of its own, so
        // every one that fits is fitted and the speed model chooses among them.
        let across = !self.layouts.is_empty() && {
            let top = self.tp_sizes.last().copied().unwrap_or(1);
            let (replicas, seqs) = self.replicas(top);
            !self.kv_types.iter().any(|(kv, _)| {
                let p = Point {
                    replicas,
                    max_num_seqs: seqs,
                    ..point(top, *kv, false)
                };
                self.evaluate(&p, len).is_ok_and(|e| e.fits())
            })
        };
        let mut out = Vec::new();
        for eager in [false, true] {
            for (kv, _) in &self.kv_types {
                let one_node: Vec<Point> = self
                    .tp_sizes
                    .iter()
                    .map(|&tp| {
                        let (replicas, seqs) = self.replicas(tp);
                        let base = Point {
                            replicas,
                            max_num_seqs: seqs,
                            ..point(tp, *kv, eager)
                        };
                        self.choose_seqs(&base, len).0
                    })
                    .collect();
                if !across {
                    if !one_node.is_empty() {
                        out.push(one_node);
                    }
                    continue;
                }
                for layout in &self.layouts {
                    let base = self.layout_point(layout, point(1, *kv, eager));
                    out.push(vec![self.choose_seqs(&base, len).0]);
                }
            }
        }
        out
    }

    fn size(&self) -> Size {
        crate::runtime::context_size(
            self.req.overrides,
            self.workload(),
            self.n_ctx_train,
            mem::DEFAULT_BLOCK_SIZE,
        )
    }

    fn evaluate(&self, p: &Point, len: u32) -> Result<Eval, crate::runtime::PlanError> {
        let m = self.memory(p, len)?;
        let w = self.workload();
        let mut memory = Vec::with_capacity(p.gpus.len());
        for &i in &p.gpus {
            let g = self.gpus[i];
            let components = MemoryComponents {
                weights_bytes: m.nk.weights.per_rank_bytes,
                kv_cache_bytes: m.kv_alloc,
                compute_bytes: m
                    .nk
                    .activation_peak_bytes
                    .saturating_add(m.nk.runner_buffers_bytes),
                overhead_bytes: m.nk.non_torch_bytes,
                cuda_graphs_bytes: m.nk.cuda_graph_bytes,
                ..MemoryComponents::default()
            };
            let total = m.non_kv.saturating_add(m.kv_alloc);
            memory.push(MemoryDevice {
                device: g.id.to_string(),
                components,
                total_bytes: total,
                capacity_bytes: g.capacity_bytes,
                reserve_bytes: m.reserve,
            });
        }
        let per_gpu = m.non_kv.saturating_add(m.kv_alloc);
        let total_bytes = per_gpu
            .saturating_mul(u64::from(p.tp))
            .saturating_mul(u64::from(p.pp.max(1)))
            .saturating_mul(u64::from(p.dp.max(1)))
            .saturating_mul(u64::from(p.replicas));
        if p.pp > 1 {
            return self.evaluate_pipeline(p, len, &m, memory, total_bytes);
        }
        // Across nodes a step's routed-expert reads follow its tokens (every engine's under expert parallel);
        // one node keeps the one-token share its plans were measured against.
        let n = p.max_num_seqs.max(1) as f64;
        let moe_tokens = if p.nnodes > 1 {
            n * f64::from(p.dp.max(1))
        } else {
            1.0
        };
        let load = self.load(self.req.model, p, &m, moe_tokens);
        let gperf = self.gpus[p.gpus[0]].perf();
        let shape = Shape {
            prompt_tokens: w.prompt_tokens,
            generation_tokens: w.generation_tokens,
            concurrency: u64::from(p.max_num_seqs),
            ubatch: u64::from(self.max_num_batched_tokens.max(p.max_num_seqs)),
        };
        let pairs = [(gperf.clone(), load.clone())];
        let mut pred = perf::predict(&pairs, shape);
        // Tensor-parallel all-reduces, expert dispatch and combine, and eager kernel launches add to every step.
        let mut step = pred.time_per_output_token_ms / 1e3 + self.comm_seconds(p, n);
        if p.enforce_eager {
            step += EAGER_LAUNCH_PER_LAYER_S * f64::from(self.n_layer);
        }
        let prompt = w.prompt_tokens.max(1) as f64;
        let prefill_s = prompt / pred.prefill_tokens_per_s.max(f64::MIN_POSITIVE)
            + self.comm_seconds(p, prompt);
        pred.time_per_output_token_ms = step * 1e3;
        let engines = f64::from(p.replicas) * f64::from(p.dp.max(1));
        pred.decode_tokens_per_s = n / step * engines;
        pred.prefill_tokens_per_s = prompt / prefill_s * engines;
        pred.time_to_first_token_ms = (prefill_s + step) * 1e3;
        let knee = perf::decode_knee(&gperf, &load);
        let notes = Vec::new();
        Ok(Eval {
            memory,
            total_bytes,
            overflow: m.overflow,
            ladder_overflow: m.overflow,
            prediction: pred,
            knee,
            notes,
        })
    }

    fn follow_up(&self, _ladder: &[Point], _p: &Point, _e: &Eval) -> Option<Vec<Point>> {
        None
    }

    fn variant(&self, p: &Point) -> String {
        match p.kv {
            KvCacheDtype::Auto => "auto".into(),
            KvCacheDtype::Fp8 => "fp8".into(),
        }
    }

    fn measured_here(&self, p: &Point, t: &crate::evidence::ThroughputPoint) -> bool {
        // A measured vLLM throughput names its devices; the planner checks those, the sequences and that the
        // row spanned as many GPUs as the plan uses, and here the tensor-parallel size it ran at (a row that does
        // not say ran one GPU). A plan with data-parallel replicas uses more GPUs than one replica's row spans,
        // so a per-replica rate never stands for its total.
        t.tensor_parallel.unwrap_or(1) == p.tp && t.gpu_layers.is_none()
    }

    fn sequences(&self, p: &Point) -> u32 {
        p.max_num_seqs
    }

    /// The search does not choose vLLM's sequences: `ladders` does, from the KV pool ([`Vllm::choose_seqs`]).
    fn rungs_slow_down(&self) -> bool {
        false
    }

    fn preferred_variant(&self) -> String {
        match self.kv_types[0].0 {
            KvCacheDtype::Auto => "auto".into(),
            KvCacheDtype::Fp8 => "fp8".into(),
        }
    }

    fn variant_key(&self) -> &'static str {
        "settings.kv_cache_dtype"
    }

    fn min_gain(&self, variant: &str) -> Option<(f64, String)> {
        let r = self.req.profiles.kv_cache(RuntimeId::Vllm, variant)?;
        Some((r.min_gain?, r.id.clone()))
    }

    /// One group per layout (one node, pipeline, tensor parallel across nodes, expert parallel) and size, so the
    /// alternatives show each layout across nodes the speed model weighed.
    fn group(&self, p: &Point) -> (u8, usize) {
        let layout: u8 = if p.ep {
            3
        } else if p.pp > 1 {
            1
        } else if p.nnodes > 1 {
            2
        } else {
            0
        };
        (
            u8::from(p.enforce_eager) + 2 * layout,
            (p.tp * p.pp.max(1) * p.dp.max(1)) as usize,
        )
    }

    fn summary(&self, c: &Candidate<Point>) -> (Settings, Vec<String>) {
        let (s, _) = self.settings(c);
        (
            Settings::Vllm(s),
            c.point
                .gpus
                .iter()
                .map(|&i| self.gpus[i].id.to_string())
                .collect(),
        )
    }

    fn label(&self, c: &Candidate<Point>) -> String {
        let p = &c.point;
        let pp = if p.pp > 1 {
            format!(" x pipeline parallel {} (nodes)", p.pp)
        } else if p.ep {
            format!(
                " x data parallel {} over {} nodes, expert parallel {}",
                p.dp,
                p.nnodes,
                p.tp * p.dp
            )
        } else if p.nnodes > 1 {
            format!(" across {} nodes", p.nnodes)
        } else {
            String::new()
        };
        format!(
            "tensor parallel {}{pp}, KV {}, --max-model-len {} x {} sequences{}{}",
            c.point.tp,
            self.variant(&c.point),
            c.size,
            c.point.max_num_seqs,
            if p.dp > 1 { " per engine" } else { "" },
            if c.point.enforce_eager { ", eager" } else { "" }
        )
    }

    fn describe(&self, c: &Candidate<Point>) -> Described {
        self.describe_chosen(c)
    }

    /// Each flag change is checked before it is offered (the nearest candidate re-evaluated with it fits), so
    /// following `(resolve FLAGS)` (docs/resolve.md) re-plans with at least that candidate. An fp8 KV cache is
    /// named only where vLLM runs it on these GPUs (`choose::kv_types`: compute capability 8.9+), a quantized
    /// checkpoint only for a checkpoint that is not quantized already and only when its weights would fit.
    fn suggestions(&self, near: &Candidate<Point>, _all: &[Candidate<Point>]) -> Vec<String> {
        use crate::units::gib;
        let mut s = vec![format!(
            "the nearest configuration ({}) needs {:.2} GiB more on each of its GPUs",
            self.label(near),
            gib(near.eval.overflow)
        )];
        let Ok(m) = self.memory(&near.point, near.size) else {
            return s;
        };
        let fits = |p: &Point, len: u32| self.evaluate(p, len).is_ok_and(|e| e.fits());
        if let Some(n) = largest_below(1, near.point.max_num_seqs, |n| {
            fits(
                &Point {
                    max_num_seqs: n,
                    ..near.point.clone()
                },
                near.size,
            )
        }) {
            s.push(format!(
                "fewer sequences: --max-num-seqs {n} instead of {} at --max-model-len {} (resolve --parallel {n})",
                near.point.max_num_seqs, near.size
            ));
        }
        // vLLM allocates the KV cache in blocks: the longest whole number of blocks below the nearest length.
        let block = mem::DEFAULT_BLOCK_SIZE;
        if let Some(len) = largest_below(1, near.size.div_ceil(block), |k| {
            fits(&near.point, k * block)
        })
        .map(|k| k * block)
        {
            s.push(format!(
                "a shorter context: --max-model-len {len} instead of {} (resolve -c {len})",
                near.size
            ));
        }
        if !self.tp_sizes.iter().any(|&t| t > near.point.tp) && near.point.nnodes >= self.max_pp() {
            s.push(format!(
                "other hardware, more GPUs: its weights take {:.2} GiB per GPU at tensor parallel {}",
                gib(m.nk.weights.per_rank_bytes),
                near.point.tp
            ));
        }
        let cc = self.gpus.iter().filter_map(|g| g.compute_capability).min();
        let fp8 = Point {
            kv: KvCacheDtype::Fp8,
            ..near.point.clone()
        };
        if near.point.kv != KvCacheDtype::Fp8
            && cc.is_some_and(|c| c >= super::choose::FP8_KV_MIN_CC)
            && fits(&fp8, near.size)
        {
            s.push(
                "an fp8 KV cache (--kv-cache-dtype fp8) fits (resolve --kv-type fp8)".to_string(),
            );
        }
        // A 4-bit AWQ/GPTQ checkpoint of an unquantized one: its linear weights at 4 bits plus a 16-bit scale and
        // a 4-bit zero point per group of 128 (AutoAWQ's and GPTQ's default group size).
        let model = self.req.model;
        let bpw = model.bits_per_weight();
        let int4_bpw = 4.0 + (16.0 + 4.0) / 128.0;
        if model.hparams.quantization.is_none() && self.quantization.is_none() && bpw > int4_bpw {
            let per_rank = m.nk.weights.per_rank_bytes;
            let saved = (per_rank as f64 * (1.0 - int4_bpw / bpw)) as u64;
            if saved >= near.eval.overflow {
                s.push(format!(
                    "another checkpoint, 4-bit AWQ or GPTQ of this model: about {:.2} GiB of weights per GPU instead of {:.2} GiB at {bpw:.2} bits per weight, which fits (-m THAT-CHECKPOINT)",
                    gib((per_rank as f64 * int4_bpw / bpw) as u64),
                    gib(per_rank)
                ));
            }
        }
        s
    }
}
