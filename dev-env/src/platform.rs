//! The platform images are built for, and how this machine builds Rust
//! binaries for it.
//!
//! The cluster's platform comes from its nodes (`status.nodeInfo`) when it
//! answers, otherwise from the engine that runs (or will run) the node
//! (`docker info`). [`choose`] turns it and the host's toolchain into a
//! target triple and the tool that builds it, or a refusal that names the
//! fix; it is a pure function of what the systems report, so every machine
//! users have (Apple Silicon and Intel Macs, arm64 Linux, Fedora without
//! static glibc) is decided the same way here as there.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

mod facts;

pub use facts::{Error as FactsError, cluster as of_cluster, engine as of_engine, toolchain};

/// An OCI platform: what a node runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    /// Go's name, as Kubernetes and OCI spell it: `amd64`, `arm64`, `arm`.
    pub architecture: String,
    /// `v8` for arm64, `v7` for arm; `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// Linux on `architecture` as a node, the engine (`docker info`:
    /// `x86_64`, `aarch64`) or a Rust triple (`x86_64`, `aarch64`,
    /// `armv7`) names it.
    pub fn linux(architecture: &str) -> Platform {
        let architecture = match architecture {
            "x86_64" | "amd64" | "x64" => "amd64",
            "aarch64" | "arm64" | "armv8" | "armv8l" => "arm64",
            "armv7" | "armv7l" | "armhf" | "arm" => "arm",
            "i386" | "i686" | "x86" | "386" => "386",
            "powerpc64le" | "ppc64le" => "ppc64le",
            "riscv64" | "riscv64gc" => "riscv64",
            other => other,
        };
        let variant = match architecture {
            "arm64" => Some("v8"),
            "arm" => Some("v7"),
            _ => None,
        };
        Platform {
            os: String::from("linux"),
            architecture: architecture.to_string(),
            variant: variant.map(str::to_string),
        }
    }

    /// The platform a Rust target triple builds for.
    pub fn of_triple(triple: &str) -> Platform {
        Platform::linux(triple.split('-').next().unwrap_or(triple))
    }

    /// The Rust architecture of the platform's Linux triples.
    fn rust_arch(&self) -> Option<&'static str> {
        Some(match self.architecture.as_str() {
            "amd64" => "x86_64",
            "arm64" => "aarch64",
            "arm" => "armv7",
            "386" => "i686",
            "ppc64le" => "powerpc64le",
            "s390x" => "s390x",
            "riscv64" => "riscv64gc",
            _ => return None,
        })
    }

    /// `<arch>-unknown-linux-musl` and `<arch>-unknown-linux-gnu` (with
    /// the ABI suffix 32-bit arm needs).
    fn triples(&self) -> Option<(String, String)> {
        let arch = self.rust_arch()?;
        let abi = if arch == "armv7" { "eabihf" } else { "" };
        Some((
            format!("{arch}-unknown-linux-musl{abi}"),
            format!("{arch}-unknown-linux-gnu{abi}"),
        ))
    }
}

impl fmt::Display for Platform {
    /// `linux/arm64/v8`, as `docker build --platform` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// What this machine builds Rust with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toolchain {
    /// rustc's host triple, such as `aarch64-apple-darwin`.
    pub host: String,
    /// The targets whose standard library is installed (the host's too).
    pub installed: BTreeSet<String>,
    /// `cargo zigbuild` is installed.
    pub zigbuild: bool,
    /// The C toolchain has a static glibc (`libc.a`), which a static build
    /// for the host's own `*-linux-gnu` target links.
    pub static_glibc: bool,
}

/// How a binary for a platform is built here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RustTarget {
    pub triple: String,
    pub tool: Tool,
    /// Link the C runtime statically (`-C target-feature=+crt-static`): a
    /// gnu target's binaries are dynamic otherwise; musl ones are static
    /// either way.
    pub crt_static: bool,
    /// What the image says it runs on.
    pub platform: Platform,
}

/// What runs the build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `cargo build`: the host links for the target itself.
    Cargo,
    /// `cargo zigbuild`: zig links for a target the host cannot.
    Zigbuild,
}

impl Tool {
    /// The cargo subcommand.
    pub fn subcommand(self) -> &'static str {
        match self {
            Tool::Cargo => "build",
            Tool::Zigbuild => "zigbuild",
        }
    }
}

/// Why this machine cannot build for a platform, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this machine ({host}) cannot build Linux binaries for {platform}: {why}; {fix}")]
pub struct Refusal {
    pub platform: Platform,
    pub host: String,
    pub why: String,
    pub fix: String,
}

