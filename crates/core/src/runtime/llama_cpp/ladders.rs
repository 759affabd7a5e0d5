//! llama.cpp's placement ladders: the points the search climbs, each ladder ordered so that memory on the GPUs
//! falls from rung to rung (the search bisects it for the first rung the GPUs hold). Placements: the CPU alone;
//! every layer on the k GPUs with the most free memory; hybrid `-ngl` on all of them; and, for a mixture-of-experts
//! model, every layer on the GPUs with the routed experts of the first N layers on the host (`--n-cpu-moe N`,
//! llama.cpp's `-ncmoe`: common/arg.cpp keeps the first N layers' `ffn_(up|down|gate)_exps` on the CPU), N from
//! 1 to every layer, as llama.cpp's own `--fit` lowers it.
//!
//! Trade-off: partial expert offload is laddered on all the GPUs only, as hybrid `-ngl` is: a GPU taken away can
//! only move experts back to the slower host; on identical GPUs, every expert on the host is still laddered over
//! 1..k GPUs too, since the fewest GPUs that hold the rest decode as fast in less memory.

use super::{LlamaCpp, Point};
use crate::emit::Strategy;
use optimizer_model::GgmlType;

impl LlamaCpp<'_> {
    /// The planned GPUs are identical (one profile, one capacity): more of them never decode faster.
    fn identical_gpus(&self) -> bool {
        self.gpus.windows(2).all(|w| {
            w[0].profile == w[1].profile
                && w[0].capacity_bytes == w[1].capacity_bytes
                && w[0].unified_memory == w[1].unified_memory
        })
    }

    fn with_kv_ub_np(&self, base: &Point, f: &mut dyn FnMut(Point)) {
        for &kv in &self.kv_types {
            if kv.is_quantized() && !self.fa {
                continue;
            }
            for &ub in self.ubatches {
                f(Point {
                    kv,
                    ubatch: ub,
                    parallel: self.n_par,
                    ..base.clone()
                });
            }
        }
    }

    /// The runtime's GPUs, most capacity first (ties in inventory order): the order layers fill them in, for
    /// every ladder and for the pinned `-ngl` suggestion alike.
    pub(super) fn gpus_by_capacity(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.gpus.len()).collect();
        order.sort_by(|&a, &b| {
            self.gpus[b]
                .capacity_bytes
                .cmp(&self.gpus[a].capacity_bytes)
                .then(a.cmp(&b))
        });
        order
    }

    /// Every ladder of placements, for every KV cache type and micro-batch (one ladder each).
    pub(super) fn placement_ladders(&self) -> Vec<Vec<Point>> {
        let all = self.all_layers();
        let is_moe = self.req.model.hparams.expert_count.unwrap_or(0) > 0;
        let base = |strategy, gpus: Vec<usize>, ngl, cpu_moe| Point {
            strategy,
            gpus,
            ngl,
            cpu_moe,
            kv: GgmlType::F16,
            ubatch: 512,
            parallel: self.n_par,
        };
        // Placements: full offload on the k GPUs with the most free memory for every k; partial offload only on
        // all of them, since taking a GPU away can only move layers back to the slower host.
        let order = self.gpus_by_capacity();
        let mut placements: Vec<Vec<Point>> = vec![vec![base(Strategy::Cpu, vec![], 0, 0)]];
        let (mut full, mut moe) = (Vec::new(), Vec::new());
        for k in 1..=self.gpus.len() {
            let used = order[..k].to_vec();
            let strategy = if k == 1 {
                Strategy::Gpu
            } else {
                Strategy::MultiGpu
            };
            full.push(base(strategy, used.clone(), all, 0));
            // Every expert on the host on all the GPUs is the last rung of the partial ladder below.
            if is_moe && k < self.gpus.len() {
                moe.push(base(Strategy::MoeCpu, used, all, self.n_layer));
            }
        }
        if self.identical_gpus() {
            // One ladder from one GPU up: the fewest identical GPUs that hold the model decode as fast as more
            // (the layer split runs them one after another) in less memory.
            placements.extend([full, moe].into_iter().filter(|l| !l.is_empty()));
        } else {
            placements.extend(full.into_iter().chain(moe).map(|p| vec![p]));
        }
        if is_moe && !self.gpus.is_empty() {
            // The experts of the first N layers on the host, N rising: the GPUs hold less at every rung.
            placements.push(
                (1..=self.n_layer)
                    .map(|n| base(Strategy::MoeCpu, order.clone(), all, n))
                    .collect(),
            );
        }
        if !self.gpus.is_empty() {
            placements.push(
                (1..all)
                    .rev()
                    .map(|ngl| base(Strategy::Hybrid, order.clone(), ngl, 0))
                    .collect(),
            );
        }
        if let Some(ngl) = self.req.overrides.gpu_layers {
            let want = ngl.min(all);
            for ladder in &mut placements {
                ladder.retain(|p| p.ngl == want || (ngl == 0 && p.strategy == Strategy::Cpu));
            }
            placements.retain(|l| !l.is_empty());
        }
        // Every placement for every KV type and micro-batch; one ladder each.
        let mut out = Vec::new();
        for ladder in placements {
            let mut by_variant: Vec<Vec<Point>> = Vec::new();
            for (i, rung) in ladder.iter().enumerate() {
                let mut j = 0;
                self.with_kv_ub_np(rung, &mut |p| {
                    if i == 0 {
                        by_variant.push(Vec::with_capacity(ladder.len()));
                    }
                    by_variant[j].push(p);
                    j += 1;
                });
            }
            out.extend(by_variant);
        }
        out
    }
}
