//! dev-env adopted by a cargo workspace of its own, outside this
//! repository, set up as README.md's "Use dev-env in your repository"
//! says: its xtask is the README's, with path dependencies standing in for
//! the git ones. `dev init`, `dev up` (sim), `push-image`, then
//! `dev reset --purge`, which leaves nothing of it behind.
//!
//! Its xtask compiles against this repository's compiled dependencies:
//! `build-dir` is the repository's `target/` (the dependency graph of
//! `cargo xtask` is the same, so the same artifacts serve; dev-env and
//! dev-env-cli, a path dependency there and members here, build apart) and
//! the binaries go to `target/adopt/`, so this repository's own
//! `target/debug/xtask` is never replaced. Its `Cargo.lock` starts as a
//! copy of this repository's, for the same versions.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use dev_env_tests::{DockerCleanup, random_subnet, repo_root, require_docker, unique_name};
use xshell::{Shell, cmd};

/// The workspace's one service: std only, so its static build takes
/// seconds.
const HELLO: &str = r#"use std::io::{Read, Write};

fn main() {
    let listener = std::net::TcpListener::bind("0.0.0.0:8080").expect("port 8080");
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nhello\n");
    }
}
"#;

const MANIFEST: &str = "apiVersion: v1
kind: Namespace
metadata: {name: adopt}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hello, namespace: adopt}
spec:
  replicas: 1
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: hello
          image: registry:5000/adopt/hello:dev
          ports: [{containerPort: 8080}]
          readinessProbe: {httpGet: {path: /, port: 8080}}
";

#[test]
fn a_new_workspace_adopts_dev_env_as_the_readme_says() {
    require_docker();
    let team = Workspace::new();
    let out = team.cargo_xtask(&["dev", "init"]);
    assert!(out.status.success(), "dev init: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("hello: image adopt/hello, cargo build of hello/hello")
            && stdout.contains("check:"),
        "{stdout}"
    );
    team.name_the_environment();
    let again = team.cargo_xtask(&["dev", "init"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("never overwrites"),
        "{}",
        text(&again)
    );

    let out = team.cargo_xtask(&["dev", "up"]);
    assert!(out.status.success(), "dev up: {}", text(&out));
    let out = team.cargo_xtask(&["push-image", "hello", "--json"]);
    assert!(out.status.success(), "push-image: {}", text(&out));
    let pushed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let digest = pushed["components"][0]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("a digest in {pushed}"))
        .to_string();
    let running = team.running();
    assert!(
        !running.is_empty() && running.iter().all(|id| id.ends_with(&digest)),
        "Ready pods run {running:?}, pushed {digest}"
    );

    let out = team.cargo_xtask(&["dev", "reset", "--purge"]);
    assert!(out.status.success(), "dev reset --purge: {}", text(&out));
    for kind in ["container", "network", "volume"] {
        let left = team.labelled(kind);
        assert!(left.is_empty(), "{kind}s of {} left: {left:?}", team.name);
    }
    assert!(
        !team.state_dir().exists(),
        "{} is left",
        team.state_dir().display()
    );
}

/// The adopting workspace in a temporary directory: members `hello` and
/// `xtask`, `manifests/hello.yaml`, and an environment of its own.
struct Workspace {
    dir: tempfile::TempDir,
    name: String,
    _cleanup: DockerCleanup,
}

