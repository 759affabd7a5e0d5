//! Reading a llama.cpp load log (the stderr of `llama-server` or `llama-cli`, with `-lv 4`/`--verbose` so the
//! loader's lines are printed): the buffers the engine allocated per device (`load_tensors: ... model buffer
//! size`, `llama_kv_cache: ... KV buffer size`, `llama_context: ... output buffer size`, `sched_reserve:` or
//! `graph_reserve: ... compute buffer size`, and the pre-2025 spellings `llm_load_tensors: CUDA0 buffer size`,
//! `llama_kv_cache_init:`, `llama_new_context_with_model:`), the configuration it resolved (`llama_context:
//! n_ctx`, `n_batch`, `n_ubatch`, `n_seq_max`, `flash_attn`, `kv_unified`; the KV types; `offloaded N/M
//! layers`; the load mode), the model it says it loaded (tensor count, tensor bytes), and the last
//! `memory_breakdown_print` table printed after the context was built (one printed before it is `-fit`'s
//! projection, not a measurement). Pure: takes the file's text.
//!
//! Sizes are printed in MiB with two decimals, so each buffer is known to ±0.005 MiB (about 5 KiB); they are
//! converted with integer arithmetic, rounding half up. A line that names a buffer size or a breakdown row but
//! does not read as one is skipped and counted (a log interleaved with another thread's output does that).

use std::collections::BTreeMap;

/// Most buffer lines one load prints: a load on 16 GPUs prints four kinds per device plus host copies, about
/// 100; a log with more is not one load's.
pub const MAX_BUFFER_LINES: usize = 10_000;

/// Most rows one breakdown table holds: a row per device and host buffer type, about 40 on 16 GPUs; a table
/// with more is not one load's.
pub(crate) const MAX_BREAKDOWN_ROWS: usize = 1_000;

/// Most lines that look like a buffer or breakdown line but do not read as one: a log interleaved with another
/// thread's output garbles a few; a thousand is not one load's log.
pub const MAX_MALFORMED_LINES: usize = 1_000;

/// Most characters of a malformed line kept to show it (a line can be as long as the file).
pub const MALFORMED_TEXT_CHARS: usize = 200;

/// Most distinct `llama_context:` fields: the loader prints about 20; a log with more is not one load's.
pub const MAX_CONTEXT_FIELDS: usize = 256;

const MIB: u128 = 1 << 20;
const GIB: u128 = 1 << 30;

/// What a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferKind {
    Model,
    Kv,
    Output,
    Compute,
}

/// One `... buffer size = X MiB` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Buffer {
    /// The ggml buffer type as printed: `CPU`, `CPU_Mapped`, `CPU_REPACK`, `CUDA0`, `CUDA_Host`, ...
    pub name: String,
    pub kind: BufferKind,
    pub bytes: u64,
    /// 1-based line in the log.
    pub line: usize,
}

impl Buffer {
    /// A file mapping (page cache the kernel can reclaim), not an allocation.
    pub(crate) fn is_mapped(&self) -> bool {
        self.name.ends_with("_Mapped")
    }

    /// The device the buffer lives on: [`device_of`] its name.
    pub fn device(&self) -> Option<String> {
        device_of(&self.name)
    }
}

/// The device a ggml buffer type (or a breakdown row: `Host`, `CUDA0 (RTX 4090)`) lives on, as the planner
/// names devices: `cpu` for every host buffer type, `cuda:N` for `CUDAn`, `rocm:N` for `ROCmN`, `metal:0` for
/// Metal; `None` for a backend the planner does not model (Vulkan, SYCL, ...).
pub fn device_of(name: &str) -> Option<String> {
    {
        let n = name.split_whitespace().next().unwrap_or("");
        if n.starts_with("CPU")
            || n == "Host"
            || n.ends_with("_Host")
            || n.ends_with("_Host_Mapped")
        {
            return Some("cpu".into());
        }
        let ordinal = |prefix: &str| {
            n.strip_prefix(prefix)
                .map(|r| r.strip_suffix("_Mapped").unwrap_or(r))
                .and_then(|r| r.parse::<u32>().ok())
        };
        if let Some(i) = ordinal("CUDA") {
            return Some(format!("cuda:{i}"));
        }
        if let Some(i) = ordinal("ROCm") {
            return Some(format!("rocm:{i}"));
        }
        if n == "Metal" || n == "Metal_Mapped" || ordinal("MTL").is_some() {
            return Some("metal:0".into());
        }
        None
    }
}

