//! The filesystem a [`Plan`]'s steps write, from the build context as the
//! engine receives it, and its one layer.

use super::*;

/// The build context as the engine receives it.
pub(super) struct ContextView<'a> {
    pub(super) root: &'a Path,
    pub(super) staged: &'a [(String, PathBuf)],
    pub(super) ignore: &'a Ignore,
}

/// A COPY source.
pub(super) enum Source {
    File(SourceFile),
    /// A directory's contents: paths relative to it, parents first.
    Dir(Vec<(String, Entry)>),
}

pub(super) struct SourceFile {
    mode: u32,
    path: PathBuf,
}

pub(super) enum Entry {
    Dir { mode: u32 },
    File(SourceFile),
}

impl ContextView<'_> {
    /// The source `rel` (clean, relative) of `copy`.
    fn source(&self, copy: &CopyStep, rel: &str) -> Result<Source, Error> {
        if let Some((_, path)) = self.staged.iter().find(|(name, _)| name == rel) {
            return Ok(Source::File(SourceFile {
                mode: STAGED_MODE,
                path: path.clone(),
            }));
        }
        let not_found = || Error::NotFound {
            line: copy.line,
            instruction: copy.instruction.clone(),
            path: rel.to_string(),
            context: self.root.to_path_buf(),
        };
        // A staged file replaces a directory of the same name.
        let top = rel.split('/').next().unwrap_or(rel);
        if self.staged.iter().any(|(name, _)| name == top) {
            return Err(not_found());
        }
        let mut parent = self.root.to_path_buf();
        let parts: Vec<&str> = rel.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            parent.push(part);
            match self.metadata(copy, &parent)? {
                Some(meta) if meta.is_symlink() => {
                    return Err(needs_engine(
                        copy,
                        format!("a symlink on the way to `{rel}`"),
                    ));
                }
                Some(meta) if meta.is_dir() => {}
                _ => return Err(not_found()),
            }
        }
        let path = self.root.join(rel);
        let Some(meta) = self.metadata(copy, &path)? else {
            return Err(not_found());
        };
        let excluded = self.ignore.is_excluded(rel);
        if meta.is_dir() {
            let entries = self.walk(copy, rel)?;
            // An excluded directory is in the context only for what an
            // exception brings back inside it.
            if excluded && entries.is_empty() {
                return Err(not_found());
            }
            return Ok(Source::Dir(entries));
        }
        if excluded || !(meta.is_file() || meta.is_symlink()) {
            return Err(not_found());
        }
        if meta.is_symlink() {
            return Err(needs_engine(copy, format!("the symlink `{rel}`")));
        }
        let mode = plain_mode(copy, &meta, rel)?;
        Ok(Source::File(SourceFile { mode, path }))
    }

    /// What the context holds inside the directory `dir`, as
    /// [`super::context::pack`] packs it and the engine unpacks it.
    fn walk(&self, copy: &CopyStep, dir: &str) -> Result<Vec<(String, Entry)>, Error> {
        let path = self.root.join(dir);
        let read = |source| read_error(copy, &path, source);
        let mut names = std::fs::read_dir(&path)
            .map_err(read)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(read)?;
        names.sort();
        let mut entries = Vec::new();
        for name in names {
            let Some(name) = name.to_str() else {
                return Err(needs_engine(
                    copy,
                    format!("a file name in `{dir}` that is not UTF-8"),
                ));
            };
            let rel = format!("{dir}/{name}");
            let child = self.root.join(&rel);
            let Some(meta) = self.metadata(copy, &child)? else {
                continue;
            };
            let excluded = self.ignore.is_excluded(&rel);
            if meta.is_dir() {
                let inner = self.walk(copy, &rel)?;
                let mode = match excluded {
                    false => plain_mode(copy, &meta, &rel)?,
                    // Unpacked for what is inside it only: made on the way.
                    true if !inner.is_empty() => DIR_MODE,
                    true => continue,
                };
                entries.push((name.to_string(), Entry::Dir { mode }));
                entries.extend(inner.into_iter().map(|(p, e)| (format!("{name}/{p}"), e)));
            } else if excluded {
                continue;
            } else if meta.is_symlink() {
                return Err(needs_engine(copy, format!("the symlink `{rel}`")));
            } else if meta.is_file() {
                let mode = plain_mode(copy, &meta, &rel)?;
                entries.push((
                    name.to_string(),
                    Entry::File(SourceFile { mode, path: child }),
                ));
            }
        }
        Ok(entries)
    }

    /// `path`'s own metadata (not a symlink's target's); `None` if absent.
    fn metadata(&self, copy: &CopyStep, path: &Path) -> Result<Option<std::fs::Metadata>, Error> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(read_error(copy, path, e)),
        }
    }
}

/// The permission bits of a context file; setuid, setgid and sticky bits,
/// which the engine's ownership changes may clear, are the engine's.
pub(super) fn plain_mode(
    copy: &CopyStep,
    meta: &std::fs::Metadata,
    rel: &str,
) -> Result<u32, Error> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o7000 != 0 {
        return Err(needs_engine(copy, format!("`{rel}`, with mode {mode:o}")));
    }
    Ok(mode)
}

pub(super) fn needs_engine(copy: &CopyStep, reason: String) -> Error {
    Error::NeedsEngine(NotPlannable {
        line: Some(copy.line),
        instruction: copy.instruction.clone(),
        reason,
    })
}

pub(super) fn read_error(copy: &CopyStep, path: &Path, source: std::io::Error) -> Error {
    Error::Read {
        line: copy.line,
        instruction: copy.instruction.clone(),
        path: path.to_path_buf(),
        source,
    }
}

