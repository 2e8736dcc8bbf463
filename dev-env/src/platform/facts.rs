//! What the host, the engine and the cluster report, read once: the input
//! of [`super::choose`].

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use xshell::{Shell, cmd};

use super::{Platform, Toolchain};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot ask rustc in {} for its host and sysroot; is Rust installed?", dir.display())]
    Rustc {
        dir: PathBuf,
        #[source]
        source: xshell::Error,
    },
    #[error("rustc printed no host and sysroot: {printed:?}")]
    RustcOutput { printed: String },
    #[error("cannot ask the Docker engine for its architecture")]
    Engine {
        #[source]
        source: bollard::errors::Error,
    },
    #[error("cannot list the cluster's nodes to learn their architecture")]
    Nodes {
        #[source]
        source: kube::Error,
    },
    #[error(
        "the cluster's nodes run different platforms ({}); set `build.cargo.target` for the nodes the components run on",
        found.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    Mixed { found: Vec<Platform> },
    #[error("the cluster has no node to learn its platform from")]
    NoNode,
}

/// The toolchain cargo uses in `root` (rustup's override there included),
/// asked once per process and root.
pub fn toolchain(root: &Path) -> Result<Toolchain, Error> {
    static KNOWN: OnceLock<Mutex<HashMap<PathBuf, Toolchain>>> = OnceLock::new();
    let known = KNOWN.get_or_init(Mutex::default);
    if let Some(found) = known.lock().expect("toolchain cache").get(root) {
        return Ok(found.clone());
    }
    let found = ask_toolchain(root)?;
    known
        .lock()
        .expect("toolchain cache")
        .insert(root.to_path_buf(), found.clone());
    Ok(found)
}

fn ask_toolchain(root: &Path) -> Result<Toolchain, Error> {
    let rustc_error = |source| Error::Rustc {
        dir: root.to_path_buf(),
        source,
    };
    let sh = Shell::new().map_err(rustc_error)?;
    sh.change_dir(root);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| String::from("rustc"));
    let printed = cmd!(sh, "{rustc} --print sysroot --print host-tuple")
        .quiet()
        .read()
        .map_err(rustc_error)?;
    let mut lines = printed.lines();
    let (Some(sysroot), Some(host)) = (lines.next(), lines.next()) else {
        return Err(Error::RustcOutput { printed });
    };
    let mut installed = installed_targets(Path::new(sysroot));
    installed.insert(host.to_string());
    let static_glibc = host.contains("-linux-gnu") && has_static_glibc(&sh);
    Ok(Toolchain {
        host: host.to_string(),
        installed,
        zigbuild: on_path("cargo-zigbuild"),
        static_glibc,
    })
}

/// The targets whose standard library the sysroot holds
/// (`lib/rustlib/<triple>/lib/libstd-*.rlib`).
fn installed_targets(sysroot: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(sysroot.join("lib/rustlib")) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter(|entry| has_std(&entry.path().join("lib")))
        .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
        .collect()
}

fn has_std(lib: &Path) -> bool {
    std::fs::read_dir(lib).is_ok_and(|files| {
        files.flatten().any(|f| {
            let name = f.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libstd-") && name.ends_with(".rlib")
        })
    })
}

/// Whether `cc` finds `libc.a`: it prints the file's path when it does,
/// and the bare name when it does not.
fn has_static_glibc(sh: &Shell) -> bool {
    let cc = std::env::var("CC").unwrap_or_else(|_| String::from("cc"));
    cmd!(sh, "{cc} -print-file-name=libc.a")
        .quiet()
        .ignore_stderr()
        .read()
        .is_ok_and(|path| Path::new(path.trim()).is_absolute() && Path::new(path.trim()).is_file())
}

/// Whether an executable `name` is in a directory of `PATH` (or cargo's
/// `bin`, where `cargo install` puts it).
fn on_path(name: &str) -> bool {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|home| home.join("bin"));
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(cargo_bin)
        .any(|dir| dir.join(name).is_file())
}

/// The platform of the engine's machine, from `docker info`.
pub async fn engine(docker: &bollard::Docker) -> Result<Platform, Error> {
    let info = docker
        .info()
        .await
        .map_err(|source| Error::Engine { source })?;
    let os = info.os_type.unwrap_or_else(|| String::from("linux"));
    let mut platform = Platform::linux(info.architecture.as_deref().unwrap_or_default());
    platform.os = os;
    Ok(platform)
}

/// The platform of the cluster's nodes: the one they all run, from
/// `status.nodeInfo`.
pub async fn cluster(client: &kube::Client) -> Result<Platform, Error> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let list = nodes
        .list(&Default::default())
        .await
        .map_err(|source| Error::Nodes { source })?;
    let found: BTreeSet<Platform> = list
        .items
        .iter()
        .filter_map(|node| node.status.as_ref()?.node_info.as_ref())
        .map(|info| {
            let mut platform = Platform::linux(&info.architecture);
            platform.os.clone_from(&info.operating_system);
            platform
        })
        .collect();
    let mut found: Vec<Platform> = found.into_iter().collect();
    match found.len() {
        0 => Err(Error::NoNode),
        1 => Ok(found.remove(0)),
        _ => Err(Error::Mixed { found }),
    }
}
