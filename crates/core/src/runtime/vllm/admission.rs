//! vLLM 0.33's admission rule and the choice of `--max-num-seqs`.
//!
//! Admission: vLLM starts when its KV memory, less the null block the `BlockPool` holds back
//! (vllm/v1/core/block_pool.py `BlockPool.__init__`), covers one request at `max_model_len` in every KV cache group
//! (vllm/v1/core/kv_cache_planning.py `get_kv_cache_configs` → `_check_enough_kv_cache_memory`, the need being
//! `_max_memory_usage_bytes_from_groups`: bytes per block × Σ over groups of `cdiv(need, page)`); otherwise it
//! raises "To serve at least one request with the model's max seq len ...". `max_num_seqs` is never checked against
//! the pool: the scheduler (vllm/v1/core/sched/scheduler.py `Scheduler.schedule`) runs at most `max_num_seqs`
//! requests and `max_num_batched_tokens` tokens a step (prefills chunked, vLLM's default:
//! vllm/config/scheduler.py `enable_chunked_prefill`, vllm/engine/arg_utils.py
//! `_set_default_chunked_prefill_and_prefix_caching_args`), allocates blocks as tokens arrive (`allocate_slots`), and
//! when none is free preempts the last running request (`_preempt_request`: its blocks are freed and it is
//! recomputed later). The pool's capacity at full length is what vLLM logs as "Maximum concurrency for N tokens per
//! request: X" (vllm/v1/core/kv_cache_utils.py `get_max_concurrency_for_kv_cache_config`).
//!
//! `--max-num-seqs` (unless `--parallel` pins it) is the workload's sequences per replica, lowered to the number of
//! the workload's requests (prompt + generation tokens, at most `max_model_len`) the pool holds at once, so the
//! scheduler does not preempt at the workload's lengths; and, for a throughput workload with an SLA, to the most
//! sequences whose predicted step still meets it (a throughput workload queues the rest; a latency or balanced
//! workload's users would wait, so its count is kept and the SLA reported as missed).
//! Trade-off: the pool is sized for requests of the workload's length, not `max_model_len`; requests near full
//! length then preempt others (vLLM recomputes them), which costs throughput only when they are common.

use optimizer_memory::vllm as mem;

use super::{Point, Vllm};
use crate::profile::Objective;
use crate::runtime::PlanError;

/// Blocks the `BlockPool` holds back for good: its null block (vllm/v1/core/block_pool.py `BlockPool.__init__`,
/// `self.null_block = self.free_block_queue.popleft()`), which `get_kv_cache_configs` subtracts before its check.
const NULL_BLOCKS: u64 = 1;

/// What bounds a point's `--max-num-seqs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeqBound {
    /// `--parallel` pinned it.
    Pinned,
    /// The workload's sequences per replica.
    Workload,
    /// The KV pool holds no more of the workload's requests at once.
    KvPool,
    /// More sequences would miss the workload's SLA.
    Sla,
}

/// The least KV memory vLLM 0.33 starts with: one `max_model_len` request's blocks in every group and the null
/// block, in bytes (`None` past 64 bits).
pub(crate) fn admission_bytes(kv: &mem::Kv) -> Option<u64> {
    kv.blocks_per_request
        .checked_add(NULL_BLOCKS)?
        .checked_mul(kv.bytes_per_block)
}

/// Whether KV memory of `kv_bytes` passes vLLM's start-up check (`_check_enough_kv_cache_memory` after
/// `get_kv_cache_configs` takes the null block off).
pub(crate) fn admits(kv_bytes: u64, kv: &mem::Kv) -> bool {
    admission_bytes(kv).is_some_and(|need| kv_bytes >= need)
}

/// The most requests of `blocks_per_request` blocks a pool of `num_blocks` holds at once, the null block apart.
pub fn requests_held(num_blocks: u64, blocks_per_request: u64) -> u64 {
    num_blocks
        .saturating_sub(NULL_BLOCKS)
        .checked_div(blocks_per_request)
        .unwrap_or(0)
}

/// vLLM's `format_gib` (vllm/utils/mem_utils.py): `str(round(b / GiB, 2))`, Python's shortest float text, so
/// 16 GiB prints `16.0`.
pub(crate) fn format_gib(bytes: u64) -> String {
    let v = (bytes as f64 / crate::units::GIB_BYTES as f64 * 100.0).round() / 100.0;
    let s = format!("{v:.2}");
    let t = s.trim_end_matches('0');
    if t.ends_with('.') {
        format!("{t}0")
    } else {
        t.to_string()
    }
}

