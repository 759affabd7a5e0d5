//! Validation of profile files: JSON Schema first (every error, with its instance path; a rule table against
//! the schema of its own `kind`), then the typed value, then what a schema cannot say. Per file: no NaN or
//! infinity anywhere (named by field path; JSON would read them as absent); the id is the file name in
//! lower-kebab-case; every number is positive and finite and has a source; workload numbers are within named
//! limits ([`MAX_CONCURRENCY`], [`MAX_CONTEXT_TOKENS`], …) and a typical request fits one sequence's context;
//! rule rows are within theirs ([`MAX_RESERVE_FIXED_BYTES`], reserve fractions in [0, 1)); PCI ids and compute
//! capabilities are well formed. Across files: ids are unique, rule ids are unique across every table and no
//! two rule rows answer the same query (the overlay semantics in [`super`]), a hardware profile's architecture
//! exists and its TFLOPS agree with SMs × boost clock × the architecture's per-SM rate (within
//! [`TFLOPS_TOLERANCE`]), and no device would match two profiles.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::Value;

use super::matching::{candidates, tflops};
use super::types::{
    CapabilityRange, ContextPolicy, DeviceKind, HardwareProfile, Mode, ReserveRole, ReserveTarget,
    RuleTable, RuntimeId, Vendor, WorkloadProfile,
};
use super::{Entry, Origin, ProfileKind, ProfileSet, RuleRow, SourceFile};
use crate::hardware::parse_capability;

/// Published TFLOPS and SMs × boost clock × per-SM rate agree within 5 %: vendors round, and some quote a
/// clock a few MHz off the one in their own tables.
pub const TFLOPS_TOLERANCE: f64 = 0.05;

/// Most sequences a workload may serve at once: the pinned llama.cpp refuses more (`LLAMA_MAX_SEQ` = 256 in
/// src/llama-cparams.h; llama_context throws "n_seq_max must be <= 256"), and vLLM's `max_num_seqs` defaults
/// to 256 as well. A larger preset would plan a server that does not start.
pub const MAX_CONCURRENCY: u64 = 256;

/// Longest context, per sequence, a workload may ask for (also bounds its floor, its prompt and generation
/// lengths and a training sequence): 10 Mi tokens is above the longest trained context released (Llama 4
/// Scout, 10M tokens), and times [`MAX_CONCURRENCY`] it stays below 2^32, so llama.cpp's `uint32_t n_ctx`
/// (`-c` = per-sequence context × slots) cannot wrap.
pub const MAX_CONTEXT_TOKENS: u64 = 10 * 1024 * 1024;

/// Largest training micro-batch per device, in sequences: Llama 2's whole global batch is 1,024 sequences
/// (4M tokens of 4,096); a per-device micro-batch four times that is a typo, and micro-batch ×
/// [`MAX_CONTEXT_TOKENS`] stays below 2^36 tokens.
pub const MAX_MICRO_BATCH: u64 = 4096;

/// Largest LoRA rank: a rank above the widest released hidden size (Llama 3.1 405B, 16,384) is no longer a
/// low-rank adapter.
pub const MAX_LORA_RANK: u64 = 16_384;

/// Largest SLA target in milliseconds: one hour to the first token or per output token is no service level;
/// a larger figure is a unit mistake (microseconds for milliseconds).
pub const MAX_SLA_MS: f64 = 3_600_000.0;

/// Largest fixed memory reserve per device row: 1 TiB is above any single device's memory (the largest GPUs
/// hold 192-288 GB; the largest reserve in the built-in table is 1 GiB), so a larger figure is a unit
/// mistake, and a handful of such rows still sums far inside `u64`.
pub const MAX_RESERVE_FIXED_BYTES: u64 = 1 << 40;

/// Most threads per physical core a thread rule may ask for: the widest SMT in production is 8 ways (IBM
/// POWER8-10); the bound also keeps cores × threads per core inside `u32`.
pub const MAX_THREADS_PER_CORE: u32 = 8;

/// Largest `min_gain` a kv-cache rule may state: a required gain above 10× is no threshold (absent `min_gain`
/// says "never for speed").
pub const MAX_KV_MIN_GAIN: f64 = 10.0;

/// KV cache types the pinned llama.cpp accepts for `-ctk`/`-ctv` (common/arg.cpp `kv_cache_types`).
pub const LLAMA_CPP_KV_CACHE_TYPES: &[&str] = &[
    "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1",
];

/// One problem in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub path: String,
    /// JSON pointer into the document (`/memory/bandwidth_gb_s`), empty for the whole file.
    pub instance_path: String,
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.instance_path.is_empty() {
            write!(f, "{}: {}", self.path, self.message)
        } else {
            write!(f, "{}: {}: {}", self.path, self.instance_path, self.message)
        }
    }
}