/// One row of a `memory_breakdown_print` table, in whole MiB as printed (floor of the bytes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BreakdownRow {
    /// `Host`, `CPU_REPACK`, `CUDA0 (NVIDIA GeForce RTX 4090)`, ...
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_mib: Option<u64>,
    pub self_mib: u64,
    pub model_mib: u64,
    pub context_mib: u64,
    pub compute_mib: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unaccounted_mib: Option<u64>,
}

/// What one load log says.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LoadLog {
    pub buffers: Vec<Buffer>,
    /// `llama_context:` fields as printed (`n_ctx`, `n_batch`, `n_ubatch`, `n_seq_max`, `flash_attn`,
    /// `kv_unified`, ...).
    pub context: BTreeMap<String, String>,
    /// `resolve_fused_ops: Flash Attention enabled|disabled`, when `flash_attn = auto` was decided later.
    pub flash_attn_resolved: Option<bool>,
    /// K and V cache types from the `llama_kv_cache: size = ...` line.
    pub type_k: Option<String>,
    pub type_v: Option<String>,
    /// `load_tensors: offloaded N/M layers to GPU`.
    pub offloaded: Option<(u32, u32)>,
    /// `load_mode = mmap|none|...` (or `mmap = true|false` in older logs).
    pub load_mode: Option<String>,
    /// `loaded meta data with K key-value pairs and N tensors from PATH`: N, PATH.
    pub tensors: Option<u64>,
    pub model_path: Option<String>,
    /// `print_info: file size = X MiB|GiB`: the tensor data's bytes, and the half-unit it is exact to.
    pub tensor_bytes: Option<(u64, u64)>,
    /// `build N (commit)`.
    pub build: Option<String>,
    /// `system_info: n_threads = N`.
    pub threads: Option<u32>,
    /// The last breakdown table printed after the context was built.
    pub breakdown: Vec<BreakdownRow>,
    /// Model loads the log holds (`loaded meta data` lines); a log of more than one is refused by the importer.
    pub loads: usize,
    /// Lines that looked like a buffer or a breakdown row but did not read as one: (line, text cut at
    /// [`MALFORMED_TEXT_CHARS`] characters).
    pub malformed: Vec<(usize, String)>,
}

/// Whether `text` looks like a llama.cpp log at all (any loader, buffer or breakdown line).
pub fn looks_like(text: &str) -> bool {
    text.lines().any(|l| {
        l.contains("buffer size =")
            || l.contains("llama_model_loader:")
            || l.contains("memory_breakdown_print:")
            || l.contains("load_tensors:")
            || l.contains("llama_server:")
            || l.contains("load_model:")
    })
}

/// `12.34` (any number of decimals) in `unit` as bytes, rounding half up; `None` unless it is a plain
/// non-negative decimal that fits.
pub(crate) fn decimal_bytes(s: &str, unit: u128) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 9 {
        return None;
    }
    let scale = 10u128.pow(u32::try_from(frac.len()).ok()?);
    let whole: u128 = int.parse().ok()?;
    let part: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let num = whole
        .checked_mul(scale)?
        .checked_add(part)?
        .checked_mul(unit)?;
    let bytes = num.checked_add(scale / 2)? / scale;
    u64::try_from(bytes).ok()
}

/// The text after the log prefix: `0.00.020.501 I load_tensors: ...` (llama-server's timestamps and level) or
/// plain `load_tensors: ...`.
fn message(line: &str) -> &str {
    let t = line.trim_start();
    let mut parts = t.splitn(3, ' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(ts), Some(level), Some(rest))
            if ts.split('.').count() == 4
                && ts
                    .split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                && matches!(level, "D" | "I" | "W" | "E") =>
        {
            rest.trim_start()
        }
        _ => t,
    }
}

