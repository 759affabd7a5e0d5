//! The offers `recommend` ranks: each row of the price tables as a machine to plan (GPUs, node profile or an
//! illustrative host from the row) and its cost per hour, rented as charged or bought and amortised; and the
//! owned machine (`--owned`): the `--inventory` (or probed) machine at no rent or purchase.

use super::*;

/// One priced offer, before planning.
pub(super) struct Offer {
    pub(super) id: String,
    pub(super) owned: bool,
    pub(super) price: Option<PriceRef>,
    pub(super) offer: String,
    pub(super) gpus: PriceGpus,
    pub(super) node_profile: Option<String>,
    pub(super) host: HostOverride,
    pub(super) host_basis: String,
    pub(super) usd_per_hour: f64,
    pub(super) cost_basis: String,
}

/// The offers of the tables for `acquire`, each with its hourly cost and the host it is planned with.
pub(super) fn offers(
    table: &prices::Prices,
    acquire: Acquire,
    today: i64,
    notes: &mut Vec<String>,
) -> Result<Vec<Offer>, Failure> {
    let age = |date: &str| prices::parse_date(date).map_or(0, |d| today - d);
    let gib = |g: f64| (g * (1u64 << 30) as f64) as u64;
    let mut out = Vec::new();
    match acquire {
        Acquire::Rent => {
            for (r, file) in &table.cloud {
                let (host, host_basis) = match (&r.node_profile, r.vcpus, r.memory_gib) {
                    (Some(n), ..) => (HostOverride::default(), format!("node profile {n}")),
                    (None, None, None) => (
                        HostOverride::default(),
                        "not in the price row: the --inventory (or probed) host".to_string(),
                    ),
                    (None, cores, memory) => (
                        HostOverride {
                            memory_bytes: memory.map(gib),
                            cores,
                        },
                        format!(
                            "illustrative, from the price row: {}{}",
                            cores.map_or(
                                "cores of the --inventory (or probed) host".into(),
                                |c| format!("{c} vCPUs taken as cores")
                            ),
                            memory.map_or(", its memory".into(), |m| format!(", {m} GiB"))
                        ),
                    ),
                };
                out.push(Offer {
                    id: r.id.clone(),
                    owned: false,
                    price: Some(PriceRef {
                        id: r.id.clone(),
                        usd: r.usd_per_hour,
                        date: r.date.clone(),
                        date_kind: r.date_kind,
                        age_days: age(&r.date),
                        confidence: r.confidence,
                        source: r.source.clone(),
                        file: file.clone(),
                    }),
                    offer: format!(
                        "{} {} {} {}",
                        r.provider,
                        r.instance,
                        r.region,
                        serde_json::to_value(r.pricing)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default()
                    ),
                    gpus: r.gpus.clone(),
                    node_profile: r.node_profile.clone(),
                    host,
                    host_basis,
                    usd_per_hour: r.usd_per_hour,
                    cost_basis: "the price row".into(),
                });
            }
        }
        Acquire::Buy {
            amortisation_years,
            usd_per_kwh,
            utilisation,
        } => {
            let (years, years_from) = match amortisation_years {
                Some(y) => (y, "--amortisation-years"),
                None => (
                    table.amortisation_years_default,
                    "purchase.yaml's amortisation_years_default, a default, not sourced",
                ),
            };
            if usd_per_kwh.is_none() {
                notes.push("power is not priced: give --usd-per-kwh (there is no sourced default electricity price)".into());
            }
            for (r, file) in &table.purchase {
                let mut hourly = r.usd / (years * prices::HOURS_PER_YEAR);
                let mut basis = format!(
                    "{} USD / ({years} years x {} h) [{years_from}]",
                    r.usd,
                    prices::HOURS_PER_YEAR
                );
                match (usd_per_kwh, r.power_w) {
                    (Some(kwh), Some(w)) => {
                        hourly += w / 1000.0 * utilisation * kwh;
                        basis.push_str(&format!(
                            " + {w} W x {utilisation} x {kwh} USD/kWh ({})",
                            r.power_source
                        ));
                    }
                    (Some(_), None) => basis.push_str(" + power not priced (no sourced power_w)"),
                    (None, _) => basis.push_str(" + power not priced (no --usd-per-kwh)"),
                }
                let (host, host_basis) = match (&r.node_profile, r.memory_gib) {
                    (Some(n), _) => (HostOverride::default(), format!("node profile {n}")),
                    (None, Some(m)) => (
                        HostOverride {
                            memory_bytes: Some(gib(m)),
                            cores: None,
                        },
                        format!(
                            "{m} GiB from the price row; cores of the --inventory (or probed) host"
                        ),
                    ),
                    (None, None) => (
                        HostOverride::default(),
                        "the --inventory (or probed) host; the price is the GPUs' only".into(),
                    ),
                };
                out.push(Offer {
                    id: r.id.clone(),
                    owned: false,
                    price: Some(PriceRef {
                        id: r.id.clone(),
                        usd: r.usd,
                        date: r.date.clone(),
                        date_kind: r.date_kind,
                        age_days: age(&r.date),
                        confidence: r.confidence,
                        source: r.source.clone(),
                        file: file.clone(),
                    }),
                    offer: r.item.clone(),
                    gpus: r.gpus.clone(),
                    node_profile: r.node_profile.clone(),
                    host,
                    host_basis,
                    usd_per_hour: hourly,
                    cost_basis: basis,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("the price tables hold no row to rank"),
        ));
    }
    Ok(out)
}

/// The owned machine as an offer: planned as plain `resolve` plans it (no `--hardware`), at no rent or purchase;
/// with `--buy --usd-per-kwh`, its GPUs' power at the probed (or inventory) power limits, when every GPU has one.
pub(super) fn owned(sources: &Sources, acquire: Acquire) -> Result<Offer, Failure> {
    let (inv, source) = sources.inventory()?;
    let from = match &sources.inventory {
        Some((path, _)) => format!("{source} {}", path.display()),
        None => source.to_string(),
    };
    let names: Vec<&str> = inv.gpus.iter().map(|g| g.name.as_str()).collect();
    let (usd_per_hour, cost_basis) = match acquire {
        Acquire::Rent => (0.0, "owned: no rent".to_string()),
        Acquire::Buy {
            usd_per_kwh,
            utilisation,
            ..
        } => {
            let watts: Option<f64> = inv.gpus.iter().map(|g| g.power_limit_w).sum();
            match (usd_per_kwh, watts) {
                (Some(kwh), Some(w)) if !inv.gpus.is_empty() => (
                    w / 1000.0 * utilisation * kwh,
                    format!(
                        "owned: no purchase + {w} W ({from}'s GPU power limits) x {utilisation} x {kwh} USD/kWh"
                    ),
                ),
                (Some(_), _) => (
                    0.0,
                    format!(
                        "owned: no purchase + power not priced (no power limit for every GPU in the {from})"
                    ),
                ),
                (None, _) => (
                    0.0,
                    "owned: no purchase + power not priced (no --usd-per-kwh)".into(),
                ),
            }
        }
    };
    Ok(Offer {
        id: prices::OWNED_ID.into(),
        owned: true,
        price: None,
        offer: format!(
            "owned: {}{}",
            inv.cpu.model,
            if names.is_empty() {
                String::new()
            } else {
                format!(", {}", names.join(", "))
            }
        ),
        gpus: PriceGpus {
            profile: names.first().map_or("cpu".into(), |n| n.to_string()),
            count: names.len() as u32,
        },
        node_profile: None,
        host: HostOverride::default(),
        host_basis: format!("owned, from the {from}"),
        usd_per_hour,
        cost_basis,
    })
}

/// The owned machine's GPUs as its plan matched them: the profile of the first (all of them, when they are
/// alike; else the ids joined by `+`), or `cpu` when it has none.
pub(super) fn owned_gpus(doc: &Deployment) -> PriceGpus {
    let mut ids: Vec<&str> = doc
        .hardware
        .gpus
        .iter()
        .map(|g| g.profile.as_str())
        .collect();
    let count = ids.len() as u32;
    ids.dedup();
    PriceGpus {
        profile: if ids.is_empty() {
            "cpu".into()
        } else {
            ids.join("+")
        },
        count,
    }
}
