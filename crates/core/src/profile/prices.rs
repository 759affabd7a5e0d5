//! Price tables (`crates/core/profiles/prices/`, issue 29): what renting (`cloud.yaml`) or buying
//! (`purchase.yaml`) each piece of hardware costs, typed, read from the embedded built-in files or a user's
//! `--prices FILE`, and validated against the profile set in force: ids unique, every hardware and node profile
//! id joined, every row dated (a row without a date never deserializes), amounts finite and positive. The
//! profile loader skips these files ([`super::PRICES_DIR`]); `recommend` loads them here. Pure: reads the text it
//! is given, touches nothing.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Diagnostic, ProfileSet};

/// A `YYYY-MM-DD` date in the schema (the calendar is checked by [`parse_date`]).
const DATE_PATTERN: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$";
/// A source is a URL (a price page, a retailer's listing, an announcement).
const URL_PATTERN: &str = r"^https?://";

/// The `schema_version` these types read.
const SCHEMA_VERSION: u32 = 1;

/// The id `recommend` gives the owned machine's option; no price row may take it.
pub const OWNED_ID: &str = "owned";

/// Hours in a (non-leap) year: 365 x 24, the amortisation divisor of `purchase.yaml`'s README.
pub const HOURS_PER_YEAR: f64 = 8760.0;

/// How a cloud price is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Pricing {
    OnDemand,
    Spot,
    #[serde(rename = "reserved-1y")]
    Reserved1y,
    CapacityBlock,
    Marketplace,
}

/// What a row's `date` means (`README.md` of the price folder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DateKind {
    Published,
    Committed,
    ValidUntil,
    Read,
    Launch,
    PublishedMonth,
}

/// How far a price can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    High,
    Medium,
    Low,
}

/// What kind of purchase price a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PurchaseKind {
    Msrp,
    Street,
    Estimate,
}

/// The GPUs a price buys: a hardware profile id and how many.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceGpus {
    pub profile: String,
    pub count: u32,
}

/// One hourly rental price (`cloud.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloudRow {
    pub id: String,
    pub provider: String,
    pub instance: String,
    pub region: String,
    pub pricing: Pricing,
    /// USD per hour for the whole row (the instance, or `gpus.count` GPUs of a per-GPU row).
    pub usd_per_hour: f64,
    pub gpus: PriceGpus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<f64>,
    /// `YYYY-MM-DD`.
    #[schemars(regex(pattern = DATE_PATTERN))]
    pub date: String,
    pub date_kind: DateKind,
    pub confidence: Confidence,
    #[schemars(regex(pattern = URL_PATTERN))]
    pub source: String,
    pub source_note: String,
}

/// `cloud.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloudFile {
    pub schema_version: u32,
    pub prices: Vec<CloudRow>,
}

/// One purchase price (`purchase.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PurchaseRow {
    pub id: String,
    pub item: String,
    pub gpus: PriceGpus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_profile: Option<String>,
    pub kind: PurchaseKind,
    /// USD; the low end of a quoted range.
    pub usd: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_high: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<f64>,
    /// `YYYY-MM-DD`.
    #[schemars(regex(pattern = DATE_PATTERN))]
    pub date: String,
    pub date_kind: DateKind,
    /// Board power of the GPUs priced, watts; `null` when not sourced.
    pub power_w: Option<f64>,
    pub power_source: String,
    pub confidence: Confidence,
    #[schemars(regex(pattern = URL_PATTERN))]
    pub source: String,
    pub source_note: String,
}

/// `purchase.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PurchaseFile {
    pub schema_version: u32,
    /// Years a purchase is spread over unless `--amortisation-years` says otherwise (a default, not sourced).
    pub amortisation_years_default: f64,
    pub prices: Vec<PurchaseRow>,
}