/// `<fn>: <NAME> [model |KV |output |compute ]buffer size = X MiB`.
fn buffer(msg: &str, line: usize) -> Option<Buffer> {
    let (head, size) = msg.split_once("buffer size =")?;
    let (func, rest) = head.split_once(':')?;
    let mut words: Vec<&str> = rest.split_whitespace().collect();
    let kind = match words.last().copied() {
        Some("model") => Some(BufferKind::Model),
        Some("KV") => Some(BufferKind::Kv),
        Some("output") => Some(BufferKind::Output),
        Some("compute") => Some(BufferKind::Compute),
        _ => None,
    };
    if kind.is_some() {
        words.pop();
    }
    // The pre-2025 loader printed `llm_load_tensors: CUDA0 buffer size`: a model buffer.
    let kind = kind.or_else(|| {
        func.trim()
            .ends_with("load_tensors")
            .then_some(BufferKind::Model)
    })?;
    let [name] = words.as_slice() else {
        return None;
    };
    let mut size = size.split_whitespace();
    let (n, unit) = (size.next()?, size.next()?);
    let unit = match unit {
        "MiB" => MIB,
        "GiB" => GIB,
        _ => return None,
    };
    Some(Buffer {
        name: (*name).to_string(),
        kind,
        bytes: decimal_bytes(n, unit)?,
        line,
    })
}

/// `| - Host | 5 = 0 + 2 + 3 |` or `| - CUDA0 (RTX 4090) | 24080 = 1000 + (20000 = 18000 + 1000 + 1000) + 80 |`.
fn breakdown_row(msg: &str) -> Option<BreakdownRow> {
    let body = msg.split_once('|')?.1;
    let (name, nums) = body.split_once('|')?;
    let name = name.trim().strip_prefix('-')?.trim().to_string();
    let nums: Vec<u64> = nums
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if nums.len() == 7 && body.contains('(') {
        // total free (self = model + context + compute) unaccounted
        return Some(BreakdownRow {
            name,
            total_mib: Some(nums[0]),
            free_mib: Some(nums[1]),
            self_mib: nums[2],
            model_mib: nums[3],
            context_mib: nums[4],
            compute_mib: nums[5],
            unaccounted_mib: Some(nums[6]),
        });
    }
    let [self_mib, model_mib, context_mib, compute_mib] = nums.as_slice() else {
        return None;
    };
    Some(BreakdownRow {
        name,
        total_mib: None,
        free_mib: None,
        self_mib: *self_mib,
        model_mib: *model_mib,
        context_mib: *context_mib,
        compute_mib: *compute_mib,
        unaccounted_mib: None,
    })
}

/// Why a load log cannot be read or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadLogError {
    #[error("more than {MAX_BUFFER_LINES} buffer lines: not one load's log")]
    TooManyBuffers,
    /// More than [`MAX_MALFORMED_LINES`] malformed buffer or breakdown lines, the last at `line` (1-based).
    #[error(
        "line {line}: more than {MAX_MALFORMED_LINES} lines that look like buffer or breakdown lines but do not read as one: not one load's log"
    )]
    TooManyMalformed { line: usize },
    /// More than [`MAX_CONTEXT_FIELDS`] distinct `llama_context:` fields, the last at `line` (1-based).
    #[error("line {line}: more than {MAX_CONTEXT_FIELDS} llama_context fields: not one load's log")]
    TooManyContextFields { line: usize },
    /// A breakdown table grew past [`MAX_BREAKDOWN_ROWS`] at `line` (1-based).
    #[error(
        "line {line}: a memory breakdown table of more than {MAX_BREAKDOWN_ROWS} rows: not one load's log"
    )]
    TooManyBreakdownRows { line: usize },
    /// One device's buffers sum past `u64::MAX` at the buffer on `line`.
    #[error("line {line}: buffer sizes overflow")]
    BufferOverflow { line: usize },
    /// A `llama_context:` field the memory model needs is missing (or not a number).
    #[error(
        "no `llama_context: {key} = N` line (run llama-server or llama-cli with -lv 4 so the loader's lines are printed)"
    )]
    MissingContext { key: &'static str },
    /// The `which` (`K` or `V`) cache type is not one llama.cpp accepts.
    #[error("{which} cache type {name:?} is not one llama.cpp accepts")]
    CacheType { which: &'static str, name: String },
    #[error("offloaded {layers} layers: out of range")]
    Offloaded { layers: u32 },
    /// The log loaded a model of another tensor count than `model`'s.
    #[error("the log loaded a model of {logged} tensors; {model} has {have}")]
    TensorCount {
        logged: u64,
        model: String,
        have: u64,
    },
    /// The log's model holds other tensor bytes than the model given (beyond the printed precision).
    #[error(
        "the log's model holds {logged} bytes of tensors (file size, to {half_unit} bytes); the model given holds {have}"
    )]
    TensorBytes {
        logged: u64,
        half_unit: u64,
        have: u64,
    },
}

