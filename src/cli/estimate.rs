//! `optimizer estimate`: llama.cpp's memory per device, with llama.cpp's own flag names so a user can paste
//! their command line (`-c`, `-b`, `-ub`, `-np`, `-fa`, `-ctk`, `-ctv`, `-ngl`, `-ts`, `-nkvo`, `-lm`, `-lzm`), and the
//! files charged beside the model: the draft model (`-md`, `-ngld`, `-ctkd`, `-ctvd`) and the multimodal projector
//! (`-mm`/`--mmproj`, `--no-mmproj-offload`). A safetensors checkpoint directory (or `--runtime vllm`, or a pasted
//! `vllm serve` line) is estimated for vLLM instead, with vLLM's flag names ([`vllm`]).

use std::ffi::OsString;
use std::fmt::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::output::human_bytes;
use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::memory::llama_cpp::{CACHE_TYPES, FlashAttn, LazyMode, Params};
use crate::model::GgmlType;

mod vllm;

/// llama-server flags a pasted command line may hold that do not change memory, and whether each takes a value:
/// `estimate` accepts them and says it ignored them (common/arg.cpp of the pinned engine names them all).
const NO_MEMORY_EFFECT: &[(&str, bool)] = &[
    ("--host", true),
    ("--port", true),
    ("-t", true),
    ("--threads", true),
    ("-tb", true),
    ("--threads-batch", true),
    ("-a", true),
    ("--alias", true),
    ("--api-key", true),
    ("--api-key-file", true),
    ("--timeout", true),
    ("--seed", true),
    ("-s", true),
    ("--temp", true),
    ("--top-k", true),
    ("--top-p", true),
    ("--min-p", true),
    ("-n", true),
    ("--n-predict", true),
    ("--chat-template", true),
    ("--log-file", true),
    ("--jinja", false),
    ("--metrics", false),
    ("--slots", false),
    ("--no-webui", false),
    ("--props", false),
    ("-v", false),
    ("--verbose", false),
    ("--log-disable", false),
    ("--no-warmup", false),
];

/// Rewrites a pasted llama-server command line for `estimate`: the flags in [`NO_MEMORY_EFFECT`] (with their
/// values) become `--ignored FLAG[=VALUE]`, which `estimate` reports, and `-ngl all|auto` become `-1` (every
/// layer; for `auto` the estimate says llama.cpp would fit the count at start-up). Only `estimate`'s own
/// arguments are touched.
fn estimate_line(args: Vec<OsString>) -> Vec<OsString> {
    let Some(at) = args.iter().position(|a| a == "estimate") else {
        return args;
    };
    let args = if vllm::is_vllm_line(&args[at + 1..]) {
        vllm::paste(args)
    } else {
        args
    };
    let mut out: Vec<OsString> = args[..=at].to_vec();
    let mut it = args.into_iter().skip(at + 1).peekable();
    while let Some(a) = it.next() {
        let Some(s) = a.to_str().map(str::to_string) else {
            out.push(a);
            continue;
        };
        let (flag, inline) = match s.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f.to_string(), Some(v.to_string())),
            _ => (s.clone(), None),
        };
        if let Some(&(_, takes)) = NO_MEMORY_EFFECT
            .iter()
            .chain(vllm::NO_MEMORY_EFFECT)
            .find(|(f, _)| *f == flag)
        {
            let value = match (takes, inline) {
                (true, Some(v)) => Some(v),
                (true, None) => it.next().and_then(|v| v.into_string().ok()),
                (false, _) => None,
            };
            out.push("--ignored".into());
            out.push(match value {
                Some(v) => format!("{flag} {v}").into(),
                None => flag.into(),
            });
            continue;
        }
        // `-ngl` and `-ngld` (common/arg.cpp `--n-gpu-layers`, `--spec-draft-ngl`) take `all` and `auto`.
        let long = if ["--n-gpu-layers", "-ngl", "--gpu-layers"].contains(&flag.as_str()) {
            Some("--n-gpu-layers")
        } else if DRAFT_NGL.contains(&flag.as_str()) {
            Some("--n-gpu-layers-draft")
        } else {
            None
        };
        if let Some(long) = long {
            // `-ngl all` takes the next token as its value, `-ngl=all` carries it.
            let separate = inline.is_none();
            let value = match inline {
                Some(v) => Some(v),
                None => it.peek().and_then(|v| v.to_str()).map(str::to_string),
            };
            if let Some(v @ ("all" | "auto")) = value.as_deref() {
                if v == "auto" {
                    out.push("--ignored".into());
                    out.push(format!("{flag} auto (llama.cpp fits the layer count to free memory at start-up; estimated with every layer on the GPUs)").into());
                }
                out.push(long.into());
                out.push("-1".into());
                if separate {
                    it.next();
                }
                continue;
            }
        }
        out.push(a);
    }
    out
}

