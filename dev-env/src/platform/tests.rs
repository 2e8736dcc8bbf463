use super::*;

fn toolchain(host: &str, installed: &[&str], zigbuild: bool, static_glibc: bool) -> Toolchain {
    Toolchain {
        host: host.to_string(),
        installed: installed
            .iter()
            .map(|t| t.to_string())
            .chain([host.to_string()])
            .collect(),
        zigbuild,
        static_glibc,
    }
}

const LINUX_X86: &str = "x86_64-unknown-linux-gnu";
const LINUX_ARM: &str = "aarch64-unknown-linux-gnu";
const MAC_ARM: &str = "aarch64-apple-darwin";
const MAC_X86: &str = "x86_64-apple-darwin";

#[test]
fn engines_and_nodes_name_architectures_their_own_way() {
    for (reported, architecture, variant) in [
        ("x86_64", "amd64", None),
        ("amd64", "amd64", None),
        ("aarch64", "arm64", Some("v8")),
        ("arm64", "arm64", Some("v8")),
        ("armv7l", "arm", Some("v7")),
        ("s390x", "s390x", None),
    ] {
        let platform = Platform::linux(reported);
        assert_eq!(platform.architecture, architecture, "{reported}");
        assert_eq!(platform.variant.as_deref(), variant, "{reported}");
    }
    assert_eq!(Platform::linux("aarch64").to_string(), "linux/arm64/v8");
    assert_eq!(Platform::linux("x86_64").to_string(), "linux/amd64");
    assert_eq!(
        Platform::of_triple("aarch64-unknown-linux-musl"),
        Platform::linux("arm64")
    );
}

/// One row: the cluster's architecture, the host, what it has, the
/// override → the triple, the tool and static C runtime, or the refusal's
/// fix.
struct Row {
    cluster: &'static str,
    toolchain: Toolchain,
    wanted: Option<&'static str>,
    want: Result<(&'static str, Tool, bool), &'static str>,
}

#[test]
fn the_target_follows_the_cluster_and_what_the_host_can_build() {
    let rows = [
        // Linux x86_64 with only its own target: gnu with a static glibc.
        Row {
            cluster: "x86_64",
            toolchain: toolchain(LINUX_X86, &[], false, true),
            wanted: None,
            want: Ok((LINUX_X86, Tool::Cargo, true)),
        },
        // ... and without static glibc (Fedora): refused with the fix.
        Row {
            cluster: "amd64",
            toolchain: toolchain(LINUX_X86, &[], false, false),
            wanted: None,
            want: Err("dnf install glibc-static"),
        },
        // The musl target installed: preferred, no libc.a needed.
        Row {
            cluster: "amd64",
            toolchain: toolchain(LINUX_X86, &["x86_64-unknown-linux-musl"], false, false),
            wanted: None,
            want: Ok(("x86_64-unknown-linux-musl", Tool::Cargo, false)),
        },
        // arm64 Linux laptop, arm64 node (colima on Linux, k3s on a Pi).
        Row {
            cluster: "arm64",
            toolchain: toolchain(LINUX_ARM, &[], false, true),
            wanted: None,
            want: Ok((LINUX_ARM, Tool::Cargo, true)),
        },
        // x86_64 Linux building for an arm64 cluster: cross, zig links musl.
        Row {
            cluster: "arm64",
            toolchain: toolchain(LINUX_X86, &["aarch64-unknown-linux-musl"], true, true),
            wanted: None,
            want: Ok(("aarch64-unknown-linux-musl", Tool::Zigbuild, false)),
        },
        Row {
            cluster: "arm64",
            toolchain: toolchain(LINUX_X86, &[], false, true),
            wanted: None,
            want: Err(
                "run `rustup target add aarch64-unknown-linux-musl` and `cargo install --locked cargo-zigbuild`",
            ),
        },
        // Apple Silicon, Docker Desktop / OrbStack / colima: arm64 nodes.
        Row {
            cluster: "aarch64",
            toolchain: toolchain(MAC_ARM, &["aarch64-unknown-linux-musl"], true, false),
            wanted: None,
            want: Ok(("aarch64-unknown-linux-musl", Tool::Zigbuild, false)),
        },
        Row {
            cluster: "aarch64",
            toolchain: toolchain(MAC_ARM, &["aarch64-unknown-linux-musl"], false, false),
            wanted: None,
            want: Err("cargo install --locked cargo-zigbuild"),
        },
        Row {
            cluster: "aarch64",
            toolchain: toolchain(MAC_ARM, &[], true, false),
            wanted: None,
            want: Err("run `rustup target add aarch64-unknown-linux-musl`, or set"),
        },
        // Intel Mac: amd64 nodes, still a cross build.
        Row {
            cluster: "x86_64",
            toolchain: toolchain(MAC_X86, &["x86_64-unknown-linux-musl"], true, false),
            wanted: None,
            want: Ok(("x86_64-unknown-linux-musl", Tool::Zigbuild, false)),
        },
        // The override wins, and must be installed.
        Row {
            cluster: "x86_64",
            toolchain: toolchain(LINUX_X86, &[], false, true),
            wanted: Some("aarch64-unknown-linux-musl"),
            want: Err("run `rustup target add aarch64-unknown-linux-musl`"),
        },
        Row {
            cluster: "x86_64",
            toolchain: toolchain(LINUX_X86, &["x86_64-unknown-linux-musl"], false, true),
            wanted: Some(LINUX_X86),
            want: Ok((LINUX_X86, Tool::Cargo, true)),
        },
        // A cross gnu target: its binary needs a libc the image lacks.
        Row {
            cluster: "arm64",
            toolchain: toolchain(LINUX_X86, &[LINUX_ARM], true, true),
            wanted: Some(LINUX_ARM),
            want: Err("set `build.cargo.target` to the musl target of linux/arm64/v8"),
        },
        // A platform Rust has no Linux target for here.
        Row {
            cluster: "mips64",
            toolchain: toolchain(LINUX_X86, &[], true, true),
            wanted: None,
            want: Err("set `build.cargo.target`"),
        },
    ];
    for (i, row) in rows.iter().enumerate() {
        let platform = Platform::linux(row.cluster);
        let got = choose(&platform, &row.toolchain, row.wanted);
        match (&row.want, got) {
            (Ok((triple, tool, crt_static)), Ok(target)) => {
                assert_eq!(
                    (target.triple.as_str(), target.tool, target.crt_static),
                    (*triple, *tool, *crt_static),
                    "row {i}"
                );
                assert_eq!(target.platform, Platform::of_triple(triple), "row {i}");
            }
            (Err(fix), Err(refusal)) => {
                let text = refusal.to_string();
                assert!(text.contains(fix), "row {i}: {text}");
                assert!(
                    text.starts_with(&format!(
                        "this machine ({}) cannot build",
                        row.toolchain.host
                    )),
                    "row {i}: {text}"
                );
            }
            (want, got) => panic!("row {i}: want {want:?}, got {got:?}"),
        }
    }
}