fn validator(kind: ProfileKind) -> Result<&'static jsonschema::Validator, String> {
    static HW: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    static WL: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    static RU: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    let cell = match kind {
        ProfileKind::Hardware => &HW,
        ProfileKind::Workload => &WL,
        ProfileKind::Rules => &RU,
    };
    let name = kind.schema_name();
    cell.get_or_init(|| {
        let schema = super::json_schema(kind);
        jsonschema::validator_for(&schema)
            .map_err(|e| format!("schema {name} does not compile: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The validator for one kind of rule table: the `rules` schema with its `oneOf` narrowed to the branch whose
/// `kind` is `table_kind`, so an error inside a table is reported at its instance path (`/rules/0/runtime`)
/// rather than as "not valid under any of the schemas listed in the 'oneOf' keyword". `None` for an unknown
/// kind (the full schema reports it).
fn rule_table_validator(table_kind: &str) -> Option<&'static jsonschema::Validator> {
    static BY_KIND: OnceLock<BTreeMap<String, jsonschema::Validator>> = OnceLock::new();
    BY_KIND
        .get_or_init(|| {
            let mut out = BTreeMap::new();
            let root = super::json_schema(ProfileKind::Rules);
            let branches = root
                .get("oneOf")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for branch in branches {
                let Some(kind) = branch
                    .pointer("/properties/kind/const")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                else {
                    continue;
                };
                let mut schema = branch.clone();
                if let (Some(o), Some(defs)) = (schema.as_object_mut(), root.get("$defs")) {
                    o.insert("$defs".into(), defs.clone());
                }
                if let Ok(v) = jsonschema::validator_for(&schema) {
                    out.insert(kind, v);
                }
            }
            out
        })
        .get(table_kind)
}

/// Guesses a file's kind from its content when its directory does not say.
fn sniff(v: &Value) -> Option<ProfileKind> {
    let o = v.as_object()?;
    if o.contains_key("rules") && o.contains_key("kind") {
        Some(ProfileKind::Rules)
    } else if o.contains_key("mode") || o.contains_key("objective") {
        Some(ProfileKind::Workload)
    } else if o.contains_key("vendor") || o.contains_key("memory") {
        Some(ProfileKind::Hardware)
    } else {
        None
    }
}

fn file_stem(path: &str) -> &str {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let name = name.strip_prefix("builtin:").unwrap_or(name);
    name.strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))
        .unwrap_or(name)
}

fn is_kebab(id: &str) -> bool {
    !id.is_empty()
        && id.split('-').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// Every numeric leaf of `v` with its dotted path (`memory.bandwidth_gb_s`; array items as `list.0`).
fn numbers(v: &Value, prefix: &str, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Number(n) => out.push((prefix.to_string(), n.as_f64().unwrap_or(f64::NAN))),
        Value::Object(m) => {
            for (k, x) in m {
                if k == "sources" && prefix.is_empty() {
                    continue;
                }
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                numbers(x, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                numbers(x, &format!("{prefix}.{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every non-finite float (`.nan`, `.inf`, `-.inf`) in a parsed YAML document, by dotted path. JSON has no
/// such numbers, so converting would turn them into `null`, which an optional field reads as absent.
fn non_finite(v: &serde_yaml_ng::Value, prefix: &str, out: &mut Vec<(String, f64)>) {
    use serde_yaml_ng::Value as Y;
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Y::Number(n) => {
            if let Some(x) = n.as_f64()
                && !x.is_finite()
            {
                out.push((prefix.to_string(), x));
            }
        }
        Y::Mapping(m) => {
            for (k, x) in m {
                let key = match k {
                    Y::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other)
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default(),
                };
                non_finite(x, &join(&key), out);
            }
        }
        Y::Sequence(items) => {
            for (i, x) in items.iter().enumerate() {
                non_finite(x, &join(&i.to_string()), out);
            }
        }
        Y::Tagged(t) => non_finite(&t.value, prefix, out),
        _ => {}
    }
}

fn pointer(dotted: &str) -> String {
    format!("/{}", dotted.replace('.', "/"))
}

/// Every number has a source (its path or a parent path is a key of `sources`), and every source key names a
/// field of the profile (sourcing a string such as `compute_capability` is welcome; a stale key is not).
fn check_sources(
    v: &Value,
    sources: &BTreeMap<String, String>,
    d: &mut impl FnMut(String, String),
) {
    let mut nums = Vec::new();
    numbers(v, "", &mut nums);
    let covers = |key: &str, path: &str| path == key || path.starts_with(&format!("{key}."));
    for (path, _) in &nums {
        if !sources.keys().any(|k| covers(k, path)) {
            d(
                pointer(path),
                format!(
                    "number has no source: add `sources.{path}` (or a parent path) saying where it comes from"
                ),
            );
        }
    }
    for (k, text) in sources {
        let field = k.split('.').try_fold(v, |node, seg| match node {
            Value::Object(m) => m.get(seg),
            Value::Array(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        });
        if k == "sources" || field.is_none() {
            d(
                format!("/sources/{k}"),
                format!("source for {k:?}, which is not a field of this profile"),
            );
        }
        if text.trim().is_empty() {
            d(format!("/sources/{k}"), "empty source".into());
        }
    }
}

/// Numbers must be positive and finite; `zero_ok` lists the paths where 0 is meaningful.
fn check_positive(
    v: &Value,
    allow_zero: bool,
    zero_ok: &[&str],
    d: &mut impl FnMut(String, String),
) {
    let mut nums = Vec::new();
    numbers(v, "", &mut nums);
    for (path, x) in nums {
        let allow_zero = allow_zero || zero_ok.contains(&path.as_str());
        let ok = x.is_finite() && (x > 0.0 || (allow_zero && x == 0.0));
        if !ok {
            d(
                pointer(&path),
                format!(
                    "{x} must be {}",
                    if allow_zero {
                        "non-negative"
                    } else {
                        "positive"
                    }
                ),
            );
        }
    }
}

fn check_capability(cc: Option<&str>, at: &str, d: &mut impl FnMut(String, String)) {
    if let Some(cc) = cc
        && parse_capability(cc).is_none()
    {
        d(
            at.into(),
            format!("compute capability {cc:?} is not MAJOR.MINOR"),
        );
    }
}

/// The least share of the nominal size CUDA leaves programs on a profiled GPU: the driver, ECC and firmware
/// keep a few percent (0.989 on an H100 80GB HBM3, 0.910 on a T4 and 0.915 on an L4, the lowest profiled);
/// less is a typo.
const USABLE_SHARE_MIN: f64 = 0.90;

fn check_hardware(h: &HardwareProfile, v: &Value, d: &mut impl FnMut(String, String)) {
    check_positive(v, false, &[], d);
    check_sources(v, &h.sources, d);
    if let Some(u) = h.memory.usable_bytes {
        match h.memory.size_bytes {
            Some(size) if u > size || (u as f64) < USABLE_SHARE_MIN * size as f64 => d(
                "/memory/usable_bytes".into(),
                format!(
                    "{u} bytes usable of {size}: must lie between {USABLE_SHARE_MIN} of memory.size_bytes and all of it"
                ),
            ),
            Some(_) => {}
            None => d(
                "/memory/usable_bytes".into(),
                "usable_bytes without memory.size_bytes".into(),
            ),
        }
    }
    check_capability(h.compute_capability.as_deref(), "/compute_capability", d);
    for (i, id) in h.matching.pci_ids.iter().enumerate() {
        let ok = id.len() == 9
            && id.as_bytes()[4] == b':'
            && id
                .chars()
                .enumerate()
                .all(|(j, c)| j == 4 || c.is_ascii_digit() || ('a'..='f').contains(&c));
        if !ok {
            d(
                format!("/match/pci_ids/{i}"),
                format!("{id:?} is not a lower-case PCI id `vvvv:dddd`"),
            );
        }
    }
    if h.kind == DeviceKind::Gpu && h.memory.size_bytes.is_none() {
        d(
            "/memory".into(),
            "a GPU profile needs memory.size_bytes".into(),
        );
    }
    if h.kind == DeviceKind::Gpu && h.vendor == Vendor::Nvidia && h.compute_capability.is_none() {
        d(
            "/".into(),
            "an NVIDIA GPU profile needs compute_capability".into(),
        );
    }
    if h.kind == DeviceKind::Gpu
        && h.matching.pci_ids.is_empty()
        && h.matching.name_contains.is_empty()
    {
        d(
            "/match".into(),
            "a GPU profile needs pci_ids or name_contains to be matched".into(),
        );
    }
    if h.kind == DeviceKind::Soc && !h.memory.unified {
        d(
            "/memory/unified".into(),
            "a SoC profile's memory is unified".into(),
        );
    }
}

fn check_workload(w: &WorkloadProfile, v: &Value, d: &mut impl FnMut(String, String)) {
    // Embedding and training workloads generate no tokens.
    check_positive(v, false, &["generation_tokens"], d);
    check_sources(v, &w.sources, d);
    let mut at_most = |at: &str, x: u64, max: u64, what: &str| {
        if x > max {
            d(at.into(), format!("{x} exceeds the limit of {max} {what}"));
        }
    };
    let (context_at, context) = match &w.context {
        ContextPolicy::Fixed { tokens } => (Some("/context/tokens"), Some(*tokens)),
        ContextPolicy::LargestFit { floor } => (Some("/context/floor"), Some(*floor)),
        ContextPolicy::ModelMax => (None, None),
    };
    if let (Some(at), Some(tokens)) = (context_at, context) {
        at_most(at, tokens, MAX_CONTEXT_TOKENS, "tokens per sequence");
    }
    at_most(
        "/concurrency",
        w.concurrency,
        MAX_CONCURRENCY,
        "sequences at once",
    );
    at_most(
        "/prompt_tokens",
        w.prompt_tokens,
        MAX_CONTEXT_TOKENS,
        "tokens",
    );
    at_most(
        "/generation_tokens",
        w.generation_tokens,
        MAX_CONTEXT_TOKENS,
        "tokens",
    );
    if let Some(t) = &w.training {
        at_most(
            "/training/micro_batch",
            t.micro_batch,
            MAX_MICRO_BATCH,
            "sequences",
        );
        at_most(
            "/training/sequence_length",
            t.sequence_length,
            MAX_CONTEXT_TOKENS,
            "tokens",
        );
        if let Some(r) = t.lora_rank {
            at_most("/training/lora_rank", r, MAX_LORA_RANK, "(rank)");
        }
    }
    for (at, ms) in [
        ("/sla/time_to_first_token_ms", w.sla.time_to_first_token_ms),
        (
            "/sla/time_per_output_token_ms",
            w.sla.time_per_output_token_ms,
        ),
    ] {
        if let Some(ms) = ms
            && ms > MAX_SLA_MS
        {
            d(
                at.into(),
                format!("{ms} exceeds the limit of {MAX_SLA_MS} ms"),
            );
        }
    }
    // A typical request must fit one sequence's context, or the preset plans for requests it cannot serve.
    if let (Some(at), Some(tokens)) = (context_at, context) {
        let request = w.prompt_tokens.saturating_add(w.generation_tokens);
        if request > tokens {
            d(
                at.into(),
                format!(
                    "{tokens} tokens per sequence cannot hold a typical request of prompt_tokens + generation_tokens = {request}"
                ),
            );
        }
    }
    let trains = matches!(w.mode, Mode::FineTune | Mode::Training);
    if trains != w.training.is_some() {
        d(
            "/training".into(),
            if trains {
                "a fine-tune or training workload needs a `training` section".into()
            } else {
                "only fine-tune and training workloads have a `training` section".into()
            },
        );
    }
}

fn check_rules(t: &RuleTable, v: &Value, d: &mut impl FnMut(String, String)) {
    check_positive(v, true, &[], d);
    // (row id, compute-capability range) of every row, whatever the table kind.
    let rows: Vec<(&str, Option<&super::CapabilityRange>)> = match t {
        RuleTable::Precision { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::Attention { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::GpuArchitectures { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::MemoryReserves { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::CpuThreads { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::Efficiency { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::KvCache { rules, .. } => rules.iter().map(|r| (r.id.as_str(), None)).collect(),
    };
    let mut ids = BTreeSet::new();
    for (i, (id, cc)) in rows.into_iter().enumerate() {
        if !is_kebab(id) {
            d(
                format!("/rules/{i}/id"),
                format!("rule id {id:?} is not lower-kebab-case"),
            );
        }
        if !ids.insert(id) {
            d(
                format!("/rules/{i}/id"),
                format!("duplicate rule id {id:?}"),
            );
        }
        let Some(cc) = cc else { continue };
        check_capability(
            cc.min.as_deref(),
            &format!("/rules/{i}/compute_capability/min"),
            d,
        );
        check_capability(
            cc.max.as_deref(),
            &format!("/rules/{i}/compute_capability/max"),
            d,
        );
        if let (Some(a), Some(b)) = (
            cc.min.as_deref().and_then(parse_capability),
            cc.max.as_deref().and_then(parse_capability),
        ) && a > b
        {
            d(
                format!("/rules/{i}/compute_capability"),
                "min is above max".into(),
            );
        }
    }
    // A CPU row has no compute capability; a GPU row may leave it open.
    let device_rows: Vec<(ReserveTarget, &CapabilityRange)> = match t {
        RuleTable::Precision { rules, .. } => rules
            .iter()
            .map(|r| (r.device, &r.compute_capability))
            .collect(),
        RuleTable::Attention { rules, .. } => rules
            .iter()
            .map(|r| (r.device, &r.compute_capability))
            .collect(),
        _ => Vec::new(),
    };
    for (i, (device, cc)) in device_rows.into_iter().enumerate() {
        if device == ReserveTarget::Cpu && !cc.is_open() {
            d(
                format!("/rules/{i}/compute_capability"),
                "a CPU row has no compute capability".into(),
            );
        }
    }
    match t {
        RuleTable::MemoryReserves { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if !(0.0..1.0).contains(&r.fraction) {
                    d(
                        format!("/rules/{i}/fraction"),
                        format!("{} must be in [0, 1)", r.fraction),
                    );
                }
                if r.fixed_bytes > MAX_RESERVE_FIXED_BYTES {
                    d(
                        format!("/rules/{i}/fixed_bytes"),
                        format!(
                            "{} bytes exceeds the limit of {MAX_RESERVE_FIXED_BYTES} bytes (1 TiB) for one reserve",
                            r.fixed_bytes
                        ),
                    );
                }
            }
        }
        RuleTable::KvCache { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if r.runtime == RuntimeId::LlamaCpp
                    && !LLAMA_CPP_KV_CACHE_TYPES.contains(&r.cache_type.as_str())
                {
                    d(
                        format!("/rules/{i}/cache_type"),
                        format!(
                            "{:?} is not a KV cache type of llama.cpp ({LLAMA_CPP_KV_CACHE_TYPES:?})",
                            r.cache_type
                        ),
                    );
                }
                if let Some(g) = r.min_gain
                    && !(g > 0.0 && g <= MAX_KV_MIN_GAIN)
                {
                    d(
                        format!("/rules/{i}/min_gain"),
                        format!("{g} must be in (0, {MAX_KV_MIN_GAIN}]"),
                    );
                }
            }
        }
        RuleTable::Efficiency { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if !(r.efficiency > 0.0 && r.efficiency <= 1.0) {
                    d(
                        format!("/rules/{i}/efficiency"),
                        format!("{} must be in (0, 1]", r.efficiency),
                    );
                }
            }
        }
        RuleTable::CpuThreads { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if r.threads_per_core == 0 || r.threads_per_core > MAX_THREADS_PER_CORE {
                    d(
                        format!("/rules/{i}/threads_per_core"),
                        format!(
                            "{} must be in 1..={MAX_THREADS_PER_CORE}",
                            r.threads_per_core
                        ),
                    );
                }
            }
        }
        _ => {}
    }
}

fn table_id(t: &RuleTable) -> &str {
    match t {
        RuleTable::Precision { id, .. }
        | RuleTable::Attention { id, .. }
        | RuleTable::MemoryReserves { id, .. }
        | RuleTable::CpuThreads { id, .. }
        | RuleTable::GpuArchitectures { id, .. }
        | RuleTable::Efficiency { id, .. }
        | RuleTable::KvCache { id, .. } => id,
    }
}

/// Adds `value` to `list`, replacing an entry of the same id from the built-in layer (an override) or
/// reporting a duplicate within one layer.
fn insert<T>(
    list: &mut Vec<Entry<T>>,
    value: T,
    origin: Origin,
    id: impl Fn(&T) -> &str,
    diags: &mut Vec<Diagnostic>,
) {
    let new_id = id(&value).to_string();
    if let Some(pos) = list.iter().position(|e| id(&e.value) == new_id) {
        let old = &list[pos];
        if old.origin.builtin && !origin.builtin {
            let overrides = Some(old.origin.clone());
            list[pos] = Entry {
                value,
                origin,
                overrides,
            };
        } else {
            diags.push(Diagnostic {
                path: origin.path.clone(),
                instance_path: "/id".into(),
                message: format!("duplicate id {new_id:?} (also in {})", old.origin.path),
            });
        }
        return;
    }
    list.push(Entry {
        value,
        origin,
        overrides: None,
    });
}

/// Validates files as one set. `with_builtin_rules`: when the files hold no `gpu-architectures` table, check
/// hardware TFLOPS against the built-in one (so a contributor can validate a single new profile).
pub fn validate_files(
    files: &[SourceFile],
    with_builtin_rules: bool,
) -> (ProfileSet, Vec<Diagnostic>) {
    validate_into(ProfileSet::default(), files, with_builtin_rules)
}

/// Validates `files` (user overlays) on top of `base` (the built-in set, already validated when it was built
/// and tested): every file is checked alone as [`validate_files`] does, a file whose id equals one in `base`
/// replaces it, and the checks across files run over the whole set in force, so an overlay row that
/// conflicts with a built-in one is reported at the overlay's file.
pub fn validate_overlay(base: ProfileSet, files: &[SourceFile]) -> (ProfileSet, Vec<Diagnostic>) {
    validate_into(base, files, true)
}

fn validate_into(
    mut set: ProfileSet,
    files: &[SourceFile],
    with_builtin_rules: bool,
) -> (ProfileSet, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    // Tables are added or replaced below: the book of `base`, if built, would be stale.
    set.book.take();
    for f in files {
        let path = f.origin.path.clone();
        let mut d = |instance_path: String, message: String| {
            diags.push(Diagnostic {
                path: path.clone(),
                instance_path,
                message,
            });
        };
        let yaml: serde_yaml_ng::Value = match optimizer_input::yaml::from_str(&f.text) {
            Ok(v) => v,
            Err(e) => {
                d(String::new(), format!("invalid YAML: {e}"));
                continue;
            }
        };
        let mut bad = Vec::new();
        non_finite(&yaml, "", &mut bad);
        if !bad.is_empty() {
            for (p, x) in bad {
                d(
                    pointer(&p),
                    format!(
                        "{x} is not a finite number (NaN and infinities are refused, not read as absent)"
                    ),
                );
            }
            continue;
        }
        let value: Value = match serde_json::to_value(&yaml) {
            Ok(v) => v,
            Err(e) => {
                d(String::new(), format!("invalid YAML: {e}"));
                continue;
            }
        };
        let Some(kind) = f.kind.or_else(|| sniff(&value)) else {
            d(
                String::new(),
                "cannot tell the kind of profile: put it under hardware/, workloads/ or rules/"
                    .into(),
            );
            continue;
        };
        let validator = match validator(kind) {
            Ok(v) => v,
            Err(e) => {
                d(String::new(), e);
                continue;
            }
        };
        let validator = match (kind, value.get("kind").and_then(Value::as_str)) {
            (ProfileKind::Rules, Some(k)) => rule_table_validator(k).unwrap_or(validator),
            _ => validator,
        };
        let errors: Vec<(String, String)> = validator
            .iter_errors(&value)
            .map(|e| (e.instance_path().to_string(), e.to_string()))
            .collect();
        if !errors.is_empty() {
            for (p, m) in errors {
                d(if p.is_empty() { "/".into() } else { p }, m);
            }
            continue;
        }
        let stem = file_stem(&path).to_string();
        let check_id = |id: &str, d: &mut dyn FnMut(String, String)| {
            if !is_kebab(id) {
                d("/id".into(), format!("id {id:?} is not lower-kebab-case"));
            }
            if id != stem {
                d(
                    "/id".into(),
                    format!("id {id:?} differs from the file name {stem:?}"),
                );
            }
        };
        match kind {
            ProfileKind::Hardware => match serde_json::from_value::<HardwareProfile>(value.clone())
            {
                Ok(h) => {
                    check_id(&h.id, &mut d);
                    check_hardware(&h, &value, &mut d);
                    insert(
                        &mut set.hardware,
                        h,
                        f.origin.clone(),
                        |x| &x.id,
                        &mut diags,
                    );
                }
                Err(e) => d("/".into(), e.to_string()),
            },
            ProfileKind::Workload => match serde_json::from_value::<WorkloadProfile>(value.clone())
            {
                Ok(w) => {
                    check_id(&w.id, &mut d);
                    check_workload(&w, &value, &mut d);
                    insert(
                        &mut set.workloads,
                        w,
                        f.origin.clone(),
                        |x| &x.id,
                        &mut diags,
                    );
                }
                Err(e) => d("/".into(), e.to_string()),
            },
            ProfileKind::Rules => match serde_json::from_value::<RuleTable>(value.clone()) {
                Ok(t) => {
                    check_id(table_id(&t), &mut d);
                    check_rules(&t, &value, &mut d);
                    insert(
                        &mut set.rules,
                        t,
                        f.origin.clone(),
                        |x| table_id(x),
                        &mut diags,
                    );
                }
                Err(e) => d("/".into(), e.to_string()),
            },
        }
    }
    check_set(&set, with_builtin_rules, &mut diags);
    set.rule_book();
    (set, diags)
}

/// The id of every row of a table.
fn row_ids(t: &RuleTable) -> Vec<&str> {
    fn ids<T: RuleRow>(t: &RuleTable) -> impl Iterator<Item = &str> {
        T::of(t).iter().map(T::id)
    }
    ids::<super::PrecisionRule>(t)
        .chain(ids::<super::AttentionRule>(t))
        .chain(ids::<super::ReserveRule>(t))
        .chain(ids::<super::ThreadRule>(t))
        .chain(ids::<super::ArchitectureRule>(t))
        .chain(ids::<super::EfficiencyRule>(t))
        .chain(ids::<super::KvCacheRule>(t))
        .collect()
}

/// Every row of one kind in force: (file, index in its table, row).
fn rows_of<'a, T: RuleRow + 'a>(set: &'a ProfileSet) -> Vec<(&'a str, usize, &'a T)> {
    set.rules
        .iter()
        .flat_map(|e| {
            T::of(&e.value)
                .iter()
                .enumerate()
                .map(move |(i, r)| (e.origin.path.as_str(), i, r))
        })
        .collect()
}

/// Reports every pair of rows that `clash` says would both answer one query, at the later row, naming the
/// earlier one and its file.
fn conflicts<T>(
    rows: &[(&str, usize, &T)],
    id: impl Fn(&T) -> &str,
    clash: impl Fn(&T, &T) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) {
    for (j, (path_j, index_j, b)) in rows.iter().enumerate() {
        for (path_i, _, a) in &rows[..j] {
            if let Some(why) = clash(a, b) {
                diags.push(Diagnostic {
                    path: (*path_j).to_string(),
                    instance_path: format!("/rules/{index_j}"),
                    message: format!(
                        "rule {:?} conflicts with rule {:?} in {path_i}: {why}; a query would have two answers (replace the other table by giving yours its id, or narrow one row)",
                        id(b),
                        id(a)
                    ),
                });
            }
        }
    }
}

/// Overlay semantics for rule tables, checked on the set in force (after same-id tables replaced built-in
/// ones): rule ids are unique across every table, and no two rows, in one table or in several, answer the
/// same query.
fn check_rule_set(set: &ProfileSet, diags: &mut Vec<Diagnostic>) {
    let mut seen: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (t, e) in set.rules.iter().enumerate() {
        for (i, id) in row_ids(&e.value).into_iter().enumerate() {
            match seen.get(id) {
                Some((first, path)) if *first != t => diags.push(Diagnostic {
                    path: e.origin.path.clone(),
                    instance_path: format!("/rules/{i}/id"),
                    message: format!(
                        "rule id {id:?} is also defined in {path}: provenance cites a rule by its id alone, so an id names one rule"
                    ),
                }),
                Some(_) => {} // same table: reported by the per-table check
                None => {
                    seen.insert(id, (t, e.origin.path.as_str()));
                }
            }
        }
    }
    let efficiency = rows_of::<super::EfficiencyRule>(set);
    conflicts(
        &efficiency,
        |r| &r.id,
        |a, b| {
            // A row with a capability range refines one without; two rows at the same level must not overlap.
            (a.device == b.device
                && a.runtime == b.runtime
                && a.phase == b.phase
                && a.compute_capability.is_open() == b.compute_capability.is_open()
                && a.compute_capability.overlaps(&b.compute_capability))
            .then(|| {
                format!(
                    "both give the {} {:?} efficiency on a {:?} for overlapping compute capabilities",
                    a.runtime, a.phase, a.device
                )
            })
        },
        diags,
    );
    let threads = rows_of::<super::ThreadRule>(set);
    conflicts(
        &threads,
        |r| &r.id,
        |a, b| {
            (a.objective == b.objective)
                .then(|| format!("both set threads for objective {:?}", a.objective))
        },
        diags,
    );
    let precision = rows_of::<super::PrecisionRule>(set);
    conflicts(
        &precision,
        |r| &r.id,
        |a, b| {
            (a.runtime == b.runtime
                && a.device == b.device
                && a.compute_capability.overlaps(&b.compute_capability))
            .then(|| {
                format!(
                    "both set {} precision on a {:?} for overlapping compute capabilities",
                    a.runtime, a.device
                )
            })
        },
        diags,
    );
    let attention = rows_of::<super::AttentionRule>(set);
    conflicts(
        &attention,
        |r| &r.id,
        |a, b| {
            (a.runtime == b.runtime
                && a.device == b.device
                && a.min_sequence == b.min_sequence
                && a.compute_capability.overlaps(&b.compute_capability))
            .then(|| {
                format!(
                    "both choose the {} attention kernel on a {:?} for overlapping compute capabilities and the same min_sequence",
                    a.runtime, a.device
                )
            })
        },
        diags,
    );
    let reserves = rows_of::<super::ReserveRule>(set);
    conflicts(
        &reserves,
        |r| &r.id,
        |a, b| {
            (a.role == ReserveRole::RuntimeOverhead
                && b.role == ReserveRole::RuntimeOverhead
                && a.device == b.device
                && a.runtime == b.runtime)
                .then(|| {
                    format!(
                        "both give {}'s runtime overhead on a {:?}",
                        a.runtime, a.device
                    )
                })
        },
        diags,
    );
    let kv = rows_of::<super::KvCacheRule>(set);
    conflicts(
        &kv,
        |r| &r.id,
        |a, b| {
            (a.runtime == b.runtime && a.cache_type.eq_ignore_ascii_case(&b.cache_type)).then(
                || {
                    format!(
                        "both give {}'s threshold for a {} KV cache",
                        a.runtime, a.cache_type
                    )
                },
            )
        },
        diags,
    );
}

fn check_set(set: &ProfileSet, with_builtin_rules: bool, diags: &mut Vec<Diagnostic>) {
    check_rule_set(set, diags);
    // Architecture rules: from the set, else (for a partial set) from the built-in tables.
    let builtin;
    let mut archs: Vec<&super::ArchitectureRule> = set.architectures().collect();
    if archs.is_empty() && with_builtin_rules {
        builtin = super::builtin_set().unwrap_or_default();
        archs = builtin.architectures().collect();
    }
    let mut arch_ids = BTreeSet::new();
    for a in &archs {
        arch_ids.insert(a.id.as_str());
    }
    for e in &set.hardware {
        let h = &e.value;
        let mut d = |instance_path: &str, message: String| {
            diags.push(Diagnostic {
                path: e.origin.path.clone(),
                instance_path: instance_path.into(),
                message,
            });
        };
        let Some(arch_id) = &h.architecture else {
            continue;
        };
        let Some(a) = archs.iter().find(|a| &a.id == arch_id) else {
            if !archs.is_empty() {
                d(
                    "/architecture",
                    format!(
                        "unknown architecture {arch_id:?}; the gpu-architectures rules define {:?}",
                        arch_ids
                    ),
                );
            }
            continue;
        };
        if let Some(cc) = h.compute_capability.as_deref().and_then(parse_capability)
            && !a.compute_capability.contains(cc)
        {
            d(
                "/compute_capability",
                format!(
                    "compute capability {}.{} is outside architecture {arch_id}'s range",
                    cc.0, cc.1
                ),
            );
        }
        let (Some(sms), Some(clk)) = (h.sms, h.boost_clock_mhz) else {
            continue;
        };
        let mut compare = |at: &str, stated: Option<f64>, rate: f64| {
            let Some(stated) = stated else { return };
            let derived = tflops(sms, clk, rate);
            if derived > 0.0 && ((stated - derived) / derived).abs() > TFLOPS_TOLERANCE {
                d(
                    at,
                    format!(
                        "{stated} TFLOPS disagrees with {sms} SMs × {clk} MHz × {rate} FLOP/clk/SM ({arch_id}) = {derived:.1} by more than {:.0} %",
                        TFLOPS_TOLERANCE * 100.0
                    ),
                );
            }
        };
        if let Some(t) = &h.tensor_tflops {
            compare(
                "/tensor_tflops/fp16_fp32acc",
                t.fp16_fp32acc,
                a.fp16_fp32acc_flops_per_clock_per_sm,
            );
            compare(
                "/tensor_tflops/bf16_fp32acc",
                t.bf16_fp32acc,
                a.fp16_fp32acc_flops_per_clock_per_sm,
            );
            compare(
                "/tensor_tflops/fp16_fp16acc",
                t.fp16_fp16acc,
                a.fp16_fp16acc_flops_per_clock_per_sm,
            );
        }
        if let Some(v) = &h.vector_tflops {
            compare("/vector_tflops/fp32", v.fp32, a.fp32_flops_per_clock_per_sm);
        }
    }
    // Overlapping match rules: a device described by a profile itself (its name, each of its PCI ids, its
    // memory) must match that profile and no other.
    let profiles: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    for e in &set.hardware {
        let h = &e.value;
        if h.kind != DeviceKind::Gpu {
            continue;
        }
        let memory = h.matching.memory_bytes.or(h.memory.size_bytes).unwrap_or(0);
        let pcis: Vec<Option<&str>> = if h.matching.pci_ids.is_empty() {
            vec![None]
        } else {
            h.matching
                .pci_ids
                .iter()
                .map(|s| Some(s.as_str()))
                .collect()
        };
        for pci in pcis {
            let (c, _) = candidates(profiles.iter().copied(), &h.name, pci, memory);
            let others: Vec<&str> = c
                .iter()
                .filter(|p| p.id != h.id)
                .map(|p| p.id.as_str())
                .collect();
            let msg = if !c.iter().any(|p| p.id == h.id) {
                Some(format!(
                    "a device named {:?}{} does not match this profile's own rules{}",
                    h.name,
                    pci.map(|p| format!(" with PCI id {p}")).unwrap_or_default(),
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(" (it matches {others:?})")
                    }
                ))
            } else if !others.is_empty() {
                Some(format!(
                    "match rules overlap: a device named {:?}{} also matches {others:?}",
                    h.name,
                    pci.map(|p| format!(" with PCI id {p}")).unwrap_or_default()
                ))
            } else {
                None
            };
            if let Some(message) = msg {
                diags.push(Diagnostic {
                    path: e.origin.path.clone(),
                    instance_path: "/match".into(),
                    message,
                });
            }
        }
    }
}
