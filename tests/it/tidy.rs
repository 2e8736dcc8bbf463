//! Checks that keep the repository honest: the documents say what the code
//! does, and the repository's own files are valid.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    dev_env_tests::repo_root()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() && !name.starts_with('.') && name != "target" {
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = read("README.md");
    let after = readme
        .split("Run the tests:")
        .nth(1)
        .expect("README has a `Run the tests:` section");
    let command = after
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.lines().next())
        .expect("a sh block follows");
    let ci = read(".ci/run");
    let last = ci.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(
        last.trim(),
        command.trim(),
        ".ci/run must end with the README's test command"
    );
    assert!(
        readme.contains("```sh\ncargo xtask dev up\n```"),
        "README shows the main command"
    );
}

#[test]
fn the_repository_environment_and_manifests_are_valid() {
    let config = dev_env::config::Config::load(&root().join("dev-env.yaml")).unwrap();
    let manifests = dev_env::manifest::load(&config.manifests).unwrap();
    assert!(!manifests.is_empty());
}

#[test]
fn architecture_names_every_module() {
    let architecture = read("ARCHITECTURE.md");
    let mut files = Vec::new();
    rust_files(&root().join("dev-env/src"), &mut files);
    let missing: Vec<_> = files
        .iter()
        .map(|f| {
            f.strip_prefix(root().join("dev-env/src"))
                .unwrap()
                .to_string_lossy()
                .to_string()
        })
        .filter(|f| f != "lib.rs" && !f.ends_with("tests.rs") && !architecture.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map lacks {missing:?}"
    );
}

#[test]
fn no_test_is_ignored() {
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    let marker = ["#[", "ignore"].concat();
    let offenders: Vec<_> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().contains(&marker))
        .map(|f| f.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "ignored tests in {offenders:?}");
}