/// Carries out one COPY: finds every source first, as the engine does,
/// then copies them in order.
pub(super) fn apply_copy(
    tree: &mut Tree,
    view: &ContextView<'_>,
    copy: &CopyStep,
) -> Result<(), Error> {
    let sources = copy
        .sources
        .iter()
        .map(|rel| view.source(copy, rel))
        .collect::<Result<Vec<_>, _>>()?;
    let not_a_directory = |path| Error::NotADirectory {
        line: copy.line,
        instruction: copy.instruction.clone(),
        path,
    };
    let dest = &copy.dest[1..];
    for (rel, source) in copy.sources.iter().zip(sources) {
        match source {
            Source::File(file) => {
                let name = rel.rsplit('/').next().unwrap_or(rel);
                let target = match copy.dest_is_dir || tree.is_dir(dest) {
                    true => join(dest, name),
                    false => dest.to_string(),
                };
                let parent = target.rsplit_once('/').map_or("", |(parent, _)| parent);
                tree.mkdir_all(parent, DIR_MODE, copy.owner)
                    .map_err(not_a_directory)?;
                let contents = read(copy, &file.path)?;
                tree.put(target, Node::file(file.mode, copy.owner, contents));
            }
            Source::Dir(entries) => copy_dir(tree, copy, dest, entries)?,
        }
    }
    Ok(())
}

/// Copies a directory's contents into `dest`, merged with what is there.
pub(super) fn copy_dir(
    tree: &mut Tree,
    copy: &CopyStep,
    dest: &str,
    entries: Vec<(String, Entry)>,
) -> Result<(), Error> {
    let existed = tree.is_dir(dest);
    tree.mkdir_all(dest, DIR_MODE, (0, 0))
        .map_err(|path| Error::NotADirectory {
            line: copy.line,
            instruction: copy.instruction.clone(),
            path,
        })?;
    if !existed && let Some(node) = tree.nodes.get_mut(dest) {
        node.owner = copy.owner;
    }
    for (rel, entry) in entries {
        let path = join(dest, &rel);
        match entry {
            Entry::Dir { mode } => match tree.nodes.get_mut(&path) {
                Some(node) if node.contents.is_none() => {
                    node.mode = mode;
                    node.owner = copy.owner;
                }
                _ => tree.put(path, Node::dir(mode, copy.owner)),
            },
            Entry::File(file) => {
                let contents = read(copy, &file.path)?;
                tree.put(path, Node::file(file.mode, copy.owner, contents));
            }
        }
    }
    Ok(())
}

pub(super) fn read(copy: &CopyStep, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| read_error(copy, path, e))
}

/// `dir/name`, or `name` at the root (`dir` empty).
pub(super) fn join(dir: &str, name: &str) -> String {
    match dir.is_empty() {
        true => name.to_string(),
        false => format!("{dir}/{name}"),
    }
}

/// The image's filesystem: relative paths (`app/server`) to what is there;
/// the root is implicit.
#[derive(Default)]
pub(super) struct Tree {
    pub(super) nodes: BTreeMap<String, Node>,
}

pub(super) struct Node {
    mode: u32,
    owner: (u32, u32),
    /// A file's bytes; `None` for a directory.
    contents: Option<Vec<u8>>,
}

impl Node {
    fn dir(mode: u32, owner: (u32, u32)) -> Node {
        Node {
            mode,
            owner,
            contents: None,
        }
    }

    fn file(mode: u32, owner: (u32, u32), contents: Vec<u8>) -> Node {
        Node {
            mode,
            owner,
            contents: Some(contents),
        }
    }
}

impl Tree {
    fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || self.nodes.get(path).is_some_and(|n| n.contents.is_none())
    }

    /// Creates `path` and its parents where missing, with `mode` and
    /// `owner`; the path of a file in the way is the error.
    pub(super) fn mkdir_all(
        &mut self,
        path: &str,
        mode: u32,
        owner: (u32, u32),
    ) -> Result<(), String> {
        if path.is_empty() {
            return Ok(());
        }
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            match self.nodes.get(&prefix) {
                Some(node) if node.contents.is_some() => return Err(prefix),
                Some(_) => {}
                None => {
                    self.nodes.insert(prefix.clone(), Node::dir(mode, owner));
                }
            }
        }
        Ok(())
    }

    /// Puts `node` at `path`, replacing whatever was there, a directory
    /// with everything in it.
    fn put(&mut self, path: String, node: Node) {
        let inside = format!("{path}/");
        let doomed: Vec<String> = self
            .nodes
            .range(inside.clone()..)
            .take_while(|(key, _)| key.starts_with(&inside))
            .map(|(key, _)| key.clone())
            .collect();
        for key in doomed {
            self.nodes.remove(&key);
        }
        self.nodes.insert(path, node);
    }
}

/// The gzip-compressed layer of `tree`, and its diff ID.
pub(super) fn layer(tree: &Tree) -> std::io::Result<(Blob, String)> {
    let mut entries: Vec<(String, &Node)> = tree
        .nodes
        .iter()
        .map(|(path, node)| match node.contents {
            Some(_) => (path.clone(), node),
            None => (format!("{path}/"), node),
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tar = tar::Builder::new(Vec::new());
    for (path, node) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_uid(u64::from(node.owner.0));
        header.set_gid(u64::from(node.owner.1));
        header.set_mtime(0);
        header.set_mode(node.mode);
        match &node.contents {
            Some(contents) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(contents.len() as u64);
                tar.append_data(&mut header, &path, contents.as_slice())?;
            }
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, &path, std::io::empty())?;
            }
        }
    }
    let tar = tar.into_inner()?;
    Ok(oci::compressed(&tar))
}
