//! Platforms as Go names them, which is how Kubernetes and OCI images name them: `GOOS/GOARCH` and a
//! variant.
//!
//! The names other sources use (`uname -m` and Docker's `Architecture`: `x86_64`, `aarch64`, `armv7l`;
//! Rust's `std::env::consts::ARCH`: `x86`, `powerpc64`) are normalised with [`go_arch`]. An image index's
//! entries are matched as containerd's `platforms.Only` matches them (`github.com/containerd/platforms`): a
//! node runs its own platform first, then, for amd64, 386; for arm64, arm from v8 down to v5; for arm/vN,
//! arm from vN-1 down to v5. Variants are normalised as containerd's `Normalize` does: arm64's `v8` is no
//! variant, arm without one is `v7`.

use std::fmt;

/// An operating system, an architecture and its variant, in Go's names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// `GOOS`: `linux`.
    pub os: String,
    /// `GOARCH`: `amd64`, `arm64`, `arm`, …
    pub architecture: String,
    /// The variant containerd keeps after normalising: `v7` for arm, none for arm64 `v8`.
    pub variant: Option<String>,
}

impl Platform {
    /// A platform from the names any source gives, normalised: `("linux", "aarch64", None)` is `linux/arm64`,
    /// `("linux", "armhf", None)` is `linux/arm/v7`.
    pub fn new(os: &str, architecture: &str, variant: Option<&str>) -> Platform {
        let (architecture, implied) = go_arch(architecture);
        let explicit = variant
            .filter(|v| !v.is_empty())
            .map(str::to_ascii_lowercase);
        let variant = normalise_variant(architecture, implied.or(explicit.as_deref()));
        Platform {
            os: os.to_ascii_lowercase(),
            architecture: architecture.to_string(),
            variant,
        }
    }

    /// A Linux node on a machine `uname -m` (or Docker's `Architecture`) names so.
    pub fn linux(machine: &str) -> Platform {
        Platform::new("linux", machine, None)
    }

    /// A Linux node on the architecture kube-sim was built for: the node of a kubelet without an engine.
    pub fn linux_of_build() -> Platform {
        Platform::linux(build_arch())
    }

    /// The platform kube-sim was built for, as an API server reports its own (`runtime.GOOS/GOARCH`).
    pub fn of_build() -> Platform {
        let os = match std::env::consts::OS {
            "macos" => "darwin",
            os => os,
        };
        Platform::new(os, build_arch(), None)
    }

    /// `os/architecture`, as `/version` reports it.
    pub fn os_arch(&self) -> String {
        format!("{}/{}", self.os, self.architecture)
    }

    /// Where a platform an image names ranks among those a node of this platform runs (`0` is its own), or
    /// `None` when the node does not run it.
    pub fn rank(&self, other: &Platform) -> Option<usize> {
        self.runs().iter().position(|p| p == other)
    }

    /// The platforms a node of this platform runs, best first (containerd's `platformVector`).
    fn runs(&self) -> Vec<Platform> {
        let same = |architecture: &str, variant: Option<String>| Platform {
            os: self.os.clone(),
            architecture: architecture.to_string(),
            variant,
        };
        let older_arm = |from: u32| (5..from).rev().map(move |v| Some(format!("v{v}")));
        let mut runs = vec![self.clone()];
        match self.architecture.as_str() {
            "amd64" => runs.push(same("386", None)),
            "arm64" => {
                runs.push(same("arm", Some("v8".to_string())));
                runs.extend(older_arm(8).map(|v| same("arm", v)));
            }
            "arm" => {
                let version = arm_version(self.variant.as_deref()).unwrap_or(0);
                runs.extend(older_arm(version).map(|v| same("arm", v)));
            }
            _ => {}
        }
        runs
    }
}

impl fmt::Display for Platform {
    /// `os/architecture[/variant]`, as `docker pull --platform` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        match &self.variant {
            Some(v) => write!(f, "/{v}"),
            None => Ok(()),
        }
    }
}

/// An architecture as Go names it (`GOARCH`), with the variant its name implies: `x86_64` is `amd64`,
/// `aarch64` `arm64`, `armv7l` `arm` `v7`, `i686` `386`. Names Go already uses, and unknown ones, are kept.
pub fn go_arch(name: &str) -> (&str, Option<&'static str>) {
    match name.to_ascii_lowercase().as_str() {
        "x86_64" | "x86-64" | "x64" | "amd64" => ("amd64", None),
        "aarch64" | "arm64" => ("arm64", None),
        "arm" => ("arm", None),
        "armv8l" => ("arm", Some("v8")),
        "armv7l" | "armv7" | "armhf" => ("arm", Some("v7")),
        "armv6l" | "armv6" | "armel" => ("arm", Some("v6")),
        "armv5l" | "armv5tel" | "armv5" => ("arm", Some("v5")),
        "i386" | "i486" | "i586" | "i686" | "x86" | "386" => ("386", None),
        "ppc64le" | "powerpc64le" => ("ppc64le", None),
        "ppc64" | "powerpc64" => ("ppc64", None),
        "s390x" => ("s390x", None),
        "riscv64" => ("riscv64", None),
        "mips64el" | "mips64le" => ("mips64le", None),
        "mips64" => ("mips64", None),
        "mipsel" | "mipsle" => ("mipsle", None),
        "mips" => ("mips", None),
        "loongarch64" | "loong64" => ("loong64", None),
        _ => (name, None),
    }
}

