//! The bundle writer's unit tests.

use super::*;

fn files(list: &[(&str, &str)]) -> BTreeMap<PathBuf, String> {
    list.iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect()
}

fn ok_writer(f: &mut File, b: &[u8]) -> io::Result<()> {
    f.write_all(b)
}

/// Every file under `dir`, by relative path, with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in fs::read_dir(dir.join(&rel)).unwrap() {
            let e = e.unwrap();
            let child = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                todo.push(child);
            } else {
                out.insert(child.clone(), fs::read(dir.join(&child)).unwrap());
            }
        }
    }
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_failure_half_way_leaves_the_old_bundle_byte_identical_and_no_staging() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let old = files(&[("deploy.yaml", "old\n"), ("ollama/Modelfile", "FROM a\n")]);
    publish(&dir, &old, &ok_writer).unwrap();
    let before = tree(&dir);
    let new = files(&[
        ("deploy.yaml", "new\n"),
        ("llama-server/command.sh", "x\n"),
        ("vllm/command.sh", "y\n"),
    ]);
    let calls = std::cell::Cell::new(0);
    let failing = |f: &mut File, b: &[u8]| {
        calls.set(calls.get() + 1);
        if calls.get() == 2 {
            return Err(io::Error::other("disk full (injected)"));
        }
        f.write_all(b)
    };
    let e = publish(&dir, &new, &failing).unwrap_err();
    assert!(
        matches!(
            e,
            BundleError::Io {
                what: "writing",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(tree(&dir), before);
    assert_eq!(names(tmp.path()), vec!["b"], "no staging directory left");
}

#[test]
fn a_previous_bundle_is_replaced_as_a_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    publish(
        &dir,
        &files(&[("deploy.yaml", "a\n"), ("ollama/Modelfile", "FROM a\n")]),
        &ok_writer,
    )
    .unwrap();
    let new = files(&[("deploy.json", "{}\n"), ("vllm/command.sh", "v\n")]);
    publish(&dir, &new, &ok_writer).unwrap();
    let mut want: BTreeMap<PathBuf, Vec<u8>> = new
        .iter()
        .map(|(p, t)| (p.clone(), t.clone().into_bytes()))
        .collect();
    want.insert(PathBuf::from(MARKER), marker_text(&new).into_bytes());
    assert_eq!(tree(&dir), want);
    assert_eq!(names(tmp.path()), vec!["b"]);
}

/// The fallback for systems and filesystems without an atomic exchange gives the same result.
#[test]
fn setting_aside_replaces_the_bundle_and_puts_it_back_on_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let old = files(&[("deploy.yaml", "a\n"), ("ollama/Modelfile", "FROM a\n")]);
    publish(&dir, &old, &ok_writer).unwrap();
    let before = tree(&dir);
    let name = OsStr::new("b");
    // The staged directory is missing: publishing fails and the old bundle is put back.
    let gone = Staging(Some(tmp.path().join("missing")));
    assert!(set_aside(gone, &dir, tmp.path(), name).is_err());
    assert_eq!(tree(&dir), before);
    assert_eq!(names(tmp.path()), vec!["b"]);
    let staging = Staging::new(tmp.path(), name).unwrap();
    let new = files(&[("deploy.yaml", "b\n")]);
    stage(staging.path(), &new, &BTreeMap::new(), &ok_writer).unwrap();
    let aside = set_aside(staging, &dir, tmp.path(), name).unwrap();
    assert_eq!(tree(&aside), before);
    discard(&aside);
    assert_eq!(names(tmp.path()), vec!["b"]);
    assert_eq!(fs::read(dir.join("deploy.yaml")).unwrap(), b"b\n");
}

/// `renameat2(RENAME_EXCHANGE)` swaps the two trees in one step (where the filesystem offers it; the
/// set-aside fallback is tested above).
#[cfg(target_os = "linux")]
#[test]
fn exchange_swaps_two_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    fs::write(a.join("x"), "a").unwrap();
    fs::write(b.join("y"), "b").unwrap();
    match exchange(&a, &b) {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            eprintln!("RENAME_EXCHANGE unsupported here: {e}")
        }
        r => {
            r.unwrap();
            assert_eq!(names(&a), vec!["y"]);
            assert_eq!(names(&b), vec!["x"]);
        }
    }
}

#[cfg(unix)]
#[test]
fn permission_bits_of_the_previous_bundle_are_kept() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let list = files(&[("deploy.yaml", "a\n"), ("x/command.sh", "c\n")]);
    publish(&dir, &list, &ok_writer).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    fs::set_permissions(dir.join("x/command.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o710)).unwrap();
    publish(&dir, &list, &ok_writer).unwrap();
    assert_eq!(mode(&dir.join("x/command.sh")), 0o750);
    assert_eq!(mode(&dir), 0o710);
    // A new bundle is not left private: it gets what `mkdir` gives.
    let fresh = tmp.path().join("c");
    publish(&fresh, &list, &ok_writer).unwrap();
    let probe = tmp.path().join("probe");
    fs::create_dir(&probe).unwrap();
    assert_eq!(mode(&fresh), mode(&probe));
}

#[test]
fn a_bundle_needs_a_directory_name_and_a_directory() {
    let list = files(&[("deploy.yaml", "a\n")]);
    for p in ["/", "../", "./"] {
        assert!(
            matches!(
                publish(Path::new(p), &list, &ok_writer),
                Err(BundleError::NoName { .. })
            ),
            "{p}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    fs::write(&file, "mine\n").unwrap();
    let e = publish(&file, &list, &ok_writer).unwrap_err();
    assert!(e.to_string().contains("a regular file"), "{e}");
    assert_eq!(fs::read(&file).unwrap(), b"mine\n");
}

#[test]
fn names_that_leave_the_directory_or_clash_are_refused() {
    for (a, r) in [
        ("..", "x"),
        ("a", "../x"),
        ("/abs", "x"),
        ("a", "/x"),
        ("", "x"),
        ("a", ""),
        ("a", "x\ny"),
        (MARKER, "x"),
    ] {
        assert!(
            matches!(bundle_path(a, r), Err(BundleError::BadName { .. })),
            "{a:?} {r:?}"
        );
    }
    assert_eq!(
        bundle_path("kubernetes", "sub/m.yaml").unwrap(),
        Path::new("kubernetes/sub/m.yaml")
    );
}

#[test]
fn a_marker_that_is_not_ours_or_lists_odd_paths_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    fs::create_dir(&dir).unwrap();
    for text in [
        "hello\nx\n".to_string(),
        format!("{MARKER_HEADER}\n../outside\n"),
        format!("{MARKER_HEADER}\n/etc/passwd\n"),
    ] {
        fs::write(dir.join(MARKER), &text).unwrap();
        assert!(
            matches!(examine(&dir), Err(BundleError::Foreign { .. })),
            "{text}"
        );
    }
}