/// Reads a load log; see the module doc. Only malformed buffer and breakdown lines are counted; every other
/// line is ignored.
pub fn parse(text: &str) -> Result<LoadLog, LoadLogError> {
    let mut log = LoadLog::default();
    // The table being read, and whether a row of it came after the context was built (then it is kept when it
    // ends: a later table replaces it, so the last such table wins).
    let mut table: Option<(Vec<BreakdownRow>, bool)> = None;
    let mut context_built = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let msg = message(raw);
        if msg.contains("buffer size =") {
            if log.buffers.len() >= MAX_BUFFER_LINES {
                return Err(LoadLogError::TooManyBuffers);
            }
            match buffer(msg, n) {
                Some(b) => {
                    if b.kind == BufferKind::Compute {
                        context_built = true;
                    }
                    log.buffers.push(b);
                }
                None => malformed(&mut log, n, raw)?,
            }
            continue;
        }
        if msg.contains("memory_breakdown_print:") {
            if msg.contains("memory breakdown [MiB]") {
                keep_table(&mut log, table.take());
                table = Some((Vec::new(), false));
            } else if msg.contains("| - ") || msg.contains("|   - ") {
                match (breakdown_row(msg), table.as_mut()) {
                    (Some(row), Some((t, _))) => {
                        if t.len() >= MAX_BREAKDOWN_ROWS {
                            return Err(LoadLogError::TooManyBreakdownRows { line: n });
                        }
                        t.push(row);
                    }
                    _ => malformed(&mut log, n, raw)?,
                }
                // A projection (before the context) is replaced by the next table; the last table after the
                // context was built is the one kept.
                if context_built && let Some((_, after_context)) = table.as_mut() {
                    *after_context = true;
                }
            }
            continue;
        }
        if let Some(rest) = msg.strip_prefix("llama_context:") {
            if let Some((k, v)) = rest.split_once('=') {
                let k = k.trim();
                if !k.is_empty() && !k.contains(' ') {
                    if log.context.len() >= MAX_CONTEXT_FIELDS && !log.context.contains_key(k) {
                        return Err(LoadLogError::TooManyContextFields { line: n });
                    }
                    log.context.insert(k.to_string(), v.trim().to_string());
                }
            }
            continue;
        }
        if msg.contains("Flash Attention") && msg.starts_with("resolve_fused_ops") {
            log.flash_attn_resolved = Some(!msg.contains("disabled") && msg.contains("enabled"));
        }
        if msg.starts_with("llama_kv_cache") && msg.contains(" size = ") {
            let ty = |tag: &str| {
                msg.split_once(tag)
                    .and_then(|(_, r)| r.strip_prefix('('))
                    .and_then(|r| r.split_once(')'))
                    .map(|(t, _)| t.to_string())
            };
            log.type_k = log.type_k.take().or_else(|| ty("K "));
            log.type_v = log.type_v.take().or_else(|| ty("V "));
        }
        if let Some(r) = msg.split_once("offloaded ").map(|(_, r)| r)
            && let Some((a, b)) = r.split_once(" layers").and_then(|(f, _)| f.split_once('/'))
            && let (Ok(a), Ok(b)) = (a.trim().parse(), b.trim().parse())
        {
            log.offloaded = Some((a, b));
        }
        if let Some(r) = msg.split_once("load_mode = ").map(|(_, r)| r) {
            log.load_mode = Some(r.trim_end_matches(')').trim().to_string());
        }
        if let Some(r) = msg.strip_prefix("llama_model_loader: loaded meta data with ") {
            log.loads = log.loads.saturating_add(1);
            if let Some((_, r)) = r.split_once("pairs and ")
                && let Some((count, path)) = r.split_once(" tensors from ")
            {
                log.tensors = count.trim().parse().ok();
                let path = path.rsplit_once(" (version").map_or(path, |(p, _)| p);
                log.model_path = Some(path.trim().to_string());
            }
        }
        if let Some(r) = msg.split_once("file size   = ").map(|(_, r)| r) {
            let mut w = r.split_whitespace();
            if let (Some(x), Some(unit)) = (w.next(), w.next()) {
                let unit = match unit {
                    "MiB" => Some(MIB),
                    "GiB" => Some(GIB),
                    _ => None,
                };
                // Two decimals: exact to half a hundredth of the unit.
                if let Some(u) = unit
                    && let Some(b) = decimal_bytes(x, u)
                {
                    log.tensor_bytes = Some((b, u64::try_from(u / 200).unwrap_or(u64::MAX)));
                }
            }
        }
        // `common_params_print_info: build 1 (0c1e570) with ...` (or `build: 1 (0c1e570)` in older logs).
        if log.build.is_none()
            && (msg.contains("print_info: build ") || msg.starts_with("build: "))
            && let Some((_, r)) = msg.split_once('(')
            && let Some((commit, _)) = r.split_once(')')
        {
            log.build = Some(commit.to_string());
        }
        if let Some(r) = msg.split_once("system_info: n_threads = ").map(|(_, r)| r) {
            log.threads = r.split_whitespace().next().and_then(|t| t.parse().ok());
        }
    }
    keep_table(&mut log, table);
    Ok(log)
}