/// The draft's `-ngld` spellings (common/arg.cpp `--spec-draft-ngl`).
const DRAFT_NGL: &[&str] = &[
    "-ngld",
    "--spec-draft-ngl",
    "--gpu-layers-draft",
    "--n-gpu-layers-draft",
];

/// llama.cpp spells several short flags with more than one letter (`-ub`, `-ngl`); clap's short flags are one
/// letter, so those tokens are rewritten to their long forms before parsing; a pasted llama-server line's flags
/// that do not change memory are set aside for `estimate` to report ([`estimate_line`]).
pub(super) fn llama_flags(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let args = estimate_line(args.collect());
    let args = args.into_iter();
    const MAP: &[(&str, &str)] = &[
        ("-ub", "--ubatch-size"),
        ("-np", "--parallel"),
        ("-fa", "--flash-attn"),
        ("-ctk", "--cache-type-k"),
        ("-ctv", "--cache-type-v"),
        ("-ngl", "--n-gpu-layers"),
        ("-ts", "--tensor-split"),
        ("-nkvo", "--no-kv-offload"),
        ("-kvu", "--kv-unified"),
        ("-lm", "--load-mode"),
        ("-md", "--model-draft"),
        ("--spec-draft-model", "--model-draft"),
        ("-ngld", "--n-gpu-layers-draft"),
        ("--spec-draft-ngl", "--n-gpu-layers-draft"),
        ("--gpu-layers-draft", "--n-gpu-layers-draft"),
        ("-ctkd", "--cache-type-k-draft"),
        ("--spec-draft-type-k", "--cache-type-k-draft"),
        ("-ctvd", "--cache-type-v-draft"),
        ("--spec-draft-type-v", "--cache-type-v-draft"),
        ("-mm", "--mmproj"),
        ("-lzm", "--lazy-mode"),
    ];
    args.map(|a| {
        let Some(s) = a.to_str() else { return a };
        for (short, long) in MAP.iter().chain(vllm::SHORT) {
            if s == *short {
                return OsString::from(*long);
            }
            if let Some(rest) = s.strip_prefix(short).and_then(|r| r.strip_prefix('=')) {
                return OsString::from(format!("{long}={rest}"));
            }
        }
        a
    })
    .collect()
}

/// llama.cpp's `-lm/--load-mode` values (common/arg.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawLoadMode {
    Auto,
    None,
    Mmap,
    Mlock,
    #[value(name = "mmap+mlock")]
    MmapMlock,
    Dio,
}

/// llama.cpp's `-lzm/--lazy-mode` values (common/arg.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawLazyMode {
    On,
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawFlashAttn {
    On,
    Off,
    Auto,
}

