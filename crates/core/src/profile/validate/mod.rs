//! Validation of profile files: JSON Schema first (every error, with its instance path; a rule table against
//! the schema of its own `kind`), then the typed value, then what a schema cannot say. Per file: no NaN or
//! infinity anywhere (named by field path; JSON would read them as absent); the id is the file name in
//! lower-kebab-case; every number is positive and finite and has a source; workload numbers are within named
//! limits ([`MAX_CONCURRENCY`], [`MAX_CONTEXT_TOKENS`], …) and a typical request fits one sequence's context;
//! rule rows are within theirs ([`MAX_RESERVE_FIXED_BYTES`], reserve fractions in [0, 1)); PCI ids and compute
//! capabilities are well formed. Across files: ids are unique, rule ids are unique across every table and no
//! two rule rows answer the same query (the overlay semantics in [`super`]), a hardware profile's architecture
//! exists and its TFLOPS agree with SMs × boost clock × the architecture's per-SM rate (within
//! [`TFLOPS_TOLERANCE`]), no device would match two profiles, and a node names a GPU profile in force
//! (`node.rs`).

mod hardware;
mod node;
mod rules;
mod schema;
mod set;
mod values;
mod workload;

use serde_json::Value;

use super::types::{HardwareProfile, NodeProfile, RuleTable, WorkloadProfile};
use super::{Entry, Origin, ProfileKind, ProfileSet, SourceFile};

use hardware::check_hardware;
use node::{check_node, check_nodes};
use rules::{check_rules, table_id};
use schema::{rule_table_validator, sniff, validator};
use set::check_set;
use values::{file_stem, is_kebab, non_finite, pointer};
use workload::check_workload;

/// Published TFLOPS and SMs × boost clock × per-SM rate agree within 5 %: vendors round, and some quote a
/// clock a few MHz off the one in their own tables.
const TFLOPS_TOLERANCE: f64 = 0.05;

/// Most sequences a workload may serve at once: the pinned llama.cpp refuses more (`LLAMA_MAX_SEQ` = 256 in
/// src/llama-cparams.h; llama_context throws "n_seq_max must be <= 256"), and vLLM's `max_num_seqs` defaults
/// to 256 as well. A larger preset would plan a server that does not start.
const MAX_CONCURRENCY: u64 = 256;

/// Longest context, per sequence, a workload may ask for (also bounds its floor, its prompt and generation
/// lengths and a training sequence): 10 Mi tokens is above the longest trained context released (Llama 4
/// Scout, 10M tokens), and times [`MAX_CONCURRENCY`] it stays below 2^32, so llama.cpp's `uint32_t n_ctx`
/// (`-c` = per-sequence context × slots) cannot wrap.
pub const MAX_CONTEXT_TOKENS: u64 = 10 * 1024 * 1024;

/// Largest training micro-batch per device, in sequences: Llama 2's whole global batch is 1,024 sequences
/// (4M tokens of 4,096); a per-device micro-batch four times that is a typo, and micro-batch ×
/// [`MAX_CONTEXT_TOKENS`] stays below 2^36 tokens.
const MAX_MICRO_BATCH: u64 = 4096;

/// Largest LoRA rank: a rank above the widest released hidden size (Llama 3.1 405B, 16,384) is no longer a
/// low-rank adapter.
const MAX_LORA_RANK: u64 = 16_384;

/// Largest SLA target in milliseconds: one hour to the first token or per output token is no service level;
/// a larger figure is a unit mistake (microseconds for milliseconds).
const MAX_SLA_MS: f64 = 3_600_000.0;

/// Largest fixed memory reserve per device row: 1 TiB is above any single device's memory (the largest GPUs
/// hold 192-288 GB; the largest reserve in the built-in table is 1 GiB), so a larger figure is a unit
/// mistake, and a handful of such rows still sums far inside `u64`.
pub const MAX_RESERVE_FIXED_BYTES: u64 = 1 << 40;

/// Most threads per physical core a thread rule may ask for: the widest SMT in production is 8 ways (IBM
/// POWER8-10); the bound also keeps cores × threads per core inside `u32`.
const MAX_THREADS_PER_CORE: u32 = 8;

/// Largest `min_gain` a kv-cache rule may state: a required gain above 10× is no threshold (absent `min_gain`
/// says "never for speed").
const MAX_KV_MIN_GAIN: f64 = 10.0;

/// KV cache types the pinned llama.cpp accepts for `-ctk`/`-ctv` (common/arg.cpp `kv_cache_types`).
const LLAMA_CPP_KV_CACHE_TYPES: &[&str] = &[
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
pub(crate) fn validate_overlay(
    base: ProfileSet,
    files: &[SourceFile],
) -> (ProfileSet, Vec<Diagnostic>) {
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
                "cannot tell the kind of profile: put it under hardware/, workloads/, rules/ or nodes/"
                    .into(),
            );
            continue;
        };
        let validator = match validator(kind) {
            Ok(v) => v,
            Err(e) => {
                d(String::new(), e.to_string());
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
            ProfileKind::Node => match serde_json::from_value::<NodeProfile>(value.clone()) {
                Ok(n) => {
                    check_id(&n.id, &mut d);
                    check_node(&n, &value, &mut d);
                    insert(&mut set.nodes, n, f.origin.clone(), |x| &x.id, &mut diags);
                }
                Err(e) => d("/".into(), e.to_string()),
            },
        }
    }
    check_set(&set, with_builtin_rules, &mut diags);
    check_nodes(&set, with_builtin_rules, &mut diags);
    set.rule_book();
    (set, diags)
}
