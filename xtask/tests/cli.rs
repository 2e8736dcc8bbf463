//! The command line as a user meets it: help, exit codes, and the errors a
//! broken `dev-env.yaml` produces. Runs the real binary.

use std::{
    path::Path,
    process::{Command, Output},
};

fn xtask(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(dir)
        .env_remove("DEV_ENV_CONFIG")
        // Anything that tried to reach Docker would fail loudly here.
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .expect("xtask runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

#[test]
fn help_lists_every_command() {
    let out = xtask(repo_root(), &["--help"]);
    assert!(out.status.success(), "{}", text(&out));
    let help = text(&out);
    for cmd in [
        "dev",
        "push-image",
        "reload",
        "test",
        "--config",
        "--verbose",
        "--quiet",
    ] {
        assert!(help.contains(cmd), "`{cmd}` missing from:\n{help}");
    }
    let out = xtask(repo_root(), &["dev", "--help"]);
    let help = text(&out);
    for cmd in ["up", "down", "status", "reset", "logs"] {
        assert!(help.contains(cmd), "`{cmd}` missing from:\n{help}");
    }
    for (args, flags) in [
        (
            &["dev", "up", "--help"][..],
            &["--recreate", "--dry-run"][..],
        ),
        (&["dev", "down", "--help"], &["--purge"]),
        (&["dev", "status", "--help"], &["--json"]),
        (&["dev", "reset", "--help"], &["--purge"]),
        (
            &["dev", "logs", "--help"],
            &["[COMPONENT]", "--follow", "--since", "--tail"],
        ),
        (
            &["forward", "--help"],
            &["<COMPONENT>", "[PORT]...", "--json"],
        ),
        (
            &["push-image", "--help"],
            &["<COMPONENT>...", "--no-rollout", "--timeout", "--json"],
        ),
        (
            &["reload", "--help"],
            &["[COMPONENT]...", "--timeout", "--json"],
        ),
    ] {
        let out = xtask(repo_root(), args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        for flag in flags {
            assert!(
                text(&out).contains(flag),
                "{args:?} lacks {flag}:\n{}",
                text(&out)
            );
        }
    }
}

#[test]
fn destructive_commands_refuse_dry_run() {
    for args in [
        &["dev", "down", "--dry-run"][..],
        &["dev", "reset", "--dry-run"],
        &["dev", "down", "--purge", "--dry-run"],
    ] {
        let out = xtask(repo_root(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("--dry-run"), "{}", text(&out));
    }
    let out = xtask(repo_root(), &["-v", "-q", "dev", "status"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = xtask(repo_root(), &["push-image", "worker", "--timeout", "0s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn dry_run_prints_the_plan_of_the_repository_and_changes_nothing() {
    let root = repo_root();
    let before = std::fs::read_dir(root).unwrap().count();
    let out = xtask(root, &["dev", "up", "--dry-run"]);
    let plan = text(&out);
    assert!(out.status.success(), "{plan}");
    for part in [
        "network   dev-env",
        "registry  dev-env-registry",
        "node      dev-env-server-0",
        "manifests",
        "Namespace/demo",
    ] {
        assert!(plan.contains(part), "`{part}` missing from:\n{plan}");
    }
    assert!(plan.contains("127.0.0.1:"), "{plan}");
    assert_eq!(
        std::fs::read_dir(root).unwrap().count(),
        before,
        "the dry run created files"
    );
}

#[test]
fn recreate_dry_run_prints_the_plan() {
    let out = xtask(repo_root(), &["dev", "up", "--recreate", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("nothing was changed"), "{}", text(&out));
}

#[test]
fn config_flag_and_env_point_at_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("other.yaml");
    std::fs::write(&file, "name: other\n").unwrap();
    let out = xtask(
        repo_root(),
        &["--config", file.to_str().unwrap(), "dev", "up", "--dry-run"],
    );
    assert!(
        out.status.success() && text(&out).contains("network   other"),
        "{}",
        text(&out)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["dev", "up", "--dry-run"])
        .env("DEV_ENV_CONFIG", &file)
        .output()
        .unwrap();
    assert!(
        out.status.success() && text(&out).contains("network   other"),
        "{}",
        text(&out)
    );
    let out = xtask(
        repo_root(),
        &[
            "--config",
            "/nonexistent/dev-env.yaml",
            "dev",
            "up",
            "--dry-run",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("cannot read /nonexistent/dev-env.yaml"),
        "{}",
        text(&out)
    );
}

#[test]
fn unknown_components_list_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev-env.yaml");
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    let component = |name: &str| {
        format!(
            "  {name}:\n    image: {name}\n    build: {{docker: {{}}}}\n    rollout: {{kind: Deployment}}\n"
        )
    };
    std::fs::write(
        &file,
        format!(
            "name: a\ncomponents:\n{}{}",
            component("web"),
            component("api")
        ),
    )
    .unwrap();
    let config = file.to_str().unwrap();
    for args in [
        &["push-image", "nope"][..],
        &["reload", "web", "nope"],
        &["dev", "logs", "nope"],
        &["forward", "nope", "8080"],
    ] {
        let out = xtask(dir.path(), &[&["--config", config][..], args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        let msg = text(&out);
        assert!(
            msg.contains("unknown component `nope`") && msg.contains("declares: api, web"),
            "{args:?}: {msg}"
        );
    }
}

/// A valid file to break one key at a time.
const BASE_COMPONENT: &str = "    image: demo/worker\n    build: {cargo: {package: worker}}\n    rollout: {kind: Deployment, namespace: demo}\n";

/// (what, file, key named in the message, `line:col`)
const MALFORMED: &[(&str, &str, &str, &str)] = &[
    (
        "forwarded port out of range",
        "name: a\ncomponents:\n  w:\nBASE    forward: [\"8080\", \"1:99999\"]\n",
        "components.w.forward[1]",
        "7:23",
    ),
    (
        "unknown top-level key",
        "name: a\nnetwrk: {}\n",
        "netwrk",
        "2:1",
    ),
    (
        "unknown nested key",
        "name: a\ncomponents:\n  w:\n    imagee: x\n",
        "components.w.imagee",
        "4:5",
    ),
    (
        "wrong type",
        "name: a\nregistry:\n  hostPort: lots\n",
        "registry.hostPort",
        "3:13",
    ),
    (
        "port out of range",
        "name: a\nregistry:\n  hostPort: 70000\n",
        "registry.hostPort",
        "3:13",
    ),
    (
        "bad IPv4 subnet",
        "name: a\nnetwork:\n  ipv4Subnet: 300.1.1.0/24\n",
        "network.ipv4Subnet",
        "3:15",
    ),
    (
        "bad IPv6 subnet",
        "name: a\nnetwork:\n  ipv6Subnet: fd00::zz/64\n",
        "network.ipv6Subnet",
        "3:15",
    ),
    (
        "overlapping subnets",
        "name: a\nnetwork:\n  ipv4Subnet: 10.0.0.0/16\ncluster:\n  podSubnet: 10.0.128.0/17\n",
        "cluster.podSubnet",
        "5:14",
    ),
    (
        "unknown rollout kind",
        "name: a\ncomponents:\n  w:\n    image: w\n    build: {cargo: {package: w}}\n    rollout: {kind: StatefulSet}\n",
        "components.w.rollout.kind",
        "6:21",
    ),
    (
        "bad component name",
        "name: a\ncomponents:\n  Worker_1:\nBASE",
        "components.Worker_1",
        "3:3",
    ),
    (
        "missing build",
        "name: a\ncomponents:\n  w:\n    image: w\n    rollout: {kind: Deployment}\n",
        "components.w.build",
        "3:3",
    ),
    (
        "both build kinds",
        "name: a\ncomponents:\n  w:\n    image: w\n    build:\n      cargo: {package: w}\n      docker: {context: .}\n    rollout: {kind: Deployment}\n",
        "components.w.build",
        "5:5",
    ),
    (
        "missing manifests path",
        "name: a\nmanifests:\n  - manifests\n  - nope\n",
        "manifests[1]",
        "4:5",
    ),
    ("empty file", "", "name", "1:1"),
    ("only a comment", "# nothing here\n", "name", "1:1"),
    ("not YAML", "name: 'unterminated\n", "(document)", "2:1"),
    (
        "tab indentation",
        "name: a\nnetwork:\n\tname: x\n",
        "(document)",
        "3:1",
    ),
    ("a list, not a map", "- name\n- a\n", "(document)", "1:1"),
    ("missing name", "network: {}\n", "name", "1:1"),
    ("name is not a DNS label", "name: My Env\n", "name", "1:7"),
    (
        "existing provider without context",
        "name: a\ncluster:\n  provider: existing\n",
        "cluster.provider",
        "3:13",
    ),
    (
        "existing cluster without a registry it can reach",
        "name: a\ncluster:\n  provider: existing\n  context: prod\n",
        "cluster.provider",
        "3:13",
    ),
    (
        "context with a k3s node",
        "name: a\ncluster:\n  context: kind-x\n",
        "cluster.context",
        "3:12",
    ),
    (
        "image with a tag",
        "name: a\ncomponents:\n  w:\n    image: demo/worker:dev\n    build: {cargo: {package: w}}\n    rollout: {kind: Deployment}\n",
        "components.w.image",
        "4:12",
    ),
    (
        "missing Dockerfile",
        "name: a\ncomponents:\n  w:\n    image: w\n    build: {docker: {context: .}}\n    rollout: {kind: Deployment}\n",
        "components.w.build.docker.dockerfile",
        "5:13",
    ),
    (
        "external registry with an image",
        "name: a\nregistry:\n  external: localhost:5000\n  image: registry:2\n",
        "registry.image",
        "4:10",
    ),
    (
        "unknown provider",
        "name: a\ncluster: {provider: kind}\n",
        "cluster.provider",
        "2:21",
    ),
    (
        "duplicate key",
        "name: a\nnetwork:\n  name: x\n  ipv4Subnet: 10.1.0.0/24\n  name: y\n",
        "network.name",
        "5:3",
    ),
    (
        "node hostname over 63 characters",
        "name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
        "name",
        "1:7",
    ),
    (
        "cargo build outside any cargo workspace",
        "name: a\ncomponents:\n  w:\n    image: w\n    build: {cargo: {package: worker}}\n    rollout: {kind: Deployment}\n",
        "components.w.build.cargo.package",
        "5:30",
    ),
    (
        "sim provider outside any cargo workspace",
        "name: a\ncluster:\n  provider: sim\n",
        "cluster.provider",
        "3:13",
    ),
];

#[test]
fn malformed_files_fail_with_position_key_and_fix_and_touch_nothing() {
    let mut failures = Vec::new();
    for (what, yaml, key, position) in MALFORMED {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        let file = dir.path().join("dev-env.yaml");
        std::fs::write(&file, yaml.replace("BASE", BASE_COMPONENT)).unwrap();
        let out = xtask(
            dir.path(),
            &["--config", file.to_str().unwrap(), "dev", "up", "--dry-run"],
        );
        let msg = text(&out);
        let at = format!("{}:{position}:", file.display());
        let ok =
            out.status.code() == Some(1) && msg.contains(&at) && msg.contains(&format!("`{key}`"));
        if !ok {
            failures.push(format!(
                "{what}: expected exit 1, `{at}` and `{key}`; got {:?}:\n{msg}",
                out.status.code()
            ));
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        if left.len() != 2 {
            failures.push(format!("{what}: the directory changed: {left:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        MALFORMED.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_package_or_binary_missing_from_the_workspace_is_refused_with_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "Cargo.toml",
        "[workspace]\nresolver = \"3\"\nmembers = [\"worker\"]\n",
    );
    write(
        "worker/Cargo.toml",
        "[package]\nname = \"worker\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    );
    write("worker/src/main.rs", "fn main() {}\n");
    let file = dir.path().join("dev-env.yaml");
    let config = file.to_str().unwrap();
    for (build, key, position, says) in [
        (
            "{cargo: {package: wroker}}",
            "components.w.build.cargo.package",
            "5:30",
            "no package `wroker` in the cargo workspace",
        ),
        (
            "{cargo: {package: worker, bin: wrk}}",
            "components.w.build.cargo.bin",
            "5:43",
            "package `worker` has no binary `wrk`; its binaries: worker",
        ),
    ] {
        write(
            "dev-env.yaml",
            &format!(
                "name: a\ncomponents:\n  w:\n    image: w\n    build: {build}\n    rollout: {{kind: Deployment}}\n"
            ),
        );
        let out = xtask(dir.path(), &["--config", config, "dev", "up", "--dry-run"]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(1), "{msg}");
        let at = format!("{config}:{position}: `{key}`");
        assert!(
            msg.contains(&at) && msg.contains(says),
            "`{at}`, `{says}` in:\n{msg}"
        );
    }
}

#[test]
fn teardown_needs_only_the_names_of_the_objects() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev-env.yaml");
    let name = unique("gone");
    // Neither the manifests directory nor the Dockerfile exists.
    std::fs::write(
        &file,
        format!("name: {name}\nmanifests: [manifests]\ncomponents:\n  w:\n    image: w\n    build: {{docker: {{}}}}\n    rollout: {{kind: Deployment}}\n"),
    )
    .unwrap();
    let config = file.to_str().unwrap();
    let out = xtask(dir.path(), &["--config", config, "dev", "up", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("`manifests[0]`"), "{}", text(&out));
    // Against the real engine: nothing of the environment exists, so both
    // succeed and say so.
    for cmd in ["down", "reset"] {
        let out = real_xtask(dir.path(), &["--config", config, "dev", cmd]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(0), "{cmd}: {msg}");
        assert!(
            msg.contains(&format!("`{name}` is already down: nothing to remove")),
            "{cmd}: {msg}"
        );
    }
}

/// Runs `docker` with `args`; panics, loudly, when it cannot.
fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs (these tests need a Docker engine)")
}

/// A name no other run uses.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{:x}", std::process::id(), nanos % 0xffff_ffff)
}

/// A `10.2xx.y.0/24` from the time: unlikely to be in use.
fn random_subnet(attempt: u32) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        .wrapping_add(attempt.wrapping_mul(7919));
    format!("10.{}.{}.0/24", 200 + nanos % 50, (nanos / 50) % 250)
}

/// A bridge network made outside dev-env, removed however the test ends.
struct Network {
    name: String,
    subnet: String,
}

impl Network {
    fn create() -> Network {
        let name = unique("pf-other");
        for attempt in 0..20 {
            let subnet = random_subnet(attempt);
            let out = docker(&["network", "create", "--subnet", &subnet, &name]);
            if out.status.success() {
                return Network { name, subnet };
            }
            // Another network holds that range: try another one.
            assert!(
                text(&out).contains("overlap"),
                "`docker network create` failed (is the Docker engine running?): {}",
                text(&out)
            );
        }
        panic!("no free 10.200-249.x.0/24 subnet for a test network");
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = docker(&["network", "rm", &self.name]);
    }
}

/// The binary against the real engine.
fn real_xtask(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(dir)
        .env_remove("DEV_ENV_CONFIG")
        .output()
        .expect("xtask runs")
}

/// `dev up` against the real engine.
fn dev_up(dir: &Path, file: &Path) -> Output {
    real_xtask(dir, &["--config", file.to_str().unwrap(), "dev", "up"])
}

/// Asserts that environment `name` has no Docker object and no state.
fn assert_nothing_created(dir: &Path, name: &str) {
    let label = format!("label=dev-env.name={name}");
    for list in [
        &["network", "ls", "-q", "--filter", &label][..],
        &["ps", "-aq", "--filter", &label],
        &["volume", "ls", "-q", "--filter", &label],
    ] {
        let out = docker(list);
        assert!(out.status.success(), "docker {list:?}: {}", text(&out));
        assert!(
            out.stdout.is_empty(),
            "docker {list:?} lists objects of `{name}`: {}",
            text(&out)
        );
    }
    assert!(
        !dir.join(".dev-env").join(name).join("state.json").exists(),
        "state was written"
    );
    assert!(!dir.join(".dev-env").exists(), "a state directory was made");
}

#[test]
fn dev_up_refuses_a_subnet_of_another_network_and_creates_nothing() {
    let other = Network::create();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev-env.yaml");
    let name = unique("pf");
    // The declared /16 contains the other network's /24.
    let wide = other.subnet.replacen(".0/24", ".0/16", 1);
    let wide = {
        let mut parts: Vec<&str> = wide.split('.').collect();
        parts[2] = "0";
        parts.join(".")
    };
    std::fs::write(
        &file,
        format!("name: {name}\nnetwork:\n  ipv4Subnet: {wide}\n"),
    )
    .unwrap();
    let out = dev_up(dir.path(), &file);
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    let at = format!("{}:3:15: `network.ipv4Subnet`", file.display());
    let names = format!(
        "overlaps Docker network `{}` ({}, not made by dev-env)",
        other.name, other.subnet
    );
    assert!(
        msg.contains(&at) && msg.contains(&names),
        "`{at}`, `{names}` in:\n{msg}"
    );
    assert!(msg.contains("choose a subnet"), "{msg}");
    assert_nothing_created(dir.path(), &name);
}

#[test]
fn dev_up_refuses_a_registry_port_in_use_and_creates_nothing() {
    let held = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = held.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev-env.yaml");
    let name = unique("pf");
    std::fs::write(
        &file,
        format!(
            "name: {name}\nnetwork:\n  ipv4Subnet: {}\nregistry:\n  hostPort: {port}\n",
            random_subnet(0)
        ),
    )
    .unwrap();
    let out = dev_up(dir.path(), &file);
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    let at = format!("{}:5:13: `registry.hostPort`", file.display());
    let says = format!("port {port} on 127.0.0.1 is already in use");
    assert!(
        msg.contains(&at) && msg.contains(&says),
        "`{at}`, `{says}` in:\n{msg}"
    );
    assert!(msg.contains("or 0 to let dev-env pick"), "{msg}");
    assert_nothing_created(dir.path(), &name);
    drop(held);
}

#[test]
fn docker_host_names_the_engine_and_other_schemes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev-env.yaml");
    std::fs::write(&file, "name: elsewhere\nmanifests: []\n").unwrap();
    let config = file.to_str().unwrap();
    // `xtask` points DOCKER_HOST at a socket that does not exist.
    let out = xtask(dir.path(), &["--config", config, "dev", "down"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("cannot reach the Docker engine at unix:///nonexistent/docker.sock"),
        "{}",
        text(&out)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["--config", config, "dev", "down"])
        .env("DOCKER_HOST", "ssh://me@build.lan")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("`DOCKER_HOST=ssh://me@build.lan` is an ssh:// endpoint"),
        "{}",
        text(&out)
    );
}