#[derive(Debug, Args)]
pub(super) struct RawEstimate {
    /// The model (.gguf, any shard of a split model), or a safetensors checkpoint directory for vLLM.
    #[arg(short = 'm', long)]
    model: PathBuf,
    #[command(flatten)]
    vllm: vllm::RawVllm,
    /// Context size; 0 uses the model's trained context (llama.cpp's default).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    ctx_size: u32,
    /// Logical batch size.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    batch_size: u32,
    /// Physical batch size (-ub).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    ubatch_size: u32,
    /// Parallel sequences (-np).
    #[arg(long, default_value_t = 1)]
    parallel: u32,
    /// One KV stream shared by all sequences (-kvu).
    #[arg(long = "kv-unified")]
    kv_unified: bool,
    /// Flash attention (-fa).
    #[arg(long = "flash-attn", value_enum, default_value_t = RawFlashAttn::Auto)]
    flash_attn: RawFlashAttn,
    /// K cache type (-ctk): f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1.
    #[arg(long = "cache-type-k", default_value = "f16")]
    cache_type_k: String,
    /// V cache type (-ctv).
    #[arg(long = "cache-type-v", default_value = "f16")]
    cache_type_v: String,
    /// Layers on GPUs (-ngl), the output layer counted; -1 or more than the model has: all.
    #[arg(long = "n-gpu-layers", default_value_t = -1, allow_negative_numbers = true)]
    n_gpu_layers: i32,
    /// Proportions per GPU (-ts), e.g. 3,1.
    #[arg(long = "tensor-split", value_delimiter = ',')]
    tensor_split: Vec<f64>,
    /// Keep the KV cache on the host (-nkvo).
    #[arg(long = "no-kv-offload")]
    no_kv_offload: bool,
    /// Model loading mode (-lm), as the pinned llama.cpp: `auto` and `mmap` map the file; `none`, `dio`, `mlock`
    /// read or pin the weights in memory (the pinned engine has no `--no-mmap`).
    #[arg(long = "load-mode", value_enum, default_value_t = RawLoadMode::Auto)]
    load_mode: RawLoadMode,
    /// Disable CPU weight repacking.
    #[arg(long = "no-repack")]
    no_repack: bool,
    /// Host weights skip the GPU's pinned host buffer (CPU repacking then applies with GPUs too).
    #[arg(long = "no-host")]
    no_host: bool,
    /// Keep the routed experts of the first N layers on the CPU.
    #[arg(long = "n-cpu-moe", default_value_t = 0)]
    n_cpu_moe: u32,
    /// Full-size cache for sliding-window layers.
    #[arg(long = "swa-full")]
    swa_full: bool,
    /// On-demand reading of the tensors the architecture marks (Gemma 4's per-layer embeddings): `auto` reads
    /// those above 4 GiB from disk as needed, `on` all of them, `off` none. Such tensors are reported as
    /// `lazy` (mapped page cache), not in the weights or the total.
    #[arg(long = "lazy-mode", value_enum, default_value_t = RawLazyMode::Auto)]
    lazy_mode: RawLazyMode,
    /// Speculative-decoding draft model (-md): its weights, KV cache at the target's context, output and compute
    /// are charged on the devices the engine puts them on.
    #[arg(long = "model-draft")]
    model_draft: Option<PathBuf>,
    /// The draft's layers on GPUs (-ngld); default: every layer when the machine has GPUs.
    #[arg(
        long = "n-gpu-layers-draft",
        allow_negative_numbers = true,
        requires = "model_draft"
    )]
    n_gpu_layers_draft: Option<i32>,
    /// The draft's K cache type (-ctkd; default f16).
    #[arg(long = "cache-type-k-draft", requires = "model_draft")]
    cache_type_k_draft: Option<String>,
    /// The draft's V cache type (-ctvd; default f16).
    #[arg(long = "cache-type-v-draft", requires = "model_draft")]
    cache_type_v_draft: Option<String>,
    /// Multimodal projector (-mm): its weights are charged on the first GPU (the host without GPUs or with
    /// --no-mmproj-offload), with the tokens one image takes.
    #[arg(long)]
    mmproj: Option<PathBuf>,
    /// Keep the projector on the host.
    #[arg(long = "no-mmproj-offload", requires = "mmproj")]
    no_mmproj_offload: bool,
    /// Plan for a profiled machine instead of this one: ID or Nx:ID (e.g. 2x:rtx-3090, cpu-x86-64-avx2-ddr5-dual-channel);
    /// the id in any case, or the product name `profiles list` shows ("RTX 4090").
    #[arg(long, conflicts_with = "inventory")]
    hardware: Option<String>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
    /// llama-server flags that do not change memory, set aside from a pasted command line (reported, not used).
    #[arg(long = "ignored", hide = true, allow_hyphen_values = true)]
    ignored: Vec<String>,
    /// Estimate at every value of one flag instead of one: `context` (-c from 512 by doublings to the trained
    /// context) or `parallel` (-np from 1 by doublings to 256), marking the largest that fits each device.
    /// Not with --model-draft or --mmproj (the sweep charges the model alone).
    #[arg(long, value_enum, conflicts_with_all = ["model_draft", "mmproj"])]
    sweep: Option<RawSweep>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawSweep {
    Context,
    Parallel,
}

