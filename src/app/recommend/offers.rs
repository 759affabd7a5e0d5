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
    /// Nodes of the instance the offer rents or buys together (1: one machine).
    pub(super) nodes: u32,
    /// Across nodes: the fabric in words, with where it comes from.
    pub(super) fabric: Option<String>,
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
                    nodes: 1,
                    fabric: None,
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
                    nodes: 1,
                    fabric: None,
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

/// Most nodes of one instance [`multinode`] offers: 2 to 4 covers a 405B BF16 checkpoint (756 GiB) on 8x 40 GB
/// nodes and a 1T-parameter FP8 one on 8x 80 GB nodes; more nodes of the same instance only add cost to a model
/// that four already hold, and each count is a plan of its own.
pub(super) const MAX_NODES: u32 = 4;

/// Offers of 2..=[`MAX_NODES`] nodes of each priced multi-GPU instance of `offers` (the single-machine offers
/// whose one instance does not hold the model) whose node profile states the fabric between nodes, each priced as that many instances and planned with
/// `resolve --hardware NODE --nodes N`. An instance whose price row names no node profile, or whose profile
/// states no fabric, is skipped: a plan across nodes is priced by the fabric, and no figure is assumed for it.
/// The skipped instances are named in `notes`.
pub(super) fn multinode(
    offers: &[&Offer],
    set: &crate::profile::ProfileSet,
    notes: &mut Vec<String>,
) -> Vec<Offer> {
    let mut out = Vec::new();
    let (mut used, mut skipped) = (Vec::<String>::new(), Vec::<String>::new());
    let candidates: Vec<&&Offer> = offers
        .iter()
        .filter(|o| !o.owned && o.gpus.count > 1)
        .collect();
    let used_offers = candidates.len();
    for o in candidates {
        let node = o.node_profile.as_deref().and_then(|n| set.node(n));
        let Some((node, f)) = node.and_then(|n| n.value.fabric.as_ref().map(|f| (&n.value, f)))
        else {
            let why = match &o.node_profile {
                None => format!("{} (its price row names no node profile)", o.id),
                Some(n) => format!("{} (node profile {n} states no fabric)", o.id),
            };
            skipped.push(why);
            continue;
        };
        let fabric = format!(
            "{} x {} GB/s {} links per node (node profile {}: {}); {}",
            f.links_per_node,
            f.link_gb_s,
            serde_json::to_value(f.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            node.id,
            node.sources.get("fabric").map_or("sourced per figure", String::as_str),
            match f.latency_us {
                Some(l) => format!("latency {l} us"),
                None => "no latency stated: the planner prices pipeline hand-offs by bandwidth alone and does not weigh tensor parallel across nodes".into(),
            }
        );
        if !used.contains(&node.id) {
            used.push(node.id.clone());
        }
        for n in 2..=MAX_NODES {
            out.push(Offer {
                id: format!("{}-{n}-nodes", o.id),
                owned: false,
                price: o.price.clone(),
                offer: format!("{n} nodes of {}", o.offer),
                gpus: o.gpus.clone(),
                node_profile: o.node_profile.clone(),
                nodes: n,
                fabric: Some(fabric.clone()),
                host: o.host,
                host_basis: o.host_basis.clone(),
                usd_per_hour: f64::from(n) * o.usd_per_hour,
                cost_basis: format!("{n} nodes x {:.4} USD/h, {}", o.usd_per_hour, o.cost_basis),
            });
        }
    }
    if used_offers == 0 {
        return out;
    }
    let skipped = if skipped.is_empty() {
        String::new()
    } else {
        format!(
            "; skipped, with no fabric figures to plan across nodes with: {}",
            skipped.join(", ")
        )
    };
    notes.push(if used.is_empty() {
        format!(
            "multi-node: {used_offers} multi-GPU offer(s) do not hold the model on one node, and none has a node profile stating its fabric, so none is offered as several nodes{skipped}"
        )
    } else {
        format!(
            "multi-node: {used_offers} multi-GPU offer(s) do not hold the model on one node; 2 to {MAX_NODES} nodes are offered of those of node profile(s) {}, over the fabric each profile states{skipped}",
            used.join(", ")
        )
    });
    out
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
        nodes: 1,
        fabric: None,
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