/// Counts a line that looked like a buffer or breakdown line but did not read as one, keeping its start.
fn malformed(log: &mut LoadLog, line: usize, raw: &str) -> Result<(), LoadLogError> {
    if log.malformed.len() >= MAX_MALFORMED_LINES {
        return Err(LoadLogError::TooManyMalformed { line });
    }
    let end = raw
        .char_indices()
        .nth(MALFORMED_TEXT_CHARS)
        .map_or(raw.len(), |(i, _)| i);
    log.malformed.push((line, raw[..end].to_string()));
    Ok(())
}

/// Keeps a finished breakdown table when a row of it came after the context was built (moved, not copied: a
/// copy per row made a long table quadratic).
fn keep_table(log: &mut LoadLog, table: Option<(Vec<BreakdownRow>, bool)>) {
    if let Some((rows, true)) = table {
        log.breakdown = rows;
    }
}

impl LoadLog {
    /// A `llama_context:` field as a number.
    pub fn number(&self, key: &str) -> Option<u32> {
        self.context.get(key).and_then(|v| v.parse().ok())
    }

    /// Whether flash attention ran: `enabled`/`disabled` as printed, or the later decision for `auto`.
    pub fn flash_attn(&self) -> Option<bool> {
        match self.context.get("flash_attn").map(String::as_str) {
            Some("enabled" | "1" | "true") => Some(true),
            Some("disabled" | "0" | "false") => Some(false),
            _ => self.flash_attn_resolved,
        }
    }

    /// Whether the weights were memory-mapped: the load mode, else a `_Mapped` buffer.
    pub fn mmap(&self) -> bool {
        match self.load_mode.as_deref() {
            Some(m) => m.contains("mmap"),
            None => self.buffers.iter().any(Buffer::is_mapped),
        }
    }
}

/// The engine's allocations on one device, as the log states them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceTotal {
    /// `cpu`, `cuda:0`, ...
    pub device: String,
    /// Every buffer on the device except file mappings.
    pub allocated_bytes: u64,
    /// `_Mapped` model buffers: the model file mapped, page cache rather than allocation.
    pub mapped_bytes: u64,
    pub buffers: Vec<Buffer>,
}

impl LoadLog {
    /// The buffers summed per device, in the order the devices first appear; buffers of a backend the planner
    /// does not model are returned apart.
    pub fn totals(&self) -> Result<(Vec<DeviceTotal>, Vec<&Buffer>), LoadLogError> {
        let mut totals: Vec<DeviceTotal> = Vec::new();
        let mut other = Vec::new();
        for b in &self.buffers {
            let Some(device) = b.device() else {
                other.push(b);
                continue;
            };
            let i = match totals.iter().position(|t| t.device == device) {
                Some(i) => i,
                None => {
                    totals.push(DeviceTotal {
                        device,
                        allocated_bytes: 0,
                        mapped_bytes: 0,
                        buffers: Vec::new(),
                    });
                    totals.len() - 1
                }
            };
            let t = &mut totals[i];
            let sum = if b.is_mapped() {
                &mut t.mapped_bytes
            } else {
                &mut t.allocated_bytes
            };
            *sum = sum
                .checked_add(b.bytes)
                .ok_or(LoadLogError::BufferOverflow { line: b.line })?;
            t.buffers.push(b.clone());
        }
        Ok((totals, other))
    }