/// The architecture kube-sim was built for, with the byte order Rust's name leaves out.
fn build_arch() -> &'static str {
    let little = cfg!(target_endian = "little");
    match std::env::consts::ARCH {
        "powerpc64" if little => "ppc64le",
        "mips64" if little => "mips64le",
        "mips" if little => "mipsle",
        arch => arch,
    }
}

/// A variant as containerd's `Normalize` keeps it: none for amd64 `v1` and arm64 `v8`, `v7` for arm without
/// one, a `v` before a bare arm number.
fn normalise_variant(architecture: &str, variant: Option<&str>) -> Option<String> {
    let variant = match architecture {
        "amd64" => variant.filter(|v| *v != "v1"),
        "arm64" => match variant {
            Some("8" | "v8" | "v8.0") => None,
            Some("9" | "9.0" | "v9.0") => Some("v9"),
            v => v,
        },
        "arm" => match variant {
            None | Some("7") => Some("v7"),
            Some("5") => Some("v5"),
            Some("6") => Some("v6"),
            Some("8") => Some("v8"),
            v => v,
        },
        "386" => None,
        _ => variant,
    };
    variant.map(str::to_string)
}

/// The number of an arm variant: `v7` is 7.
fn arm_version(variant: Option<&str>) -> Option<u32> {
    variant?.strip_prefix('v')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_names_become_go_architectures() {
        for (machine, arch, variant) in [
            ("x86_64", "amd64", None),
            ("amd64", "amd64", None),
            ("aarch64", "arm64", None),
            ("arm64", "arm64", None),
            ("armv7l", "arm", Some("v7")),
            ("armv6l", "arm", Some("v6")),
            ("armv8l", "arm", Some("v8")),
            ("armhf", "arm", Some("v7")),
            ("i686", "386", None),
            ("i386", "386", None),
            ("x86", "386", None),
            ("ppc64le", "ppc64le", None),
            ("s390x", "s390x", None),
            ("riscv64", "riscv64", None),
            ("loongarch64", "loong64", None),
            ("sparc64", "sparc64", None),
        ] {
            assert_eq!(go_arch(machine), (arch, variant), "{machine}");
            let node = Platform::linux(machine);
            assert_eq!(node.architecture, arch, "{machine}");
            assert_eq!(node.variant.as_deref(), variant, "{machine}");
        }
    }

    #[test]
    fn variants_are_normalised_as_containerd_does() {
        let p =
            |arch: &str, variant: Option<&str>| Platform::new("Linux", arch, variant).to_string();
        assert_eq!(p("arm64", Some("v8")), "linux/arm64");
        assert_eq!(p("aarch64", Some("8")), "linux/arm64");
        assert_eq!(p("arm64", Some("v9.0")), "linux/arm64/v9");
        assert_eq!(p("arm", None), "linux/arm/v7");
        assert_eq!(p("arm", Some("6")), "linux/arm/v6");
        assert_eq!(p("armel", Some("v7")), "linux/arm/v6");
        assert_eq!(p("amd64", Some("v1")), "linux/amd64");
        assert_eq!(p("amd64", Some("v3")), "linux/amd64/v3");
        assert_eq!(p("i386", Some("x")), "linux/386");
    }

    #[test]
    fn a_node_runs_its_own_platform_first_then_the_ones_containerd_falls_back_to() {
        let p = |arch: &str, variant: Option<&str>| Platform::new("linux", arch, variant);
        let amd64 = Platform::linux("x86_64");
        assert_eq!(amd64.rank(&p("amd64", None)), Some(0));
        assert_eq!(amd64.rank(&p("386", None)), Some(1));
        assert_eq!(amd64.rank(&p("arm64", None)), None);
        assert_eq!(amd64.rank(&p("amd64", Some("v3"))), None);
        assert_eq!(amd64.rank(&Platform::new("windows", "amd64", None)), None);
        let arm64 = Platform::linux("aarch64");
        assert_eq!(arm64.rank(&p("arm64", Some("v8"))), Some(0));
        assert_eq!(arm64.rank(&p("arm64", None)), Some(0));
        assert_eq!(arm64.rank(&p("arm", Some("v7"))), Some(2));
        assert_eq!(arm64.rank(&p("amd64", None)), None);
        let arm = Platform::linux("armv7l");
        assert_eq!(arm.rank(&p("arm", None)), Some(0));
        assert_eq!(arm.rank(&p("arm", Some("v6"))), Some(1));
        assert_eq!(arm.rank(&p("arm", Some("v8"))), None);
        assert_eq!(arm.rank(&p("arm64", None)), None);
    }

    #[test]
    fn the_build_platform_is_the_binarys_own() {
        let built = Platform::of_build();
        assert_eq!(built.architecture, go_arch(build_arch()).0);
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            assert_eq!(built.os_arch(), "linux/amd64");
        }
        if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
            assert_eq!(built.os_arch(), "darwin/arm64");
        }
        assert_eq!(Platform::linux_of_build().os, "linux");
    }
}