/// A price file of either kind, as published (`optimizer schema prices`, `schemas/prices.schema.json`): a file
/// is a cloud table or a purchase table, and no row fits both (each kind denies the other's fields).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only its schema is used: files are read as the kind their rows say
enum PriceFileSchema {
    Cloud(CloudFile),
    Purchase(PurchaseFile),
}

/// The published schema of price files (both kinds).
pub(crate) fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(PriceFileSchema)).unwrap_or(serde_json::Value::Null)
}

/// A price file's schema could not be built: a fault of this crate, not of the file, reported on the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SchemaError {
    /// The schemars schema does not serialise to JSON.
    #[error("{0}")]
    Json(String),
    #[error("the price schema does not compile: {0}")]
    Compile(String),
}

/// The validator of one kind of price file, built once.
fn validator(purchase: bool) -> Result<&'static jsonschema::Validator, SchemaError> {
    static CLOUD: OnceLock<Result<jsonschema::Validator, SchemaError>> = OnceLock::new();
    static PURCHASE: OnceLock<Result<jsonschema::Validator, SchemaError>> = OnceLock::new();
    let (cell, schema) = if purchase {
        (&PURCHASE, schemars::schema_for!(PurchaseFile))
    } else {
        (&CLOUD, schemars::schema_for!(CloudFile))
    };
    cell.get_or_init(|| {
        let v = serde_json::to_value(schema).map_err(|e| SchemaError::Json(e.to_string()))?;
        jsonschema::validator_for(&v).map_err(|e| SchemaError::Compile(e.to_string()))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// `row 4 (id "aws-p5-48xlarge-od")`: the row an instance path (`/prices/3/date`) points into, counted from 1
/// as an editor does, with its id when it has one; empty for a path outside the rows.
fn row_of(value: &serde_json::Value, instance_path: &str) -> String {
    let mut parts = instance_path.trim_start_matches('/').split('/');
    match (
        parts.next(),
        parts.next().and_then(|i| i.parse::<usize>().ok()),
    ) {
        (Some("prices"), Some(i)) => {
            let id = value
                .pointer(&format!("/prices/{i}/id"))
                .and_then(serde_json::Value::as_str)
                .map(|id| format!(" (id {id:?})"))
                .unwrap_or_default();
            format!("row {}{id}: ", i + 1)
        }
        _ => String::new(),
    }
}

/// Both tables, with where each came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Prices {
    pub cloud: Vec<(CloudRow, String)>,
    pub purchase: Vec<(PurchaseRow, String)>,
    pub amortisation_years_default: f64,
}

/// A parsed price file of either kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PriceFile {
    Cloud(CloudFile),
    Purchase(PurchaseFile),
}

fn diag(path: &str, instance_path: String, message: impl Into<String>) -> Diagnostic {
    Diagnostic {
        path: path.to_string(),
        instance_path,
        message: message.into(),
    }
}

/// Parses a price file; its kind is told by its rows: `usd_per_hour` (cloud) or `usd` (purchase), or a
/// top-level `amortisation_years_default` (purchase). The file is checked against its kind's schema first, and
/// every error is reported at its instance path with its row (`row 4 (id "x")`).
pub(crate) fn parse(path: &str, text: &str) -> Result<PriceFile, Vec<Diagnostic>> {
    let value: serde_json::Value = optimizer_input::yaml::from_str(text)
        .map_err(|e| vec![diag(path, String::new(), e.to_string())])?;
    let purchase = value.get("amortisation_years_default").is_some()
        || value
            .get("prices")
            .and_then(|p| p.as_array())
            .and_then(|rows| rows.first())
            .is_some_and(|r| r.get("usd").is_some());
    let errors = parse_errors(path, &value, purchase);
    if !errors.is_empty() {
        return Err(errors);
    }
    let parsed = if purchase {
        serde_json::from_value(value).map(PriceFile::Purchase)
    } else {
        serde_json::from_value(value).map(PriceFile::Cloud)
    };
    parsed.map_err(|e| vec![diag(path, String::new(), e.to_string())])
}

