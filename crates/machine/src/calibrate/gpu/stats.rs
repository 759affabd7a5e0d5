//! Timing statistics: warm-up, a probe launch that decides how many launches make one timed run, then several
//! timed runs whose median per-launch time is kept (with the fastest and slowest for the record). Pure over the
//! timing closure, so the mock drives it deterministically.

use super::{GpuError, Timing};

/// Most launches one timed run may hold: a launch costs at least a few microseconds, so this bounds a run of a
/// near-empty kernel to well under a second while still amortizing the event overhead.
pub(crate) const MAX_LAUNCHES_PER_SAMPLE: u32 = 100_000;

/// A timed point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Timed {
    /// Median seconds per launch.
    pub seconds: f64,
    pub seconds_min: f64,
    pub seconds_max: f64,
    pub samples: u32,
    /// Launches per timed run.
    pub launches: u32,
}

impl Timed {
    /// No timing (rows that count a batch rather than time it).
    pub(crate) fn none() -> Timed {
        Timed {
            seconds: 0.0,
            seconds_min: 0.0,
            seconds_max: 0.0,
            samples: 0,
            launches: 0,
        }
    }
}

/// Times an operation: `run(n)` performs `n` launches back to back and returns the seconds they took together.
pub(crate) fn time(
    timing: &Timing,
    what: &str,
    mut run: impl FnMut(u32) -> Result<f64, GpuError>,
) -> Result<Timed, GpuError> {
    let check = |seconds: f64, launches: u32| {
        if seconds.is_finite() && seconds > 0.0 {
            Ok(seconds)
        } else {
            Err(GpuError::Timer {
                what: what.to_string(),
                seconds,
                launches,
            })
        }
    };
    if timing.warmup_launches > 0 {
        run(timing.warmup_launches)?;
    }
    let probe = check(run(1)?, 1)?;
    let wanted = (timing.min_sample_s / probe).ceil();
    let launches = if wanted.is_finite() && wanted >= 1.0 {
        (wanted.min(f64::from(MAX_LAUNCHES_PER_SAMPLE))) as u32
    } else {
        1
    };
    let mut per_launch = Vec::with_capacity(timing.samples.max(1) as usize);
    for _ in 0..timing.samples.max(1) {
        per_launch.push(check(run(launches)?, launches)? / f64::from(launches));
    }
    per_launch.sort_by(f64::total_cmp);
    let n = per_launch.len();
    let seconds = if n % 2 == 1 {
        per_launch[n / 2]
    } else {
        (per_launch[n / 2 - 1] + per_launch[n / 2]) / 2.0
    };
    Ok(Timed {
        seconds,
        seconds_min: per_launch[0],
        seconds_max: per_launch[n - 1],
        samples: n as u32,
        launches,
    })
}