#[derive(Debug)]
pub(super) struct Settings {
    model: PathBuf,
    params: Params,
    hardware: Option<(u32, String)>,
    format: OutputFormat,
    sweep: Option<crate::app::SweepAxis>,
    ignored: Vec<String>,
    companions: crate::app::Companions,
    /// vLLM's flags, when the estimate is vLLM's.
    vllm: Option<crate::runtime::vllm::estimate::ServeFlags>,
}

fn cache_type(flag: &str, v: &str) -> Result<GgmlType, Failure> {
    CACHE_TYPES
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(v))
        .ok_or_else(|| {
            let names: Vec<String> = CACHE_TYPES
                .iter()
                .map(|t| t.name().to_lowercase())
                .collect();
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!("{flag} {v:?} is not a cache type llama.cpp accepts"),
            )
            .hint(format!("one of: {}", names.join(", ")))
        })
}

/// `-ts` proportions that are all zero: llama.cpp then falls back to splitting by free memory, which is not
/// what a user who wrote a split meant. (Non-finite and negative values are the memory model's check,
/// `ParamError::TensorSplitValue`.)
fn tensor_split(ts: &[f64]) -> Result<Vec<f64>, Failure> {
    if !ts.is_empty() && ts.iter().all(|x| *x == 0.0) {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "-ts {}: every proportion is zero; give at least one positive share",
                ts.iter().map(f64::to_string).collect::<Vec<_>>().join(",")
            ),
        ));
    }
    Ok(ts.to_vec())
}

pub(super) fn settle(raw: RawEstimate) -> Result<Settings, Failure> {
    let hardware = match raw.hardware {
        None => None,
        Some(h) => Some(super::parse_hardware(&h)?),
    };
    let draft_type =
        |flag: &str, v: &Option<String>| v.as_deref().map(|v| cache_type(flag, v)).transpose();
    let companions = crate::app::Companions {
        draft: match raw.model_draft {
            None => None,
            Some(path) => Some(crate::app::DraftRequest {
                path,
                n_gpu_layers: raw.n_gpu_layers_draft,
                type_k: draft_type("-ctkd", &raw.cache_type_k_draft)?,
                type_v: draft_type("-ctvd", &raw.cache_type_v_draft)?,
            }),
        },
        mmproj: raw.mmproj.map(|path| crate::app::MmprojRequest {
            path,
            offload: !raw.no_mmproj_offload,
        }),
    };
    let vllm = if vllm::wanted(&raw.vllm, &raw.model) {
        Some(vllm::settle(&raw.vllm)?)
    } else {
        None
    };
    Ok(Settings {
        vllm,
        companions,
        model: raw.model,
        params: Params {
            n_ctx: raw.ctx_size,
            n_batch: raw.batch_size,
            n_ubatch: raw.ubatch_size,
            n_parallel: raw.parallel,
            kv_unified: raw.kv_unified,
            type_k: cache_type("-ctk", &raw.cache_type_k)?,
            type_v: cache_type("-ctv", &raw.cache_type_v)?,
            flash_attn: match raw.flash_attn {
                RawFlashAttn::On => FlashAttn::On,
                RawFlashAttn::Off => FlashAttn::Off,
                RawFlashAttn::Auto => FlashAttn::Auto,
            },
            n_gpu_layers: raw.n_gpu_layers,
            tensor_split: tensor_split(&raw.tensor_split)?,
            no_kv_offload: raw.no_kv_offload,
            // Only `none`, `dio` and `mlock` keep the weights out of a file mapping.
            mmap: matches!(
                raw.load_mode,
                RawLoadMode::Auto | RawLoadMode::Mmap | RawLoadMode::MmapMlock
            ),
            repack: !raw.no_repack,
            no_host: raw.no_host,
            n_cpu_moe: raw.n_cpu_moe,
            swa_full: raw.swa_full,
            lazy_mode: match raw.lazy_mode {
                RawLazyMode::On => LazyMode::On,
                RawLazyMode::Auto => LazyMode::Auto,
                RawLazyMode::Off => LazyMode::Off,
            },
        },
        hardware,
        format: raw.format,
        ignored: raw.ignored,
        sweep: raw.sweep.map(|a| match a {
            RawSweep::Context => crate::app::SweepAxis::Context,
            RawSweep::Parallel => crate::app::SweepAxis::Parallel,
        }),
    })
}