/// Every schema error of a price file, each at its instance path and naming its row.
fn parse_errors(path: &str, value: &serde_json::Value, purchase: bool) -> Vec<Diagnostic> {
    let v = match validator(purchase) {
        Ok(v) => v,
        Err(e) => return vec![diag(path, String::new(), e.to_string())],
    };
    v.iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            let row = row_of(value, &at);
            diag(path, at, format!("{row}{e}"))
        })
        .collect()
}

/// Text that is not a calendar day `YYYY-MM-DD` in the years 1970-9999.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a date YYYY-MM-DD")]
pub struct NotADate {
    pub text: String,
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date, or why it is not one (a real calendar day, years 1970-9999).
pub fn parse_date(text: &str) -> Result<i64, NotADate> {
    let bad = || NotADate {
        text: text.to_string(),
    };
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let num = |s: &str| -> Result<i64, NotADate> {
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (y, m, d) = (num(&text[0..4])?, num(&text[5..7])?, num(&text[8..10])?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(bad()),
    };
    if y < 1970 || !(1..=days_in_month).contains(&d) {
        return Err(bad());
    }
    // Howard Hinnant's days_from_civil (http://howardhinnant.github.io/date_algorithms.html).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Ok(era * 146_097 + doe - 719_468)
}

/// The built-in tables as embedded, validated against `set` with ages counted to `today` (days since the
/// epoch), overlaid by `user` files (path, text): a user row replaces the built-in row of the same id, other
/// rows are added. Every defect of every file is reported.
pub fn load(
    set: &ProfileSet,
    user: &[(String, String)],
    today: i64,
) -> Result<Prices, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let mut prices = Prices {
        cloud: Vec::new(),
        purchase: Vec::new(),
        amortisation_years_default: 0.0,
    };
    let builtin = super::embedded::EMBEDDED
        .iter()
        .filter(|(rel, _)| rel.split('/').next() == Some(super::PRICES_DIR))
        .map(|(rel, text)| (format!("builtin:{rel}"), (*text).to_string()));
    for (path, text) in builtin.chain(user.iter().cloned()) {
        let file = match parse(&path, &text) {
            Ok(f) => f,
            Err(d) => {
                diags.extend(d);
                continue;
            }
        };
        diags.extend(check(&path, &file, set, today));
        match file {
            PriceFile::Cloud(f) => {
                for row in f.prices {
                    prices.cloud.retain(|(r, _)| r.id != row.id);
                    prices.cloud.push((row, path.clone()));
                }
            }
            PriceFile::Purchase(f) => {
                prices.amortisation_years_default = f.amortisation_years_default;
                for row in f.prices {
                    prices.purchase.retain(|(r, _)| r.id != row.id);
                    prices.purchase.push((row, path.clone()));
                }
            }
        }
    }
    if diags.is_empty() {
        Ok(prices)
    } else {
        Err(diags)
    }
}

/// What both kinds of row share, for [`check`].
struct Common<'a> {
    id: &'a str,
    gpus: &'a PriceGpus,
    node_profile: Option<&'a str>,
    date: &'a str,
    date_kind: DateKind,
    source: &'a str,
    amount: (&'static str, f64),
    memory_gib: Option<f64>,
}

/// Every defect of one file: the schema version, unique ids, the profile joins, dates (none after `today`
/// unless it is a `valid-until` date), amounts and sizes.
pub(crate) fn check(path: &str, file: &PriceFile, set: &ProfileSet, today: i64) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let (version, rows): (u32, Vec<Common>) = match file {
        PriceFile::Cloud(f) => (
            f.schema_version,
            f.prices
                .iter()
                .map(|r| Common {
                    id: &r.id,
                    gpus: &r.gpus,
                    node_profile: r.node_profile.as_deref(),
                    date: &r.date,
                    date_kind: r.date_kind,
                    source: &r.source,
                    amount: ("usd_per_hour", r.usd_per_hour),
                    memory_gib: r.memory_gib,
                })
                .collect(),
        ),
        PriceFile::Purchase(f) => {
            if !(f.amortisation_years_default.is_finite() && f.amortisation_years_default > 0.0) {
                out.push(diag(
                    path,
                    "/amortisation_years_default".into(),
                    "must be a number of years above 0",
                ));
            }
            for (i, r) in f.prices.iter().enumerate() {
                if let Some(w) = r.power_w.filter(|w| !(w.is_finite() && *w >= 0.0)) {
                    out.push(diag(
                        path,
                        format!("/prices/{i}/power_w"),
                        format!("{w} is not a power in watts (0 or more)"),
                    ));
                }
                if let Some(h) = r.usd_high.filter(|h| !(h.is_finite() && *h >= r.usd)) {
                    out.push(diag(
                        path,
                        format!("/prices/{i}/usd_high"),
                        format!("{h} is below usd {}", r.usd),
                    ));
                }
            }
            (
                f.schema_version,
                f.prices
                    .iter()
                    .map(|r| Common {
                        id: &r.id,
                        gpus: &r.gpus,
                        node_profile: r.node_profile.as_deref(),
                        date: &r.date,
                        date_kind: r.date_kind,
                        source: &r.source,
                        amount: ("usd", r.usd),
                        memory_gib: r.memory_gib,
                    })
                    .collect(),
            )
        }
    };
    if version != SCHEMA_VERSION {
        out.push(diag(
            path,
            "/schema_version".into(),
            format!("{version}: this build reads schema_version {SCHEMA_VERSION}"),
        ));
    }
    let mut ids = BTreeSet::new();
    for (i, r) in rows.iter().enumerate() {
        let at = |field: &str| format!("/prices/{i}/{field}");
        let kebab = !r.id.is_empty()
            && r.id
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
        if !kebab {
            out.push(diag(
                path,
                at("id"),
                format!("{:?} is not a lower-kebab-case id", r.id),
            ));
        }
        if r.id == OWNED_ID {
            out.push(diag(
                path,
                at("id"),
                format!("{OWNED_ID:?} is the id of the owned machine's option (recommend --owned)"),
            ));
        }
        if !ids.insert(r.id) {
            out.push(diag(path, at("id"), format!("{:?} appears twice", r.id)));
        }
        let (field, amount) = r.amount;
        if !(amount.is_finite() && amount > 0.0) {
            out.push(diag(
                path,
                at(field),
                format!("{amount} is not a price above 0"),
            ));
        }
        if let Some(m) = r.memory_gib.filter(|m| !(m.is_finite() && *m > 0.0)) {
            out.push(diag(
                path,
                at("memory_gib"),
                format!("{m} is not a memory size above 0"),
            ));
        }
        if !(1..=crate::hardware::MAX_GPUS as u32).contains(&r.gpus.count) {
            out.push(diag(
                path,
                at("gpus/count"),
                format!(
                    "{}: expected 1 to {} GPUs",
                    r.gpus.count,
                    crate::hardware::MAX_GPUS
                ),
            ));
        }
        if set.hardware(&r.gpus.profile).is_none() {
            out.push(diag(
                path,
                at("gpus/profile"),
                format!(
                    "{:?} is no hardware profile (`optimizer profiles list --kind hardware`)",
                    r.gpus.profile
                ),
            ));
        }
        if let Some(n) = r.node_profile {
            match set.node(n) {
                None => out.push(diag(
                    path,
                    at("node_profile"),
                    format!("{n:?} is no node profile (`optimizer profiles list --kind node`)"),
                )),
                Some(e)
                    if e.value.gpus.profile != r.gpus.profile
                        || e.value.gpus.count != r.gpus.count =>
                {
                    out.push(diag(
                        path,
                        at("node_profile"),
                        format!(
                            "node {n} has {} x {}, the row prices {} x {}",
                            e.value.gpus.count, e.value.gpus.profile, r.gpus.count, r.gpus.profile
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        match parse_date(r.date) {
            Err(e) => out.push(diag(path, at("date"), e.to_string())),
            Ok(d) if d > today && r.date_kind != DateKind::ValidUntil => out.push(diag(
                path,
                at("date"),
                format!(
                    "{}: after today's date; a price is dated the day it was read or published",
                    r.date
                ),
            )),
            Ok(_) => {}
        }
        if !(r.source.starts_with("https://") || r.source.starts_with("http://")) {
            out.push(diag(
                path,
                at("source"),
                format!("{:?} is not a URL", r.source),
            ));
        }
    }
    // Name the row of each defect, as the schema errors do.
    for d in &mut out {
        let mut parts = d.instance_path.trim_start_matches('/').split('/');
        if let (Some("prices"), Some(i)) = (
            parts.next(),
            parts.next().and_then(|i| i.parse::<usize>().ok()),
        ) && let Some(r) = rows.get(i)
        {
            d.message = format!("row {} (id {:?}): {}", i + 1, r.id, d.message);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_count_days_from_the_epoch_and_refuse_what_is_no_day() {
        assert_eq!(parse_date("1970-01-01"), Ok(0));
        assert_eq!(parse_date("2000-03-01"), Ok(11_017));
        assert_eq!(parse_date("2024-02-29"), Ok(19_782));
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-00-10",
            "2026-1-01",
            "26-01-01",
            "",
            "2026-01-32",
        ] {
            assert!(parse_date(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_typed_date_error_reads_as_the_string_error_it_replaced() {
        let e = parse_date("2026-13-01").unwrap_err();
        assert_eq!(
            e,
            NotADate {
                text: "2026-13-01".into()
            }
        );
        assert_eq!(e.to_string(), "\"2026-13-01\" is not a date YYYY-MM-DD");
    }

    /// The built-in tables load, validate and join against the built-in profiles.
    #[test]
    fn the_builtin_tables_are_valid() {
        let set = super::super::builtin_set().unwrap();
        let today = parse_date("2026-11-27").unwrap();
        let p = load(&set, &[], today).unwrap();
        assert!(
            p.cloud.len() > 40 && p.purchase.len() > 10,
            "{} {}",
            p.cloud.len(),
            p.purchase.len()
        );
        assert!(p.amortisation_years_default > 0.0);
    }

    /// A row without a date, with an unknown field, an unknown profile or a duplicate id is refused.
    #[test]
    fn defective_rows_are_refused() {
        let set = super::super::builtin_set().unwrap();
        let today = parse_date("2026-11-27").unwrap();
        let row = "{id: x-1, provider: aws, instance: i, region: r, pricing: spot, usd_per_hour: 1.0, gpus: {profile: h100-sxm, count: 1}, date: 2025-01-01, date_kind: read, confidence: low, source: https://e.x, source_note: n}";
        let rows = |rows: &str| {
            load(
                &set,
                &[(
                    "u.yaml".into(),
                    format!("schema_version: 1\nprices: [{rows}]"),
                )],
                today,
            )
        };
        let undated = row.replace("date: 2025-01-01, ", "");
        let e = rows(&undated).unwrap_err();
        assert!(e[0].message.contains("date"), "{e:?}");
        let extra = row.replace("region: r", "region: r, colour: red");
        assert!(rows(&extra).is_err());
        let unknown = row.replace("h100-sxm", "no-such-gpu");
        let e = rows(&unknown).unwrap_err();
        assert_eq!(e[0].instance_path, "/prices/0/gpus/profile");
        let e = rows(&format!("{row}, {row}")).unwrap_err();
        assert!(e[0].message.contains("twice"), "{e:?}");
        let future = row.replace("2025-01-01", "2027-01-01");
        assert!(rows(&future).is_err());
        let ok = rows(row).unwrap();
        assert!(ok.cloud.iter().any(|(r, p)| r.id == "x-1" && p == "u.yaml"));
    }
}
