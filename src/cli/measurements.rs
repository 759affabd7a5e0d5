//! `optimizer measurements show ID|run:ID` and `optimizer measurements prune SELECTORS [--dry-run]`.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::app::store_failure;
use crate::store::{Prune, Pruned};

/// Largest `--older-than`: a century of days; the cutoff is computed from the clock with checked arithmetic,
/// and no store holds measurements older than that.
pub(super) const MAX_OLDER_THAN_DAYS: u64 = 36_525;

/// Seconds in a day, for `--older-than`.
const SECONDS_PER_DAY: u64 = 86_400;

/// `show`'s formats: a record, not a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum ShowFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub(super) struct RawShow {
    /// A measurement row id (as `measurements list` shows it), or `run:ID` for a whole run.
    id: String,
    #[arg(long, value_enum, default_value_t = ShowFormat::Yaml)]
    format: ShowFormat,
}

#[derive(Debug, Args)]
pub(super) struct RawPrune {
    /// Runs still marked incomplete (interrupted: never used by plans).
    #[arg(long)]
    incomplete: bool,
    /// Runs started more than DAYS days ago.
    #[arg(long, value_name = "DAYS")]
    older_than: Option<u64>,
    /// Measurements on devices of this hardware profile (as `measurements list` shows it).
    #[arg(long, value_name = "PROFILE")]
    device: Option<String>,
    /// One run.
    #[arg(long, value_name = "ID")]
    run: Option<i64>,
    /// Print what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

/// What `show` looks up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ShowWhat {
    Row(i64),
    Run(i64),
}

#[derive(Debug)]
pub(super) struct ShowSettings {
    what: ShowWhat,
    format: ShowFormat,
}

#[derive(Debug)]
pub(super) struct PruneSettings {
    /// Selectors, the age still in days (the clock is read when the prune runs).
    incomplete: bool,
    older_than_days: Option<u64>,
    device: Option<String>,
    run: Option<i64>,
    dry_run: bool,
    format: OutputFormat,
}

fn usage(msg: String) -> Failure {
    Failure::new(exit::USAGE, anyhow::anyhow!(msg))
}

/// `17` or `run:17`.
pub(super) fn parse_id(id: &str) -> Option<ShowWhat> {
    let positive = |s: &str| s.parse::<i64>().ok().filter(|n| *n > 0);
    match id.strip_prefix("run:") {
        Some(r) => positive(r).map(ShowWhat::Run),
        None => positive(id).map(ShowWhat::Row),
    }
}

pub(super) fn settle_show(raw: RawShow) -> Result<ShowSettings, Failure> {
    let what = parse_id(&raw.id).ok_or_else(|| {
        usage(format!(
            "measurements show {:?}: expected a row id (17) or run:ID (run:3)",
            raw.id
        ))
    })?;
    Ok(ShowSettings {
        what,
        format: raw.format,
    })
}

pub(super) fn settle_prune(raw: RawPrune) -> Result<PruneSettings, Failure> {
    if !raw.incomplete && raw.older_than.is_none() && raw.device.is_none() && raw.run.is_none() {
        return Err(
            usage("measurements prune needs at least one selector".into())
                .hint("--incomplete, --older-than DAYS, --device PROFILE or --run ID (they combine: all must hold); --dry-run shows what would go"),
        );
    }
    if let Some(d) = raw.older_than.filter(|d| *d > MAX_OLDER_THAN_DAYS) {
        return Err(usage(format!(
            "--older-than {d}: at most {MAX_OLDER_THAN_DAYS} days"
        )));
    }
    if let Some(r) = raw.run.filter(|r| *r <= 0) {
        return Err(usage(format!("--run {r}: run ids are positive")));
    }
    Ok(PruneSettings {
        incomplete: raw.incomplete,
        older_than_days: raw.older_than,
        device: raw.device,
        run: raw.run,
        dry_run: raw.dry_run,
        format: raw.format,
    })
}

