//! Container limits from cgroups v2 and v1: the memory limit and CPU quota that bound what this process may use.
//!
//! Parsing is pure (file contents in, limits out) so every format quirk is tested on strings; [`read`] is the
//! only part that touches the file system, and it takes the root so tests can point it at a fake tree.

use std::path::{Path, PathBuf};

use optimizer_core::hardware::Bound;

/// Limits found for this process; `None` fields mean "no limit" (or none found).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    /// CPUs allowed by the quota (quota / period).
    pub cpus: Option<f64>,
    /// Which cgroup version set `memory_bytes`.
    pub memory_bound: Option<Bound>,
    /// Which cgroup version set `cpus`.
    pub cpu_bound: Option<Bound>,
    /// Files that exist but could not be parsed, with the reason (reported as probe notes).
    pub notes: Vec<String>,
}

/// A cgroup limit file's value: a number, or `max` (v2) / a huge sentinel (v1) meaning unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    Limit(u64),
    Unlimited,
}

/// v1 reports "no limit" as a page-rounded `LONG_MAX` (9223372036854771712); anything at or above 2^62 is
/// treated as unlimited, far beyond any machine's memory.
const V1_UNLIMITED_THRESHOLD: u64 = 1 << 62;

/// Why a cgroup limit file's contents do not read as a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CgroupError {
    /// `memory.max` or `memory.limit_in_bytes` is neither a byte count nor `max`.
    #[error("expected a byte count or \"max\", found {found:?}")]
    Memory { found: String },
    /// `cpu.max` is not two fields.
    #[error("expected \"<quota> <period>\", found {found:?}")]
    CpuMaxFields { found: String },
    #[error("quota {found:?} is not a number")]
    Quota { found: String },
    #[error("period {found:?} is not a number")]
    Period { found: String },
    #[error("period is 0")]
    ZeroPeriod,
    #[error("cfs_quota_us {found:?} is not a number")]
    CfsQuota { found: String },
    #[error("cfs_period_us {found:?} is not a number")]
    CfsPeriod { found: String },
    #[error("cfs_period_us is 0")]
    ZeroCfsPeriod,
}

/// Parses `memory.max` (v2) or `memory.limit_in_bytes` (v1).
pub(crate) fn parse_memory(text: &str) -> Result<Value, CgroupError> {
    let t = text.trim();
    if t == "max" {
        return Ok(Value::Unlimited);
    }
    let v: u64 = t.parse().map_err(|_| CgroupError::Memory {
        found: t.to_string(),
    })?;
    Ok(if v >= V1_UNLIMITED_THRESHOLD {
        Value::Unlimited
    } else {
        Value::Limit(v)
    })
}

/// Parses v2 `cpu.max`: `"<quota> <period>"` or `"max <period>"`; returns CPUs allowed.
pub(crate) fn parse_cpu_max(text: &str) -> Result<Option<f64>, CgroupError> {
    let mut it = text.split_whitespace();
    let (Some(q), Some(p), None) = (it.next(), it.next(), it.next()) else {
        return Err(CgroupError::CpuMaxFields {
            found: text.trim().to_string(),
        });
    };
    if q == "max" {
        return Ok(None);
    }
    let quota: u64 = q.parse().map_err(|_| CgroupError::Quota {
        found: q.to_string(),
    })?;
    let period: u64 = p.parse().map_err(|_| CgroupError::Period {
        found: p.to_string(),
    })?;
    if period == 0 {
        return Err(CgroupError::ZeroPeriod);
    }
    Ok(Some(quota as f64 / period as f64))
}

/// Parses v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` (quota -1 means unlimited).
pub(crate) fn parse_cpu_v1(quota: &str, period: &str) -> Result<Option<f64>, CgroupError> {
    let q: i64 = quota.trim().parse().map_err(|_| CgroupError::CfsQuota {
        found: quota.trim().to_string(),
    })?;
    if q < 0 {
        return Ok(None);
    }
    let p: u64 = period.trim().parse().map_err(|_| CgroupError::CfsPeriod {
        found: period.trim().to_string(),
    })?;
    if p == 0 {
        return Err(CgroupError::ZeroCfsPeriod);
    }
    Ok(Some(q as f64 / p as f64))
}

