//! The build context of the `docker` backend: a tar of the context
//! directory that honours `.dockerignore` the way the Docker CLI does.
//!
//! Patterns are matched against paths relative to the context root, with
//! `/` separators; `*` and `?` stay within one path element, `**` spans
//! any number of them. A path is excluded when the last pattern that
//! matches it, or one of its parent directories, is not a `!` exception.
//! The Dockerfile is always sent: the engine needs it, even when ignored.
//! Entries are written in sorted order with mtime 0 and owner 0:0, so an
//! unchanged context gives an unchanged tar and the engine's layer cache holds.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

/// The name a Dockerfile from outside the context gets inside the tar.
pub const OUTSIDE_DOCKERFILE: &str = ".dev-env.Dockerfile";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the build context at {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: line {line}: `{pattern}` is not a valid pattern; fix or remove it", path.display())]
    Pattern {
        path: PathBuf,
        line: usize,
        pattern: String,
        #[source]
        source: globset::Error,
    },
}

/// A build context packed for the engine.
#[derive(Debug)]
pub struct Context {
    pub tar: Vec<u8>,
    /// The Dockerfile's path inside the tar.
    pub dockerfile: String,
    /// How many files went in.
    pub files: usize,
}

/// The patterns of a `.dockerignore`.
#[derive(Debug, Default)]
pub struct Ignore {
    patterns: Vec<(GlobMatcher, bool)>,
    has_exceptions: bool,
}

impl Ignore {
    /// Reads `<context>/.dockerignore`; no file means nothing is ignored.
    pub fn load(context: &Path) -> Result<Ignore, Error> {
        let path = context.join(".dockerignore");
        match std::fs::read_to_string(&path) {
            Ok(text) => Ignore::parse(&path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ignore::default()),
            Err(source) => Err(Error::Read { path, source }),
        }
    }

    /// Parses the text of a `.dockerignore` read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Ignore, Error> {
        let mut ignore = Ignore::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (exception, pattern) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            let pattern = clean(pattern);
            if pattern.is_empty() {
                continue;
            }
            let glob = GlobBuilder::new(&pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|source| Error::Pattern {
                    path: path.to_path_buf(),
                    line: i + 1,
                    pattern: line.to_string(),
                    source,
                })?;
            ignore.has_exceptions |= exception;
            ignore.patterns.push((glob.compile_matcher(), exception));
        }
        Ok(ignore)
    }

    /// Whether `rel` (relative, `/`-separated) is left out of the context.
    pub fn is_excluded(&self, rel: &str) -> bool {
        let mut excluded = false;
        for (glob, exception) in &self.patterns {
            let matches = glob.is_match(rel) || ancestors(rel).any(|dir| glob.is_match(dir));
            if matches {
                excluded = !exception;
            }
        }
        excluded
    }
}

/// Cleans a pattern like Go's `filepath.Clean`: no leading `/` or `./`, no
/// trailing `/`, no empty or `.` elements.
fn clean(pattern: &str) -> String {
    let parts: Vec<&str> = pattern
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    parts.join("/")
}

/// The proper ancestors of `rel`: `a/b/c` gives `a/b`, `a`.
fn ancestors(rel: &str) -> impl Iterator<Item = &str> {
    rel.match_indices('/').map(|(i, _)| &rel[..i])
}

/// Packs the context directory `context` with Dockerfile `dockerfile`,
/// plus `staged` files (name at the context root, path on disk) that are
/// not in the directory, such as a binary built for the image.
pub fn pack(
    context: &Path,
    dockerfile: &Path,
    staged: &[(String, PathBuf)],
) -> Result<Context, Error> {
    let ignore = Ignore::load(context)?;
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    let mut files = 0;
    walk(context, context, &ignore, &mut tar, &mut files)?;
    let read = |source, path: &Path| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    for (name, path) in staged {
        let bytes = std::fs::read(path).map_err(|e| read(e, path))?;
        append_file(&mut tar, name, 0o755, &bytes).map_err(|e| read(e, path))?;
        files += 1;
    }
    let inside = dockerfile
        .strip_prefix(context)
        .ok()
        .map(|rel| rel.to_string_lossy().replace('\\', "/"));
    let dockerfile_name = match inside {
        // Sent even when `.dockerignore` leaves it out.
        Some(rel) if ignore.is_excluded(&rel) => {
            let bytes = std::fs::read(dockerfile).map_err(|e| read(e, dockerfile))?;
            append_file(&mut tar, &rel, 0o644, &bytes).map_err(|e| read(e, dockerfile))?;
            rel
        }
        Some(rel) => rel,
        None => {
            let bytes = std::fs::read(dockerfile).map_err(|e| read(e, dockerfile))?;
            append_file(&mut tar, OUTSIDE_DOCKERFILE, 0o644, &bytes)
                .map_err(|e| read(e, dockerfile))?;
            String::from(OUTSIDE_DOCKERFILE)
        }
    };
    let tar = tar.into_inner().map_err(|e| read(e, context))?;
    Ok(Context {
        tar,
        dockerfile: dockerfile_name,
        files,
    })
}

