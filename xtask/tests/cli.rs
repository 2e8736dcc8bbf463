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
        (&["dev", "logs", "--help"], &["<COMPONENT>", "--follow"]),
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
    std::fs::write(&file, "name: other\ncluster: {provider: sim}\n").unwrap();
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
    let component = |name: &str| {
        format!(
            "  {name}:\n    image: {name}\n    build: {{cargo: {{package: {name}}}}}\n    rollout: {{kind: Deployment}}\n"
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