/// The process's cgroup paths from `/proc/self/cgroup`: the v2 path (`0::/path`) and the v1 paths of the
/// `memory` and `cpu` controllers.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Membership {
    pub v2: Option<String>,
    pub v1_memory: Option<String>,
    pub v1_cpu: Option<String>,
}

pub(crate) fn parse_proc_cgroup(text: &str) -> Membership {
    let mut m = Membership::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            m.v2 = Some(path.to_string());
        }
        for c in controllers.split(',') {
            match c {
                "memory" => m.v1_memory = Some(path.to_string()),
                "cpu" => m.v1_cpu = Some(path.to_string()),
                _ => {}
            }
        }
    }
    m
}

fn join(root: &Path, mount: &str, cg: &str, file: &str) -> PathBuf {
    root.join(mount).join(cg.trim_start_matches('/')).join(file)
}

/// Reads the limits that apply to this process. `root` is `/` in production; `proc_cgroup` the contents of
/// `/proc/self/cgroup`. Inside a container the cgroup namespace makes the path `/`, which resolves to the
/// container's own files under the mount; outside one, the path leads to the process's slice. Limits are
/// checked on the process's own cgroup and every ancestor, since a parent's limit binds its children.
pub(crate) fn read(root: &Path, proc_cgroup: &str) -> Limits {
    let m = parse_proc_cgroup(proc_cgroup);
    let mut limits = Limits::default();
    let read_file = |p: &Path| std::fs::read_to_string(p).ok();
    // Every candidate file of every ancestor, with its cgroup version; the lowest limit wins.
    let mut memory_files = Vec::new();
    let mut cpu_files = Vec::new();
    if let Some(cg) = &m.v2 {
        for dir in ancestors(cg) {
            memory_files.push((
                join(root, "sys/fs/cgroup", &dir, "memory.max"),
                Bound::CgroupV2,
            ));
            cpu_files.push((
                join(root, "sys/fs/cgroup", &dir, "cpu.max"),
                None,
                Bound::CgroupV2,
            ));
        }
    }
    if let Some(cg) = &m.v1_memory {
        for dir in ancestors(cg) {
            let p = join(root, "sys/fs/cgroup/memory", &dir, "memory.limit_in_bytes");
            memory_files.push((p, Bound::CgroupV1));
        }
    }
    if let Some(cg) = &m.v1_cpu {
        for dir in ancestors(cg) {
            let quota = join(root, "sys/fs/cgroup/cpu", &dir, "cpu.cfs_quota_us");
            let period = join(root, "sys/fs/cgroup/cpu", &dir, "cpu.cfs_period_us");
            cpu_files.push((quota, Some(period), Bound::CgroupV1));
        }
    }
    for (path, bound) in memory_files {
        let Some(text) = read_file(&path) else {
            continue;
        };
        match parse_memory(&text) {
            Ok(Value::Limit(v)) if limits.memory_bytes.is_none_or(|cur| v < cur) => {
                limits.memory_bytes = Some(v);
                limits.memory_bound = Some(bound);
            }
            Ok(_) => {}
            Err(e) => limits.notes.push(format!("{}: {e}", path.display())),
        }
    }
    for (path, period, bound) in cpu_files {
        let parsed = match &period {
            None => read_file(&path).map(|t| parse_cpu_max(&t)),
            Some(pp) => read_file(&path)
                .zip(read_file(pp))
                .map(|(q, p)| parse_cpu_v1(&q, &p)),
        };
        match parsed {
            Some(Ok(Some(c))) if limits.cpus.is_none_or(|cur| c < cur) => {
                limits.cpus = Some(c);
                limits.cpu_bound = Some(bound);
            }
            Some(Err(e)) => limits.notes.push(format!("{}: {e}", path.display())),
            _ => {}
        }
    }
    limits
}