fn walk(
    root: &Path,
    dir: &Path,
    ignore: &Ignore,
    tar: &mut tar::Builder<Vec<u8>>,
    files: &mut usize,
) -> Result<(), Error> {
    let read = |source, path: &Path| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(|e| read(e, dir))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read(e, dir))?;
    entries.sort();
    for path in entries {
        let rel = path
            .strip_prefix(root)
            .expect("walked paths are inside the root")
            .to_string_lossy()
            .replace('\\', "/");
        let meta = std::fs::symlink_metadata(&path).map_err(|e| read(e, &path))?;
        let excluded = ignore.is_excluded(&rel);
        if meta.is_dir() {
            // An excluded directory is entered only when an exception may
            // bring back something inside it.
            if excluded && !ignore.has_exceptions {
                continue;
            }
            if !excluded {
                let mut header = header(tar::EntryType::Directory, mode(&meta), 0);
                tar.append_data(&mut header, format!("{rel}/"), std::io::empty())
                    .map_err(|e| read(e, &path))?;
            }
            walk(root, &path, ignore, tar, files)?;
        } else if excluded {
            continue;
        } else if meta.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| read(e, &path))?;
            let mut header = header(tar::EntryType::Symlink, 0o777, 0);
            tar.append_link(&mut header, &rel, &target)
                .map_err(|e| read(e, &path))?;
            *files += 1;
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).map_err(|e| read(e, &path))?;
            append_file(tar, &rel, mode(&meta), &bytes).map_err(|e| read(e, &path))?;
            *files += 1;
        }
    }
    Ok(())
}

fn append_file(
    tar: &mut tar::Builder<Vec<u8>>,
    rel: &str,
    mode: u32,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut header = header(tar::EntryType::Regular, mode, bytes.len() as u64);
    tar.append_data(&mut header, rel, bytes)
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header
}

fn mode(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignore(text: &str) -> Ignore {
        Ignore::parse(Path::new(".dockerignore"), text).unwrap()
    }

    #[test]
    fn patterns_follow_the_docker_cli() {
        let it = ignore("# comment\n\ntarget\n*.log\n/docs/**/*.md\n!docs/keep.md\nsecret?.txt\n");
        assert!(it.is_excluded("target"));
        assert!(it.is_excluded("target/release/app"));
        assert!(it.is_excluded("build.log"));
        // `*` stays within one element, and patterns are anchored at the root.
        assert!(!it.is_excluded("logs/build.log"));
        assert!(!it.is_excluded("src/target"));
        assert!(it.is_excluded("docs/a/b/readme.md"));
        assert!(it.is_excluded("docs/readme.md"));
        assert!(!it.is_excluded("docs/keep.md"));
        assert!(it.is_excluded("secret1.txt"));
        assert!(!it.is_excluded("secret12.txt"));
        assert!(!it.is_excluded("src/main.rs"));
    }

    #[test]
    fn everything_but_one_file() {
        let it = ignore("*\n!controller-manager\n");
        assert!(!it.is_excluded("controller-manager"));
        assert!(it.is_excluded("Cargo.toml"));
        assert!(it.is_excluded("src"));
        assert!(it.is_excluded("src/main.rs"));
    }

    #[test]
    fn the_last_matching_pattern_wins() {
        let it = ignore("*.txt\n!important.txt\nimportant.txt\n");
        assert!(it.is_excluded("important.txt"));
        let it = ignore("*.txt\n!important.txt\n");
        assert!(!it.is_excluded("important.txt"));
    }

    #[test]
    fn pack_leaves_out_ignored_files_but_keeps_the_dockerfile() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("target/debug/app"), "x").unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(root.join("Dockerfile"), "FROM scratch").unwrap();
        std::fs::write(root.join(".dockerignore"), "target\nDockerfile\n").unwrap();
        let context = pack(root, &root.join("Dockerfile"), &[]).unwrap();
        let mut archive = tar::Archive::new(context.tar.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [".dockerignore", "src/", "src/main.rs", "Dockerfile"]
        );
        assert_eq!(context.dockerfile, "Dockerfile");
        // The same context packs to the same bytes.
        assert_eq!(
            pack(root, &root.join("Dockerfile"), &[]).unwrap().tar,
            context.tar
        );
    }

    #[test]
    fn a_dockerfile_outside_the_context_is_added_under_its_own_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ctx")).unwrap();
        std::fs::write(dir.path().join("ctx/a.txt"), "a").unwrap();
        std::fs::write(dir.path().join("Dockerfile"), "FROM scratch").unwrap();
        let context = pack(&dir.path().join("ctx"), &dir.path().join("Dockerfile"), &[]).unwrap();
        assert_eq!(context.dockerfile, OUTSIDE_DOCKERFILE);
        assert_eq!(context.files, 1);
    }
}