pub(super) fn run(common: &Common, s: &Settings) -> Result<(), Failure> {
    if let Some(flags) = &s.vllm {
        let mut e = crate::app::estimate_vllm(common, &s.model, s.hardware.clone(), flags)?;
        if !s.ignored.is_empty() {
            e.notes.push(format!(
                "accepted and ignored (no effect on memory): {}",
                s.ignored.join(", ")
            ));
        }
        let text = match s.format {
            OutputFormat::Table => vllm::table(&e),
            f => render(&e, f)?,
        };
        write_stdout(&text)?;
        // Exit 3 as `resolve` does when nothing fits: the estimate on stdout says vLLM's error.
        return match e.error {
            None => Ok(()),
            Some(err) => Err(Failure::new(
                exit::NO_FIT,
                anyhow::anyhow!("vLLM would not start with these flags: {err}"),
            )),
        };
    }
    let req = crate::app::EstimateRequest {
        model: s.model.clone(),
        params: s.params.clone(),
        hardware: s.hardware.clone(),
    };
    if let Some(axis) = s.sweep {
        let sweep = crate::app::estimate_sweep(common, &req, axis)?;
        let text = match s.format {
            OutputFormat::Table => sweep_table(&sweep),
            f => render(&sweep, f)?,
        };
        return write_stdout(&text);
    }
    let mut rep = crate::app::estimate_report(common, &req, &s.companions)?;
    if !s.ignored.is_empty() {
        rep.estimate.notes.push(format!(
            "accepted and ignored (no effect on memory): {}",
            s.ignored.join(", ")
        ));
    }
    let text = match s.format {
        OutputFormat::Table => table(&rep),
        f => render(&rep, f)?,
    };
    write_stdout(&text)
}

