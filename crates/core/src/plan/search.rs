//! Search and fit over a runtime's candidate space: each ladder is bisected for its first rung whose
//! accelerators hold it, each point's size knob is bisected for the largest value that fits, and follow-up
//! points (the roofline knee) are fitted too. Where the runtime lets the search choose the sequences
//! ([`Runtime::with_sequences`]: a throughput workload), every rung from the first that holds one sequence
//! serves the most that fit, up to the workload's count. Then [`choose`] picks the winner.
//!
//! Trade-off: sequences are fitted at the size knob's floor and the size after them, since a throughput score
//! gains from more sequences and not from a longer context; on ladders whose rungs only slow down, the walk over
//! rungs stops where a lower rung cannot win (the ceiling served, the knee passed, the best score out of reach),
//! so a plan costs a few evaluations per rung walked rather than one per rung and sequence count.

use std::collections::HashMap;

use crate::emit::Source;
use crate::runtime::{Candidate, Eval, PlanError, Runtime, Size};

/// Follow-up ladders climbed after a ladder's first answer: the knee moves with the rung it is read at, and
/// three rounds settle it in every fixture scenario.
const FOLLOW_UPS: usize = 3;

/// Scores within this fraction are ties, broken toward less memory.
pub const TIE: f64 = 0.01;

/// Memory as the document prints it, in hundredths of a GiB. Ties are broken on this, not on bytes: two vLLM
/// candidates on the same GPUs both fill them and differ only by the leftover below one KV block, which no
/// reader can see and no plan should be chosen for.
pub(crate) fn shown_memory(bytes: u64) -> u64 {
    (crate::units::gib(bytes) * 100.0).round() as u64
}

