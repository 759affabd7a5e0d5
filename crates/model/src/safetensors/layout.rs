//! Which files make up a safetensors model: from a shard (the whole model when an index beside it lists
//! the shard), an index, `config.json`, or a directory (preferring `model.safetensors.index.json`, then
//! `model.safetensors`, then every `*.safetensors` in it, sorted). Directory listings are bounded by
//! [`MAX_FILES`] relevant entries.

use std::path::{Path, PathBuf};

use super::index::read_index;
use super::{
    CONFIG_FILE, Defect, INDEX_FILE, INDEX_SUFFIX, Index, MAX_FILES, ModelError, SINGLE_FILE,
    WEIGHTS_SUFFIX,
};

/// Where a model's tensors are.
pub(super) struct Layout {
    pub(super) dir: PathBuf,
    pub(super) files: Vec<PathBuf>,
    /// The index and what it says, for a sharded model.
    pub(super) index: Option<(PathBuf, Index)>,
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

pub(super) fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn index_layout(index_path: &Path, index: Index) -> Layout {
    let dir = parent_dir(index_path);
    Layout {
        files: index.files.iter().map(|f| dir.join(f)).collect(),
        dir,
        index: Some((index_path.to_path_buf(), index)),
    }
}

pub(super) fn layout_of_file(path: &Path) -> Result<Layout, ModelError> {
    let name = file_name_of(path);
    let lower = name.to_ascii_lowercase();
    if lower == CONFIG_FILE {
        return layout_of_dir(&parent_dir(path));
    }
    if lower.ends_with(".json") {
        let index = read_index(path)?;
        return Ok(index_layout(path, index));
    }
    // A shard: the whole model when an index beside it lists it.
    let dir = parent_dir(path);
    for candidate in index_candidates(&dir)? {
        let index = read_index(&candidate)?;
        if index.files.binary_search(&name).is_ok() {
            return Ok(index_layout(&candidate, index));
        }
    }
    Ok(Layout {
        dir,
        files: vec![path.to_path_buf()],
        index: None,
    })
}

/// Index files in `dir`: `model.safetensors.index.json` first, then any other `*.safetensors.index.json`,
/// sorted.
fn index_candidates(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let mut others = Vec::new();
    for name in dir_names(dir)? {
        if name != INDEX_FILE && name.ends_with(INDEX_SUFFIX) {
            others.push(dir.join(name));
        }
    }
    others.sort();
    let preferred = dir.join(INDEX_FILE);
    let mut out = Vec::with_capacity(others.len() + 1);
    if preferred.is_file() {
        out.push(preferred);
    }
    out.extend(others);
    Ok(out)
}

/// Names of the plain files in `dir`, bounded by [`MAX_FILES`] relevant entries.
fn dir_names(dir: &Path) -> Result<Vec<String>, ModelError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(ModelError::io(dir))? {
        let entry = entry.map_err(ModelError::io(dir))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !(name.ends_with(WEIGHTS_SUFFIX) || name.ends_with(INDEX_SUFFIX)) {
            continue;
        }
        if out.len() as u64 >= MAX_FILES {
            return Err(ModelError::model(
                dir,
                Defect::TooMany {
                    what: "safetensors files in the directory",
                    count: out.len() as u64 + 1,
                    limit: MAX_FILES,
                },
            ));
        }
        if entry.path().is_file() {
            out.push(name);
        }
    }
    Ok(out)
}

pub(super) fn layout_of_dir(dir: &Path) -> Result<Layout, ModelError> {
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        let parsed = read_index(&index)?;
        return Ok(index_layout(&index, parsed));
    }
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        return Ok(Layout {
            dir: dir.to_path_buf(),
            files: vec![single],
            index: None,
        });
    }
    let mut files: Vec<PathBuf> = dir_names(dir)?
        .into_iter()
        .filter(|n| n.ends_with(WEIGHTS_SUFFIX))
        .map(|n| dir.join(n))
        .collect();
    if files.is_empty() {
        return Err(ModelError::model(
            dir,
            Defect::UnknownFormat(format!(
                "the directory holds no {INDEX_FILE}, no {SINGLE_FILE} and no other *.safetensors file"
            )),
        ));
    }
    files.sort();
    Ok(Layout {
        dir: dir.to_path_buf(),
        files,
        index: None,
    })
}