impl Workspace {
    fn new() -> Workspace {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let name = unique_name("adopt");
        let repo = repo_root();
        assert!(
            !dir.path().starts_with(&repo),
            "the workspace must lie outside the repository"
        );
        let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
        let blocks = readme_blocks(&readme, "## Use dev-env in your repository");
        let block = |lang: &str, n: usize| -> String {
            let of: Vec<&String> = blocks
                .iter()
                .filter(|(l, _)| l == lang)
                .map(|(_, b)| b)
                .collect();
            of.get(n)
                .unwrap_or_else(|| panic!("README's section has no {lang} block #{n}"))
                .to_string()
        };
        let xtask_manifest = with_path_dependencies(&block("toml", 0), &repo);
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("Cargo.toml", &workspace_manifest(&repo));
        write("xtask/Cargo.toml", &xtask_manifest);
        write("xtask/src/main.rs", &block("rust", 0));
        write(".cargo/config.toml", &block("toml", 2));
        // Read by the `cargo xtask` runs of this test only (they start in
        // `xtask/`); dev-env's own cargo runs start at the root.
        let target = repo.join("target");
        write(
            "xtask/.cargo/config.toml",
            &format!(
                "[build]\ntarget-dir = {:?}\nbuild-dir = {:?}\n",
                target.join("adopt"),
                target
            ),
        );
        write(
            "hello/Cargo.toml",
            "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
        );
        write("hello/src/main.rs", HELLO);
        write("manifests/hello.yaml", MANIFEST);
        std::fs::copy(repo.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();
        let mut cleanup = DockerCleanup::default();
        cleanup.containers = vec![format!("{name}-server-0"), format!("{name}-registry")];
        cleanup.volumes = vec![format!("{name}-registry-data")];
        cleanup.networks = vec![name.clone()];
        Workspace {
            dir,
            name,
            _cleanup: cleanup,
        }
    }

    /// `cargo xtask <args>`, run from the workspace's `xtask/` directory.
    fn cargo_xtask(&self, args: &[&str]) -> Output {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
        Command::new(cargo)
            .arg("xtask")
            .args(args)
            .current_dir(self.dir.path().join("xtask"))
            .env_remove("DEV_ENV_CONFIG")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_BUILD_DIR")
            .output()
            .expect("cargo runs")
    }

    /// Gives the file `dev init` wrote this test's name and a subnet of its
    /// own, so it never meets another test's environment.
    fn name_the_environment(&self) {
        let path = self.dir.path().join("dev-env.yaml");
        let written = std::fs::read_to_string(&path).unwrap();
        let guessed = written
            .lines()
            .find(|l| l.starts_with("name: "))
            .unwrap_or_else(|| panic!("no name in:\n{written}"))
            .to_string();
        let ours = format!(
            "name: {}\nnetwork: {{ipv4Subnet: {}}}",
            self.name,
            random_subnet()
        );
        std::fs::write(&path, written.replace(&guessed, &ours)).unwrap();
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join(".dev-env").join(&self.name)
    }

    /// `imageID`s of the Ready, non-terminating pods of `hello`.
    fn running(&self) -> Vec<String> {
        dev_env_tests::serving_image_ids(
            &self.state_dir().join("kubeconfig.host"),
            "adopt",
            "app=hello",
        )
    }

    /// Docker objects of `kind` labelled with the environment's name.
    fn labelled(&self, kind: &str) -> Vec<String> {
        let sh = Shell::new().unwrap();
        let filter = format!("label=dev-env.name={}", self.name);
        let list = match kind {
            "container" => cmd!(sh, "docker ps -aq --filter {filter}"),
            _ => cmd!(sh, "docker {kind} ls -q --filter {filter}"),
        };
        list.read().unwrap().lines().map(str::to_string).collect()
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Pod containers, however the test ended; the node, registry and
        // network follow with the cleanup guard.
        let Ok(sh) = Shell::new() else { return };
        for id in self.labelled("container") {
            let _ = cmd!(sh, "docker rm -f -v {id}")
                .quiet()
                .ignore_status()
                .ignore_stdout()
                .ignore_stderr()
                .run();
        }
    }
}

/// The workspace's root manifest: its members, and this repository's
/// profiles, so the dependencies compile as they do here.
fn workspace_manifest(repo: &Path) -> String {
    let ours = std::fs::read_to_string(repo.join("Cargo.toml")).unwrap();
    let profiles = ours.find("[profile.").map_or("", |start| &ours[start..]);
    format!("[workspace]\nresolver = \"3\"\nmembers = [\"hello\", \"xtask\"]\n\n{profiles}")
}

/// The README's `xtask/Cargo.toml` with each git dependency on dev-env's
/// repository replaced by the path of the package in this checkout.
fn with_path_dependencies(manifest: &str, repo: &Path) -> String {
    let mut replaced = 0;
    let lines: Vec<String> = manifest
        .lines()
        .map(|line| {
            let Some((package, rest)) = line.split_once(" = { git = ") else {
                return line.to_string();
            };
            assert!(rest.ends_with('}'), "{line}");
            replaced += 1;
            format!("{package} = {{ path = {:?} }}", repo.join(package))
        })
        .collect();
    assert_eq!(
        replaced, 2,
        "dev-env-cli and kube-sim by git in:\n{manifest}"
    );
    lines.join("\n") + "\n"
}

/// The fenced code blocks (language, text) of the README section that
/// starts with the heading `heading`.
fn readme_blocks(readme: &str, heading: &str) -> Vec<(String, String)> {
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README.md has no `{heading}`"));
    let section = &readme[start + heading.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in section.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.to_string(), String::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