/// Every candidate the search fitted, in the order it visited them.
pub fn search<R: Runtime>(
    rt: &R,
    score: &dyn Fn(&Eval) -> f64,
) -> Result<Vec<Candidate<R::Point>>, PlanError> {
    let size = rt.size();
    let eval = |p: &R::Point, s: u32| -> Result<Candidate<R::Point>, PlanError> {
        let e = rt.evaluate(p, s)?;
        Ok(Candidate {
            point: p.clone(),
            size: s,
            score: score(&e),
            eval: e,
        })
    };
    // The point at its size: fixed, or the largest multiple of the step that fits between the floor and the
    // maximum, memory being monotone in the size.
    let fit = |p: &R::Point,
               at_floor: Option<Candidate<R::Point>>|
     -> Result<Candidate<R::Point>, PlanError> {
        match size {
            Size::Fixed(s) => match at_floor {
                Some(c) => Ok(c),
                None => eval(p, s),
            },
            Size::LargestFit { floor, max, step } => {
                let at_floor = match at_floor {
                    Some(c) => c,
                    None => eval(p, floor)?,
                };
                if !at_floor.fits() {
                    return Ok(at_floor);
                }
                let (mut lo, mut hi) = (floor / step, max / step);
                let mut best = at_floor;
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    let c = eval(p, mid * step)?;
                    if c.fits() {
                        lo = mid;
                        best = c;
                    } else {
                        hi = mid - 1;
                    }
                }
                Ok(best)
            }
        }
    };
    let floor = match size {
        Size::Fixed(s) => s,
        Size::LargestFit { floor, .. } => floor,
    };
    // A ladder's candidates: its first rung whose accelerators hold it at the floor size, fitted for size (rungs
    // after it put less on accelerators and are never faster); when that rung still overflows (the host cannot
    // take the rest), also the rung where accelerator and host overflow cross, the nearest to fitting.
    let climb = |ladder: &[R::Point]| -> Result<Vec<Candidate<R::Point>>, PlanError> {
        if let [one] = ladder {
            return Ok(vec![fit(one, None)?]);
        }
        let mut seen: Vec<Candidate<R::Point>> = Vec::new();
        let mut at = |i: usize| -> Result<Candidate<R::Point>, PlanError> {
            if let Some(c) = seen.iter().find(|c| c.point == ladder[i]) {
                return Ok(c.clone());
            }
            let c = eval(&ladder[i], floor)?;
            seen.push(c.clone());
            Ok(c)
        };
        let (mut lo, mut hi) = (0usize, ladder.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if at(mid)?.eval.ladder_overflow == 0 {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let first = at(lo)?;
        let mut out = Vec::new();
        if !first.fits() && lo > 0 {
            // Overflow is the larger of the accelerators' (falling along the ladder) and the host's (rising):
            // the first rung where the host's dominates, or the one before it, overflows least.
            let (mut a, mut b) = (0usize, lo);
            while a < b {
                let mid = (a + b) / 2;
                let c = at(mid)?;
                if c.eval.overflow > c.eval.ladder_overflow {
                    b = mid;
                } else {
                    a = mid + 1;
                }
            }
            let cross = [a.saturating_sub(1), a]
                .into_iter()
                .map(&mut at)
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .min_by_key(|c| c.eval.overflow);
            if let Some(c) = cross.filter(|c| c.point != first.point) {
                out.push(c);
            }
        }
        out.insert(0, fit(&ladder[lo], Some(first))?);
        Ok(out)
    };
    // The best score found per variant so far: a rung that cannot come within TIE of it even at its ceiling is
    // never chosen (per variant, since `choose` may keep the preferred variant over a faster one).
    let mut best: HashMap<String, f64> = HashMap::new();
    // Concurrency as a free variable: from the first rung whose accelerators hold one sequence, each rung serves
    // the most sequences that fit under the ladder's own count (memory is monotone in sequences: galloped from
    // the previous rung's count, then bisected). `None`: the count is fixed, or nothing fits at one sequence
    // (the climb at the ceiling then finds the nearest candidate for the suggestions).
    let walk = |ladder: &[R::Point],
                best: &mut HashMap<String, f64>|
     -> Result<Option<Vec<Candidate<R::Point>>>, PlanError> {
        if rt.with_sequences(&ladder[0], 1).is_none() {
            return Ok(None);
        }
        let at = |rung: &R::Point, n: u32| {
            let p = rt.with_sequences(rung, n).unwrap_or_else(|| rung.clone());
            eval(&p, floor)
        };
        let (mut lo, mut hi) = (0usize, ladder.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if at(&ladder[mid], 1)?.eval.ladder_overflow == 0 {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if !at(&ladder[lo], 1)?.fits() {
            return Ok(None);
        }
        let slows = rt.rungs_slow_down();
        let key = rt.variant(&ladder[0]);
        let mut found: Vec<Candidate<R::Point>> = Vec::new();
        let mut prev = 1u32;
        for rung in &ladder[lo..] {
            let ceiling = rt.sequences(rung).max(1);
            let top = at(rung, ceiling)?;
            if top.fits() {
                // Rungs below serve no more sequences and are slower (or, for vLLM, were never planned past the
                // first size that holds the workload).
                best.entry(key.clone())
                    .and_modify(|b| *b = b.min(top.score))
                    .or_insert(top.score);
                found.push(top);
                break;
            }
            let bound = best.get(&key).copied().unwrap_or(f64::INFINITY);
            if slows && !top.eval.memory.is_empty() && top.score > bound + TIE * bound.abs() {
                break;
            }
            let start = prev.min(ceiling - 1).max(1);
            let base = at(rung, start)?;
            let (n, c) = if base.fits() {
                let (mut ok, mut ok_c, mut bad, mut step) = (start, base, ceiling, 1u32);
                while ok.saturating_add(step) < bad {
                    let c = at(rung, ok + step)?;
                    if c.fits() {
                        (ok, ok_c) = (ok + step, c);
                        step = step.saturating_mul(2);
                    } else {
                        bad = ok + step;
                    }
                }
                while bad - ok > 1 {
                    let mid = ok + (bad - ok) / 2;
                    let c = at(rung, mid)?;
                    if c.fits() {
                        (ok, ok_c) = (mid, c);
                    } else {
                        bad = mid;
                    }
                }
                (ok, ok_c)
            } else {
                // Fewer than the rung before: the host binds, and it only takes more further down.
                let (mut ok, mut ok_c, mut bad) = (0u32, None, start);
                while bad - ok > 1 {
                    let mid = ok + (bad - ok) / 2;
                    let c = at(rung, mid)?;
                    if c.fits() {
                        (ok, ok_c) = (mid, Some(c));
                    } else {
                        bad = mid;
                    }
                }
                match ok_c {
                    Some(c) if !slows => (ok, c),
                    _ if slows => break,
                    _ => continue,
                }
            };
            if n > prev || found.is_empty() || !slows {
                best.entry(key.clone())
                    .and_modify(|b| *b = b.min(c.score))
                    .or_insert(c.score);
                found.push(c.clone());
            }
            // Past the knee more sequences add memory, not tokens per second, and lower rungs are slower.
            if slows && f64::from(n) >= c.eval.knee {
                break;
            }
            prev = prev.max(n);
        }
        // The best first: the follow-ups read the knee there.
        if let Some(i) = (0..found.len()).min_by(|&a, &b| found[a].score.total_cmp(&found[b].score))
        {
            found[..=i].rotate_right(1);
        }
        found
            .into_iter()
            .map(|c| fit(&c.point.clone(), Some(c)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    };
    let mut out = Vec::new();
    for ladder in rt.ladders() {
        if ladder.is_empty() {
            continue;
        }
        let mut found = match walk(&ladder, &mut best)? {
            Some(found) if !found.is_empty() => found,
            _ => climb(&ladder)?,
        };
        let mut current = ladder.clone();
        // Follow-ups until the runtime has none (each strictly smaller), at most FOLLOW_UPS deep.
        for _ in 0..FOLLOW_UPS {
            let Some(next) = rt.follow_up(&ladder, &found[0].point, &found[0].eval) else {
                break;
            };
            out.append(&mut found);
            found = climb(&next)?;
            current = next;
        }
        // A follow-up read at the answer's rung can settle one rung low: the rung above may reach the same
        // knee with fewer sequences, so its follow-up is climbed too (measured: a GTX 1650 batch plan of an
        // 8B model gains 3.4 % decode, -ngl 8 at 10 sequences instead of -ngl 7 at 11).
        let above = current
            .iter()
            .position(|p| *p == found[0].point)
            .filter(|&i| i > 0)
            .map(|i| current[i - 1].clone());
        out.extend(found);
        if let Some(above) = above {
            let c = eval(&above, floor)?;
            if let Some(next) = rt.follow_up(&ladder, &c.point, &c.eval) {
                out.extend(climb(&next)?);
            }
        }
    }
    Ok(out)
}

/// The fitting candidate with the best score; candidates within [`TIE`] of it are ties, broken toward less
/// memory. The workload's preferred variant (KV cache type) wins unless it does not fit or another variant's
/// gain clears the rule's threshold. Returns the winner and the provenance of the variant.
pub(crate) fn choose<'a, R: Runtime>(
    rt: &R,
    candidates: &'a [Candidate<R::Point>],
    preferred: &str,
) -> (Option<&'a Candidate<R::Point>>, (Source, String)) {
    let best_of = |filter: &dyn Fn(&Candidate<R::Point>) -> bool| {
        let fitting: Vec<&Candidate<R::Point>> = candidates
            .iter()
            .filter(|c| c.fits() && filter(c))
            .collect();
        let best = fitting
            .iter()
            .map(|c| c.score)
            .fold(f64::INFINITY, f64::min);
        fitting
            .into_iter()
            .filter(|c| c.score <= best + TIE * best.abs())
            .min_by(|a, b| {
                shown_memory(a.eval.total_bytes)
                    .cmp(&shown_memory(b.eval.total_bytes))
                    .then(a.score.total_cmp(&b.score))
            })
    };
    let any = best_of(&|_| true);
    let pref = best_of(&|c| rt.variant(&c.point) == preferred);
    match (any, pref) {
        (None, _) => (
            None,
            (
                Source::Profile,
                format!("the workload prefers {preferred}; nothing fits"),
            ),
        ),
        (Some(a), None) => (
            Some(a),
            (
                Source::Computed,
                format!(
                    "the workload prefers {preferred}, which does not fit; {} is the best-scoring {} that does",
                    rt.variant(&a.point),
                    rt.variant_noun()
                ),
            ),
        ),
        (Some(a), Some(p)) if rt.variant(&a.point) == preferred || std::ptr::eq(a, p) => (
            Some(p),
            (
                Source::Profile,
                format!(
                    "the workload's preferred {} {preferred} fits",
                    rt.variant_noun()
                ),
            ),
        ),
        (Some(a), Some(p)) => {
            let gain = if p.score > 0.0 {
                (p.score - a.score) / p.score
            } else {
                0.0
            };
            let other = rt.variant(&a.point);
            match rt.min_gain(&other) {
                Some((min, id)) if gain >= min => (
                    Some(a),
                    (
                        Source::Rule,
                        format!(
                            "{other} scores {:.1} % better than the preferred {preferred}, clearing the {:.0} % threshold of rule {}",
                            gain * 100.0,
                            min * 100.0,
                            id
                        ),
                    ),
                ),
                Some((min, id)) => (
                    Some(p),
                    (
                        Source::Rule,
                        format!(
                            "the workload's preferred {preferred} fits; {other} would score {:.1} % better, below the {:.0} % threshold of rule {} for {}",
                            gain * 100.0,
                            min * 100.0,
                            id,
                            rt.variant_trade()
                        ),
                    ),
                ),
                None => (
                    Some(p),
                    (
                        Source::Profile,
                        rt.variant_kept(preferred, &other, gain * 100.0),
                    ),
                ),
            }
        }
    }
}