impl Vllm<'_> {
    /// Tokens one of the workload's requests holds at its end: its prompt and generation, at most `len`.
    pub(super) fn request_tokens(&self, len: u32) -> u32 {
        let w = self.workload();
        let t = w.prompt_tokens.saturating_add(w.generation_tokens).max(1);
        u32::try_from(t).unwrap_or(u32::MAX).min(len)
    }

    /// Blocks one of the workload's requests takes from the pool (summed over groups, as at full length).
    pub(super) fn request_blocks(&self, p: &Point, len: u32) -> Result<u64, PlanError> {
        let params = self.params(p, self.request_tokens(len));
        Ok(mem::kv(self.req.model, &params)?.blocks_per_request.max(1))
    }

    /// The point with its `--max-num-seqs` chosen at `len`, and what bounded it. `base` carries the ceiling
    /// (the workload's sequences per replica, or `--parallel`). The pool is read at the ceiling, where the
    /// non-KV memory (sampler buffers, CUDA-graph sizes) is largest, so the count chosen always fits its own pool.
    pub(super) fn choose_seqs(&self, base: &Point, len: u32) -> (Point, SeqBound) {
        if self.req.overrides.parallel.is_some() {
            let p = Point {
                seqs_bound: SeqBound::Pinned,
                ..base.clone()
            };
            return (p, SeqBound::Pinned);
        }
        let ceiling = base.max_num_seqs.max(1);
        let with = |n: u32| Point {
            max_num_seqs: n,
            ..base.clone()
        };
        let (mut n, mut bound) = (ceiling, SeqBound::Workload);
        let Ok(m) = self.memory(base, len) else {
            return (with(n), bound);
        };
        if m.overflow > 0 {
            return (with(n), bound);
        }
        if let Ok(per) = self.request_blocks(base, len) {
            // Requests of the workload's length the pool holds with `k` sequence slots (fewer slots leave a larger
            // pool: smaller sampler buffers and CUDA-graph sizes).
            let held = |k: u32| -> u64 {
                self.memory(&with(k), len)
                    .map_or(0, |m| requests_held(m.capacity.num_blocks, per))
            };
            let at_ceiling = requests_held(m.capacity.num_blocks, per);
            if at_ceiling < u64::from(n) {
                // The most slots whose own pool holds that many requests: at least the count read at the ceiling,
                // at most what the pool holds there with fewer slots.
                let clamp = |h: u64| u32::try_from(h).unwrap_or(u32::MAX).min(ceiling);
                let (mut lo, mut hi) = (
                    clamp(at_ceiling).max(1),
                    clamp(held(clamp(at_ceiling).max(1))),
                );
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if held(mid) >= u64::from(mid) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                n = lo;
                bound = SeqBound::KvPool;
            }
        }
        let sla = &self.workload().sla;
        if self.req.objective == Objective::Throughput
            && (sla.time_per_output_token_ms.is_some() || sla.time_to_first_token_ms.is_some())
        {
            let meets = |k: u32| {
                use crate::runtime::Runtime;
                self.evaluate(&with(k), len).is_ok_and(|e| {
                    let p = &e.prediction;
                    sla.time_per_output_token_ms
                        .is_none_or(|t| p.time_per_output_token_ms <= t)
                        && sla
                            .time_to_first_token_ms
                            .is_none_or(|t| p.time_to_first_token_ms <= t)
                })
            };
            // The step grows with the sequences: the largest count that meets the SLA, if one does.
            if !meets(n) && meets(1) {
                let (mut ok, mut bad) = (1u32, n);
                while bad - ok > 1 {
                    let mid = ok + (bad - ok) / 2;
                    if meets(mid) {
                        ok = mid;
                    } else {
                        bad = mid;
                    }
                }
                n = ok;
                bound = SeqBound::Sla;
            }
        }
        let p = Point {
            seqs_bound: bound,
            ..with(n)
        };
        (p, bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_gib_prints_as_python_str_of_round() {
        assert_eq!(format_gib(16 << 30), "16.0");
        assert_eq!(format_gib(1_020_054_732), "0.95");
        assert_eq!(format_gib((1u64 << 30) / 10), "0.1");
    }

    #[test]
    fn the_null_block_is_held_back_from_requests() {
        assert_eq!(requests_held(9, 4), 2);
        assert_eq!(requests_held(8, 4), 1);
        assert_eq!(requests_held(0, 4), 0);
        assert_eq!(requests_held(5, 0), 0);
    }
}