/// How to build for `platform` with `toolchain`: `wanted` (`build.cargo.
/// target`) if set and installed; else the musl target when its standard
/// library is installed, the gnu target with a static C runtime when the
/// host is that same Linux and has static glibc; cross builds (another
/// architecture or OS) link with `cargo zigbuild`.
pub fn choose(
    platform: &Platform,
    toolchain: &Toolchain,
    wanted: Option<&str>,
) -> Result<RustTarget, Box<Refusal>> {
    let refuse = |platform: &Platform, why: String, fix: String| {
        Box::new(Refusal {
            platform: platform.clone(),
            host: toolchain.host.clone(),
            why,
            fix,
        })
    };
    if let Some(triple) = wanted {
        return chosen(triple, toolchain)
            .map_err(|(why, fix)| refuse(&Platform::of_triple(triple), why, fix));
    }
    let Some((musl, gnu)) = platform.triples() else {
        return Err(refuse(
            platform,
            format!("no Rust target is known for {platform}"),
            String::from(
                "set `build.cargo.target` to the Rust target triple of the cluster's nodes",
            ),
        ));
    };
    if toolchain.installed.contains(&musl) {
        return chosen(&musl, toolchain).map_err(|(why, fix)| refuse(platform, why, fix));
    }
    if toolchain.host == gnu {
        return chosen(&gnu, toolchain).map_err(|(why, fix)| refuse(platform, why, fix));
    }
    // A cross build: only a musl binary runs in an image without a libc,
    // and zig links it for any host.
    let mut fixes = Vec::new();
    if !toolchain.installed.contains(&musl) {
        fixes.push(format!("`rustup target add {musl}`"));
    }
    if !toolchain.zigbuild {
        fixes.push(String::from(
            "`cargo install --locked cargo-zigbuild` (with zig: `brew install zig`, `pip3 install ziglang` or your package manager)",
        ));
    }
    Err(refuse(
        platform,
        format!(
            "a cross build needs the `{musl}` standard library and `cargo zigbuild` to link it"
        ),
        format!(
            "run {}, or set `build.cargo.target` to a target this machine builds",
            fixes.join(" and ")
        ),
    ))
}

/// Whether `triple` is the host's architecture on Linux (a musl target the
/// host links itself, with the self-contained C runtime Rust ships).
fn same_arch_linux(toolchain: &Toolchain, triple: &str) -> bool {
    let arch = |t: &str| t.split('-').next().unwrap_or_default().to_string();
    toolchain.host.contains("-linux-") && arch(&toolchain.host) == arch(triple)
}

/// How to build `triple` here, or why not and the fix.
fn chosen(triple: &str, toolchain: &Toolchain) -> Result<RustTarget, (String, String)> {
    if !toolchain.installed.contains(triple) && toolchain.host != triple {
        return Err((
            format!("the standard library of `{triple}` is not installed"),
            format!("run `rustup target add {triple}`"),
        ));
    }
    let musl = triple.contains("-linux-musl");
    let gnu = triple.contains("-linux-gnu");
    let platform = Platform::of_triple(triple);
    if toolchain.host == triple {
        if gnu && !toolchain.static_glibc {
            return Err((
                format!(
                    "a static `{triple}` binary links glibc statically, and the C toolchain has no `libc.a`"
                ),
                String::from(
                    "install static glibc (`dnf install glibc-static` on Fedora, `apt-get install libc6-dev` on Debian and Ubuntu), or `rustup target add` the musl target",
                ),
            ));
        }
        return Ok(RustTarget {
            triple: triple.to_string(),
            tool: Tool::Cargo,
            crt_static: gnu,
            platform,
        });
    }
    if musl && same_arch_linux(toolchain, triple) {
        return Ok(RustTarget {
            triple: triple.to_string(),
            tool: Tool::Cargo,
            crt_static: false,
            platform,
        });
    }
    if !musl {
        return Err((
            format!(
                "`{triple}` is a cross target whose binaries need a C library the image does not have"
            ),
            format!("set `build.cargo.target` to the musl target of {platform}"),
        ));
    }
    if !toolchain.zigbuild {
        return Err((
            format!("linking `{triple}` on this host needs `cargo zigbuild`"),
            String::from(
                "run `cargo install --locked cargo-zigbuild` (with zig: `brew install zig`, `pip3 install ziglang` or your package manager)",
            ),
        ));
    }
    Ok(RustTarget {
        triple: triple.to_string(),
        tool: Tool::Zigbuild,
        crt_static: false,
        platform,
    })
}

#[cfg(test)]
mod tests;