pub(super) fn show(common: &Common, s: &ShowSettings) -> Result<(), Failure> {
    let store = common.store()?;
    let format = match s.format {
        ShowFormat::Yaml => OutputFormat::Yaml,
        ShowFormat::Json => OutputFormat::Json,
    };
    let missing = |what: String| {
        Failure::new(
            exit::USAGE,
            anyhow::anyhow!("{}: no {what}", store.path().display()),
        )
        .hint("`optimizer measurements list` shows every row and its run")
    };
    let text = match s.what {
        ShowWhat::Row(id) => match store.show(id).map_err(store_failure)? {
            Some(m) => render(&m, format)?,
            None => return Err(missing(format!("measurement {id}"))),
        },
        ShowWhat::Run(id) => match store.show_run(id).map_err(store_failure)? {
            Some(r) => render(&r, format)?,
            None => return Err(missing(format!("run {id}"))),
        },
    };
    write_stdout(&text)
}

pub(super) fn prune(common: &Common, s: &PruneSettings) -> Result<(), Failure> {
    let started_before = match s.older_than_days {
        None => None,
        Some(days) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(|e| {
                    Failure::new(exit::RUNTIME, e).hint("the system clock is before 1970")
                })?
                .as_secs();
            // `days` is at most MAX_OLDER_THAN_DAYS, so this cannot overflow; a clock younger than the span
            // selects nothing by age.
            let span = days.saturating_mul(SECONDS_PER_DAY);
            Some(crate::app::rfc3339(now.saturating_sub(span)))
        }
    };
    let sel = Prune {
        incomplete: s.incomplete,
        started_before,
        device_profile: s.device.clone(),
        run: s.run,
    };
    let done = common
        .store()?
        .prune(&sel, s.dry_run)
        .map_err(store_failure)?;
    let text = match s.format {
        OutputFormat::Table => table(&done),
        f => render(&done, f)?,
    };
    write_stdout(&text)
}

/// `measurements list` as a table. Status, tool, device and metric are the store's text, written by imports of
/// other tools' output: printed through [`super::terminal::safe`], so a stored name cannot drive the terminal.
pub(super) fn list_table(rows: &[crate::store::Listed]) -> String {
    use super::table::{left, right};
    use super::terminal::safe;
    let mut t = super::table::Table::new(&[
        right("row", 5),
        right("run", 4),
        left("status", 10),
        left("tool", 20),
        left("device", 34),
        left("metric", 22),
        right("value", 14),
        right("t", 3),
        right("ngl", 5),
    ]);
    let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    for r in rows {
        t.row([
            r.row.to_string(),
            r.run.to_string(),
            safe(&r.status).into_owned(),
            safe(&r.tool).into_owned(),
            safe(&r.device_profile).into_owned(),
            safe(&r.metric).into_owned(),
            format!("{:.3}", r.value),
            opt(r.threads),
            opt(r.gpu_layers),
        ]);
    }
    t.render()
}

fn ids(v: &[i64]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
}

fn table(p: &Pruned) -> String {
    let mut t = String::new();
    let verb = if p.dry_run { "would remove" } else { "removed" };
    let _ = writeln!(
        t,
        "{verb} {} measurement{} (rows {}) and {} run{} (runs {})",
        p.measurements.len(),
        if p.measurements.len() == 1 { "" } else { "s" },
        ids(&p.measurements),
        p.runs.len(),
        if p.runs.len() == 1 { "" } else { "s" },
        ids(&p.runs),
    );
    let _ = writeln!(
        t,
        "{verb} with them, no longer referenced: {} device(s), {} model(s), {} host(s)",
        p.devices, p.models, p.hosts
    );
    for k in &p.kept_running {
        let _ = writeln!(
            t,
            "kept run {} (incomplete): its recorder may still be writing it: {}",
            k.run,
            super::terminal::safe(&k.why)
        );
    }
    if p.dry_run {
        t.push_str("dry run: nothing was changed\n");
    }
    t
}