fn table(rep: &crate::app::EstimateReport) -> String {
    use super::table::{left, right};
    let e = &rep.estimate;
    let mut o = String::new();
    let r = &e.resolved;
    let _ = writeln!(
        o,
        "{} — n_ctx {} ({} per sequence × {} stream{}), n_batch {}, n_ubatch {}, flash attention {}{}",
        e.engine,
        r.n_ctx,
        r.n_ctx_seq,
        r.n_stream,
        if r.n_stream == 1 { "" } else { "s" },
        r.n_batch,
        r.n_ubatch,
        if r.flash_attn { "on" } else { "off" },
        r.swa_cells
            .map(|c| format!(", sliding-window cache {c} cells"))
            .unwrap_or_default()
    );
    // The companions' columns appear only when they were given.
    let draft = |k: usize| {
        rep.draft
            .as_ref()
            .map(|d| d.devices.get(k).map_or(0, |b| b.bytes))
    };
    let mmproj = |device: &str| {
        rep.mmproj.as_ref().map(|m| {
            if m.device == device {
                m.weights_bytes
            } else {
                0
            }
        })
    };
    let mut columns = vec![
        left("device", 8),
        right("weights", 12),
        right("repacked", 12),
        right("kv cache", 12),
        right("compute", 12),
        right("output", 12),
        right("overhead", 12),
    ];
    if rep.draft.is_some() {
        columns.push(right("draft", 12));
    }
    if rep.mmproj.is_some() {
        columns.push(right("mmproj", 12));
    }
    columns.push(right("total", 12));
    let mut devices = super::table::Table::new(&columns);
    for (k, d) in e.devices.iter().enumerate() {
        let mut cells = vec![
            d.device.clone(),
            human_bytes(d.weights_bytes),
            human_bytes(d.weights_repack_bytes),
            human_bytes(d.kv_cache_bytes),
            human_bytes(d.compute_bytes),
            human_bytes(d.output_bytes),
            human_bytes(d.overhead_bytes),
        ];
        cells.extend(
            [draft(k), mmproj(&d.device)]
                .into_iter()
                .flatten()
                .map(human_bytes),
        );
        cells.push(human_bytes(d.total_bytes));
        devices.row(cells);
    }
    // The total row: the sum under the devices' totals.
    let blanks = std::iter::repeat_n(String::new(), columns.len().saturating_sub(2));
    devices.row(
        std::iter::once("total".to_string())
            .chain(blanks)
            .chain([human_bytes(e.total_bytes)]),
    );
    o.push_str(&devices.render());
    if let Some(d) = &rep.draft {
        let _ = writeln!(
            o,
            "draft {}: -ngld {}, its own KV cache at the target's n_ctx {} (common/speculative.cpp)",
            d.path,
            if d.n_gpu_layers < 0 {
                "all".to_string()
            } else {
                d.n_gpu_layers.to_string()
            },
            r.n_ctx
        );
    }
    if let Some(m) = &rep.mmproj {
        let _ = write!(
            o,
            "mmproj {} ({}): weights {} on {}",
            m.path,
            m.projector_type
                .as_deref()
                .unwrap_or("projector type not stated"),
            human_bytes(m.weights_bytes),
            m.device
        );
        match (m.image_tokens, m.images_per_sequence) {
            (Some(t), Some(n)) => {
                let _ = writeln!(
                    o,
                    "; {}{} tokens per image: {n} image{} fill one sequence's {} tokens",
                    if t.dynamic { "up to " } else { "" },
                    t.per_image,
                    if n == 1 { "" } else { "s" },
                    r.n_ctx_seq
                );
            }
            _ => {
                let _ = writeln!(o, "; tokens per image not derived for this projector type");
            }
        }
    }
    for n in &e.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

/// The sweep as a table: one row per value, each device's total, `*` on the largest value that fits it.
fn sweep_table(sw: &crate::app::Sweep) -> String {
    use super::table::right;
    let mut o = String::new();
    let flag = match sw.axis {
        crate::app::SweepAxis::Context => "-c",
        crate::app::SweepAxis::Parallel => "-np",
    };
    let mut columns = vec![right(flag, 8)];
    columns.extend(sw.devices.iter().map(|d| right(&d.device, 13)));
    let mut rows = super::table::Table::new(&columns);
    for row in &sw.rows {
        let totals = sw.devices.iter().enumerate().map(|(i, d)| {
            let t = row.totals.get(i).copied().unwrap_or(0);
            let mark = if d.largest_fit == Some(row.value) {
                "*"
            } else {
                " "
            };
            format!("{}{mark}", human_bytes(t))
        });
        rows.row(std::iter::once(row.value.to_string()).chain(totals));
    }
    o.push_str(&rows.render());
    for d in &sw.devices {
        match (d.room_bytes, d.largest_fit) {
            (Some(r), Some(v)) => {
                let _ = writeln!(
                    o,
                    "{}: the largest that fits is {flag} {v} ({} free after the reserve rules)",
                    d.device,
                    human_bytes(r)
                );
            }
            (Some(r), None) => {
                let _ = writeln!(
                    o,
                    "{}: nothing swept fits its {} (free after the reserve rules)",
                    d.device,
                    human_bytes(r)
                );
            }
            (None, _) => {
                let _ = writeln!(o, "{}: its free memory is not known here", d.device);
            }
        }
    }
    let mut notes: Vec<&String> = sw.rows.iter().flat_map(|r| r.notes.iter()).collect();
    notes.sort();
    notes.dedup();
    for n in notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}