    /// The llama.cpp parameters the log says the engine ran with, for the memory model: the resolved context,
    /// batch, micro-batch and sequences, flash attention, the KV types, the offloaded layers, the load mode
    /// and whether weights were repacked (a `CPU_REPACK` buffer).
    pub fn params(&self) -> Result<optimizer_memory::llama_cpp::Params, LoadLogError> {
        use optimizer_memory::llama_cpp::{CACHE_TYPES, FlashAttn, Params};
        let need = |key: &'static str| self.number(key).ok_or(LoadLogError::MissingContext { key });
        let cache = |t: &Option<String>,
                     which: &'static str|
         -> Result<optimizer_model::GgmlType, LoadLogError> {
            match t {
                None => Ok(optimizer_model::GgmlType::F16),
                Some(t) => CACHE_TYPES
                    .iter()
                    .copied()
                    .find(|c| c.name().eq_ignore_ascii_case(t))
                    .ok_or_else(|| LoadLogError::CacheType {
                        which,
                        name: t.clone(),
                    }),
            }
        };
        let gpu_buffers = self
            .buffers
            .iter()
            .any(|b| b.device().is_some_and(|d| d != "cpu"));
        let n_gpu_layers = match self.offloaded {
            Some((n, _)) => i32::try_from(n).map_err(|_| LoadLogError::Offloaded { layers: n })?,
            // No offload line: a CPU-only build or load; with GPU buffers, every layer (llama.cpp's default).
            None if gpu_buffers => -1,
            None => 0,
        };
        Ok(Params {
            n_ctx: need("n_ctx")?,
            n_batch: need("n_batch")?,
            n_ubatch: need("n_ubatch")?,
            n_parallel: self.number("n_seq_max").unwrap_or(1).max(1),
            kv_unified: self
                .context
                .get("kv_unified")
                .is_some_and(|v| v == "true" || v == "1"),
            type_k: cache(&self.type_k, "K")?,
            type_v: cache(&self.type_v, "V")?,
            flash_attn: match self.flash_attn() {
                Some(true) => FlashAttn::On,
                Some(false) => FlashAttn::Off,
                None => FlashAttn::Auto,
            },
            n_gpu_layers,
            mmap: self.mmap(),
            repack: self.buffers.iter().any(|b| b.name == "CPU_REPACK"),
            ..Params::default()
        })
    }

