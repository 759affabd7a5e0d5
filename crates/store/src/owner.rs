//! Who is recording a run: [`RunOwner`], stored with a run when [`Store::begin_run`](crate::Store::begin_run)
//! writes it `incomplete`, and the test `measurements prune` applies before it removes an incomplete run: is its
//! recorder provably gone, provably running, or beyond what this process can check? Reads `/proc` and asks the
//! kernel whether a pid exists (`kill(pid, 0)`, which sends nothing); touches nothing.
//!
//! **Provably gone**: recorded on this host (same host name) under another boot id (processes do not survive a
//! reboot), or under this boot and pid namespace with no such pid any more, or with that pid now held by a process
//! started at another time (a reused pid). **Provably running**: the pid exists with the recorded start time.
//! **Unknown**: another host (a database on a shared file system), another pid namespace (a container on this
//! kernel), a platform without `/proc`, or a run written before schema version 3; such a run is kept until it is
//! [`UNCHECKABLE_RUN_MAX_AGE_DAYS`] old. Trade-off: a recorder whose host name changed (or another machine that
//! carries the same name and shares the file) looks like this host rebooted or its pid died; the host name and the
//! boot id together make that a coincidence of two rare events, and the alternative, never removing a run whose
//! recorder is unverifiable, would leave every crashed run in place for a week.

/// How long `measurements prune` keeps an incomplete run whose recorder it cannot check (see the module doc):
/// a calibration or a benchmark sweep takes minutes to hours, so a run still incomplete after a week was
/// interrupted, while a shorter wait could remove a long run another machine is still recording.
pub(crate) const UNCHECKABLE_RUN_MAX_AGE_DAYS: u32 = 7;

/// The process that recorded a run, as [`Store::begin_run`](crate::Store::begin_run) stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOwner {
    /// The host name (`gethostname(2)`, the UTS namespace's).
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id`: changes at every boot.
    pub boot_id: Option<String>,
    /// The target of `/proc/self/ns/pid` (`pid:[4026531836]`): pids mean the same only within one namespace.
    pub pid_namespace: Option<String>,
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks after boot.
    pub started_ticks: Option<u64>,
}

impl RunOwner {
    /// This process.
    pub fn current() -> RunOwner {
        let pid = std::process::id();
        RunOwner {
            host: host_name(),
            boot_id: boot_id(),
            pid_namespace: pid_namespace(),
            pid,
            started_ticks: started_ticks(pid),
        }
    }
}

/// What a run's row says about its recorder (every column NULL in runs written before schema version 3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecordedOwner {
    pub(crate) host: Option<String>,
    pub(crate) boot_id: Option<String>,
    pub(crate) pid_namespace: Option<String>,
    pub(crate) pid: Option<i64>,
    pub(crate) started_ticks: Option<i64>,
}

/// Whether a run's recorder may still be writing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Its process exists with the recorded start time.
    Running(String),
    /// Provably not running any more.
    Gone,
    /// Nothing this process can check; why.
    Unknown(String),
}

/// Where `recorded`'s process stands, seen from `here` (this process).
pub(crate) fn liveness(recorded: &RecordedOwner, here: &RunOwner) -> Liveness {
    let Some(pid) = recorded.pid.and_then(|p| u32::try_from(p).ok()) else {
        return Liveness::Unknown(
            "its recorder was not recorded (a run written before schema version 3)".into(),
        );
    };
    let host = recorded.host.as_deref().unwrap_or("");
    if host != here.host {
        return Liveness::Unknown(format!(
            "recorded by pid {pid} on host {host:?}, not this one"
        ));
    }
    match (&recorded.boot_id, &here.boot_id) {
        (Some(then), Some(now)) if then != now => return Liveness::Gone,
        (Some(_), Some(_)) => {}
        _ => {
            return Liveness::Unknown(format!(
                "recorded by pid {pid} on this host, and this platform has no boot id to tell whether it rebooted since"
            ));
        }
    }
    match (&recorded.pid_namespace, &here.pid_namespace) {
        (Some(then), Some(now)) if then == now => {}
        _ => {
            return Liveness::Unknown(format!(
                "recorded by pid {pid} in another pid namespace (a container?) of this host"
            ));
        }
    }
    match process(pid) {
        Process::Absent => Liveness::Gone,
        Process::Hidden => Liveness::Unknown(format!(
            "pid {pid} exists but its start time cannot be read (another user's, behind hidepid?)"
        )),
        Process::Started(now) => match (recorded.started_ticks, now) {
            (Some(then), Some(now)) if u64::try_from(then).ok() != Some(now) => Liveness::Gone,
            _ => Liveness::Running(format!("pid {pid} on this host is still running")),
        },
    }
}

enum Process {
    /// No such pid in this namespace.
    Absent,
    /// A process exists but `/proc` does not show it.
    Hidden,
    /// It exists; its start time when `/proc` says it.
    Started(Option<u64>),
}

fn process(pid: u32) -> Process {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => Process::Started(start_of_stat(&stat)),
        Err(_) if exists(pid) == Some(false) => Process::Absent,
        Err(_) => Process::Hidden,
    }
}

/// Whether a process with this pid exists (`kill(pid, 0)`: ESRCH means none); `None` when it cannot be asked.
#[cfg(unix)]
fn exists(pid: u32) -> Option<bool> {
    let pid = libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)?;
    // SAFETY: signal 0 performs only the existence and permission checks; no signal is sent.
    let r = unsafe { libc::kill(pid, 0) };
    if r == 0 {
        return Some(true);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ESRCH) => Some(false),
        Some(libc::EPERM) => Some(true),
        _ => None,
    }
}

#[cfg(not(unix))]
fn exists(_pid: u32) -> Option<bool> {
    None
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` line; the command name (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so fields are counted after its last `)`.
fn start_of_stat(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (the state).
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

fn started_ticks(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| start_of_stat(&s))
}

/// Largest `/proc` value read here (a boot id is 36 bytes, a namespace link about 20).
const MAX_PROC_VALUE_BYTES: usize = 256;

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.len() <= MAX_PROC_VALUE_BYTES)
}

fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty() && s.len() <= MAX_PROC_VALUE_BYTES)
}

/// Longest host name POSIX lets `gethostname` return, with room for the terminating NUL.
#[cfg(unix)]
const MAX_HOST_NAME_BYTES: usize = 256;

#[cfg(unix)]
fn host_name() -> String {
    let mut buf = [0u8; MAX_HOST_NAME_BYTES];
    // SAFETY: the buffer is valid for `len` bytes; gethostname writes at most that many.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(not(unix))]
fn host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(o: &RunOwner) -> RecordedOwner {
        RecordedOwner {
            host: Some(o.host.clone()),
            boot_id: o.boot_id.clone(),
            pid_namespace: o.pid_namespace.clone(),
            pid: Some(i64::from(o.pid)),
            started_ticks: o.started_ticks.and_then(|t| i64::try_from(t).ok()),
        }
    }

    #[test]
    fn the_start_time_is_field_22_even_with_parentheses_in_the_command_name() {
        let stat =
            "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        assert_eq!(start_of_stat(stat), Some(987_654));
        assert_eq!(start_of_stat("4242 (x"), None);
    }

    #[test]
    fn this_process_is_running_and_a_run_without_an_owner_is_unknown() {
        let here = RunOwner::current();
        if here.boot_id.is_some() && here.pid_namespace.is_some() {
            assert!(matches!(
                liveness(&recorded(&here), &here),
                Liveness::Running(_)
            ));
        }
        assert!(matches!(
            liveness(&RecordedOwner::default(), &here),
            Liveness::Unknown(_)
        ));
    }

    #[test]
    fn another_boot_of_this_host_is_gone_and_another_host_is_unknown() {
        let here = RunOwner::current();
        let mut other_boot = recorded(&here);
        other_boot.boot_id = Some("00000000-0000-0000-0000-000000000000".into());
        if here.boot_id.is_some() {
            assert_eq!(liveness(&other_boot, &here), Liveness::Gone);
        }
        let mut other_host = recorded(&here);
        other_host.host = Some(format!("{}-elsewhere", here.host));
        other_host.boot_id = Some("00000000-0000-0000-0000-000000000000".into());
        assert!(matches!(liveness(&other_host, &here), Liveness::Unknown(_)));
    }

    #[test]
    fn a_dead_pid_or_a_reused_one_is_gone() {
        let here = RunOwner::current();
        if here.boot_id.is_none() || here.pid_namespace.is_none() {
            return;
        }
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mut r = recorded(&here);
        r.pid = Some(i64::from(dead));
        assert_eq!(liveness(&r, &here), Liveness::Gone);
        let mut reused = recorded(&here);
        reused.started_ticks = reused.started_ticks.map(|t| t + 1);
        assert_eq!(liveness(&reused, &here), Liveness::Gone);
    }
}