/// `/a/b` → [`/a/b`, `/a`, `/`].
fn ancestors(cg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = cg.trim_end_matches('/').to_string();
    loop {
        out.push(if cur.is_empty() {
            "/".into()
        } else {
            cur.clone()
        });
        match cur.rfind('/') {
            Some(i) if !cur.is_empty() => cur.truncate(i),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_values() {
        assert_eq!(parse_memory("max\n"), Ok(Value::Unlimited));
        assert_eq!(parse_memory("8589934592\n"), Ok(Value::Limit(8 << 30)));
        assert_eq!(parse_memory("9223372036854771712"), Ok(Value::Unlimited));
        assert!(parse_memory("lots").is_err());
        assert!(parse_memory("-1").is_err());
        assert!(parse_memory("").is_err());
    }

    #[test]
    fn cpu_values() {
        assert_eq!(parse_cpu_max("max 100000"), Ok(None));
        assert_eq!(parse_cpu_max("200000 100000\n"), Ok(Some(2.0)));
        assert_eq!(parse_cpu_max("150000 100000"), Ok(Some(1.5)));
        assert!(parse_cpu_max("150000").is_err());
        assert!(parse_cpu_max("1 0").is_err());
        assert!(parse_cpu_max("a b").is_err());
        assert_eq!(parse_cpu_v1("-1", "100000"), Ok(None));
        assert_eq!(parse_cpu_v1("400000\n", "100000\n"), Ok(Some(4.0)));
        assert!(parse_cpu_v1("x", "100000").is_err());
        assert!(parse_cpu_v1("1", "0").is_err());
    }

    #[test]
    fn proc_cgroup_v1_and_v2() {
        let v2 = "0::/user.slice/session-1.scope\n";
        assert_eq!(
            parse_proc_cgroup(v2).v2.as_deref(),
            Some("/user.slice/session-1.scope")
        );
        let v1 = "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n";
        let m = parse_proc_cgroup(v1);
        assert_eq!(m.v1_memory.as_deref(), Some("/docker/abc"));
        assert_eq!(m.v1_cpu.as_deref(), Some("/docker/abc"));
        assert_eq!(m.v2, None);
        assert_eq!(parse_proc_cgroup("garbage\n::\n"), Membership::default());
    }

    #[test]
    fn ancestors_walk_to_root() {
        assert_eq!(ancestors("/a/b"), vec!["/a/b", "/a", "/"]);
        assert_eq!(ancestors("/"), vec!["/"]);
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn v2_limit_from_a_parent_binds_the_child() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "sys/fs/cgroup/kube/memory.max", "4294967296\n");
        write(d.path(), "sys/fs/cgroup/kube/pod/memory.max", "max\n");
        write(
            d.path(),
            "sys/fs/cgroup/kube/pod/cpu.max",
            "250000 100000\n",
        );
        let l = read(d.path(), "0::/kube/pod\n");
        assert_eq!(l.memory_bytes, Some(4 << 30));
        assert_eq!(l.cpus, Some(2.5));
        assert_eq!(l.memory_bound, Some(Bound::CgroupV2));
        assert_eq!(l.cpu_bound, Some(Bound::CgroupV2));
        assert!(l.notes.is_empty());
    }

    #[test]
    fn v1_limits_and_garbage_files_become_notes() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
            "2147483648\n",
        );
        write(
            d.path(),
            "sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us",
            "banana\n",
        );
        write(
            d.path(),
            "sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us",
            "100000\n",
        );
        let l = read(
            d.path(),
            "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n",
        );
        assert_eq!(l.memory_bytes, Some(2 << 30));
        assert_eq!(l.memory_bound, Some(Bound::CgroupV1));
        assert_eq!(l.cpus, None);
        assert_eq!(l.notes.len(), 1, "{:?}", l.notes);
        assert!(l.notes[0].contains("cfs_quota_us"));
    }

    #[test]
    fn no_cgroup_files_means_no_limits() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path(), "0::/\n"), Limits::default());
    }
}