    /// Checks that the log is a load of `model`, where the log says: its tensor count and its tensor bytes
    /// (printed to two decimals of MiB or GiB).
    pub fn check_model(&self, model: &optimizer_model::ModelSpec) -> Result<(), LoadLogError> {
        if let Some(logged) = self.tensors {
            let have = u64::try_from(model.tensors.len()).unwrap_or(u64::MAX);
            if logged != have {
                return Err(LoadLogError::TensorCount {
                    logged,
                    model: model
                        .name
                        .as_deref()
                        .unwrap_or("the model given")
                        .to_string(),
                    have,
                });
            }
        }
        if let Some((logged, half_unit)) = self.tensor_bytes {
            let have = model.tensor_bytes();
            if have.abs_diff(logged) > half_unit {
                return Err(LoadLogError::TensorBytes {
                    logged,
                    half_unit,
                    have,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_convert_exactly_and_round_half_up() {
        assert_eq!(decimal_bytes("2.00", MIB), Some(2 << 20));
        assert_eq!(decimal_bytes("0.5", MIB), Some(1 << 19));
        // 3.26 MiB = 3418357.76 bytes.
        assert_eq!(decimal_bytes("3.26", MIB), Some(3_418_358));
        assert_eq!(decimal_bytes("4", GIB), Some(4 << 30));
        for bad in ["", ".5", "-1.0", "1e3", "1.2.3", "nan", "1.0000000001"] {
            assert_eq!(decimal_bytes(bad, MIB), None, "{bad}");
        }
        assert_eq!(decimal_bytes("99999999999999999999", GIB), None);
    }

    #[test]
    fn every_buffer_spelling_reads_with_its_device() {
        for (line, name, kind, device) in [
            (
                "0.00.020.501 I load_tensors:   CPU_Mapped model buffer size =     0.52 MiB",
                "CPU_Mapped",
                BufferKind::Model,
                Some("cpu"),
            ),
            (
                "llm_load_tensors:      CUDA0 buffer size =  4403.49 MiB",
                "CUDA0",
                BufferKind::Model,
                Some("cuda:0"),
            ),
            (
                "llama_kv_cache_init:      CUDA1 KV buffer size =    64.00 MiB",
                "CUDA1",
                BufferKind::Kv,
                Some("cuda:1"),
            ),
            (
                "llama_new_context_with_model:  CUDA_Host  output buffer size =     0.49 MiB",
                "CUDA_Host",
                BufferKind::Output,
                Some("cpu"),
            ),
            (
                "graph_reserve:      ROCm0 compute buffer size =   258.50 MiB",
                "ROCm0",
                BufferKind::Compute,
                Some("rocm:0"),
            ),
            (
                "sched_reserve:    Vulkan0 compute buffer size =   1.00 MiB",
                "Vulkan0",
                BufferKind::Compute,
                None,
            ),
        ] {
            let b = buffer(message(line), 1).unwrap_or_else(|| panic!("{line}"));
            assert_eq!((b.name.as_str(), b.kind), (name, kind), "{line}");
            assert_eq!(b.device().as_deref(), device, "{line}");
        }
        for bad in [
            "load_tensors: CPU model buffer size = lots MiB",
            "load_tensors: CPU model buffer size = 1.00 MB",
            "llama_context: two words output buffer size = 1.00 MiB",
            "no colon CPU KV buffer size = 1.00 MiB",
        ] {
            assert_eq!(buffer(message(bad), 1), None, "{bad}");
        }
    }

    #[test]
    fn breakdown_rows_read_host_and_device_forms() {
        let host = breakdown_row(
            "common_memory_breakdown_print: |   - Host               |                    5 =     0 +       2 +       3                |",
        )
        .unwrap();
        assert_eq!(
            (
                host.name.as_str(),
                host.self_mib,
                host.model_mib,
                host.context_mib,
                host.compute_mib
            ),
            ("Host", 5, 0, 2, 3)
        );
        let gpu = breakdown_row(
            "llama_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24080 = 18000 + ( 5000 =  4400 +     400 +     200) +        1080 |",
        )
        .unwrap();
        assert_eq!(gpu.name, "CUDA0 (RTX 4090)");
        assert_eq!(
            (gpu.total_mib, gpu.self_mib, gpu.unaccounted_mib),
            (Some(24080), 5000, Some(1080))
        );
    }

    #[test]
    fn a_breakdown_table_longer_than_one_loads_is_refused() {
        // A hostile log of one endless table used to copy the table at every row: hours for a few megabytes.
        let head = "sched_reserve: CPU compute buffer size = 1.00 MiB\n\
                    common_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute unaccounted |\n";
        let row = "common_memory_breakdown_print: |   - Host | 9 = 1 + 2 + 6 |\n";
        let ok = format!("{head}{}", row.repeat(MAX_BREAKDOWN_ROWS));
        assert_eq!(parse(&ok).unwrap().breakdown.len(), MAX_BREAKDOWN_ROWS);
        let e = parse(&format!("{ok}{row}")).unwrap_err();
        assert!(e.to_string().contains("more than 1000 rows"), "{e}");
    }

    #[test]
    fn the_last_table_after_the_context_is_kept_whole() {
        let head = "common_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute unaccounted |\n";
        let log = parse(&format!(
            "{head}common_memory_breakdown_print: |   - Host | 9 = 1 + 2 + 6 |\n\
             sched_reserve: CPU compute buffer size = 1.00 MiB\n\
             {head}common_memory_breakdown_print: |   - Host | 5 = 0 + 2 + 3 |\n\
             common_memory_breakdown_print: |   - CPU_REPACK | 1 = 1 + 0 + 0 |\n\
             other: line\n"
        ))
        .unwrap();
        let names: Vec<(&str, u64)> = log
            .breakdown
            .iter()
            .map(|r| (r.name.as_str(), r.self_mib))
            .collect();
        assert_eq!(names, vec![("Host", 5), ("CPU_REPACK", 1)]);
    }

    #[test]
    fn a_projection_table_before_the_context_is_not_kept() {
        let log = parse(
            "common_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute unaccounted |\n\
             common_memory_breakdown_print: |   - Host | 9 = 1 + 2 + 6 |\n\
             sched_reserve:        CPU compute buffer size =     3.26 MiB\n",
        )
        .unwrap();
        assert!(log.breakdown.is_empty());
        assert_eq!(log.buffers.len(), 1);
    }
}
