//! What `dev init` reads off the manifests: the workloads dev-env can roll
//! out (Deployments, WorkerPools), the containers of every pod template,
//! and which binary package of the workspace each container's image is.

use std::path::Path;

use crate::{config::RolloutKind, manifest::Manifest};

/// A container of a pod template in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Container {
    /// How dev-env rolls the workload out, when it can.
    pub(super) kind: Option<RolloutKind>,
    /// `Kind/namespace/name` of the workload, as notes name it.
    pub(super) workload: String,
    pub(super) namespace: Option<String>,
    pub(super) name: String,
    pub(super) container: String,
    /// The image's repository path (`demo/worker`): no registry host, tag
    /// or digest.
    pub(super) repository: String,
    /// `file:line` of the workload's document.
    pub(super) found_in: String,
}

/// A binary of a workspace package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Binary {
    pub(super) package: String,
    pub(super) bin: String,
}

/// Every container of every pod template the manifests declare: a
/// Deployment's, a WorkerPool's, and those of other workloads dev-env
/// cannot roll out (`kind: None`), for the notes.
pub(super) fn containers(manifests: &[Manifest], root: &Path) -> Vec<Container> {
    let mut out = Vec::new();
    for m in manifests {
        let Some(template) = m.object.pointer("/spec/template/spec") else {
            continue;
        };
        let kind = match (m.api_version.as_str(), m.kind.as_str()) {
            ("apps/v1", "Deployment") => Some(RolloutKind::Deployment),
            (_, "WorkerPool") => Some(RolloutKind::WorkerPool),
            _ => None,
        };
        let file = m.file.strip_prefix(root).unwrap_or(&m.file);
        let found_in = format!("{}:{}", file.display(), m.line);
        let listed = template.get("containers").and_then(|c| c.as_array());
        for c in listed.into_iter().flatten() {
            let (Some(container), Some(image)) = (
                c.get("name").and_then(|n| n.as_str()),
                c.get("image").and_then(|i| i.as_str()),
            ) else {
                continue;
            };
            out.push(Container {
                kind,
                workload: m.display_name(),
                namespace: m.namespace.clone(),
                name: m.name.clone(),
                container: container.to_string(),
                repository: repository_path(image),
                found_in: found_in.clone(),
            });
        }
    }
    out
}

/// The repository path of an image reference: `registry:5000/demo/worker:dev`
/// is `demo/worker`. The first component is a registry host when it has a
/// `.` or a `:`, or is `localhost`, as Docker reads references.
pub(super) fn repository_path(image: &str) -> String {
    let image = image.split_once('@').map_or(image, |(name, _)| name);
    let image = match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name,
        _ => image,
    };
    match image.split_once('/') {
        Some((host, rest)) if host.contains('.') || host.contains(':') || host == "localhost" => {
            rest.to_string()
        }
        _ => image.to_string(),
    }
}

/// The binary an image's repository path names: the binary named like its
/// last component, preferring the package of that name too.
pub(super) fn binary_of<'a>(repository: &str, binaries: &'a [Binary]) -> Option<&'a Binary> {
    let last = repository.rsplit('/').next().unwrap_or(repository);
    let named: Vec<&Binary> = binaries.iter().filter(|b| b.bin == last).collect();
    named
        .iter()
        .find(|b| b.package == last)
        .or_else(|| named.first())
        .copied()
}

/// Whether a Dockerfile copies a prebuilt binary `bin` from its context
/// (`COPY bin /bin` or `ADD ./bin …`): then dev-env builds it first.
pub(super) fn copies_binary(dockerfile: &str, bin: &str) -> bool {
    dockerfile.lines().any(|line| {
        let mut words = line.split_whitespace();
        let instruction = words.next().unwrap_or_default();
        if !instruction.eq_ignore_ascii_case("COPY") && !instruction.eq_ignore_ascii_case("ADD") {
            return false;
        }
        let args: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        let sources = &args[..args.len().saturating_sub(1)];
        sources
            .iter()
            .any(|s| s.trim_start_matches("./").trim_start_matches('/') == bin)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_paths_drop_the_host_the_tag_and_the_digest() {
        for (image, path) in [
            ("dev-env-registry:5000/demo/worker:dev", "demo/worker"),
            ("localhost/app", "app"),
            ("ghcr.io/team/api@sha256:abc", "team/api"),
            ("registry:5000/x/app", "x/app"),
            ("team/app:1.2", "team/app"),
            ("app", "app"),
        ] {
            assert_eq!(repository_path(image), path, "{image}");
        }
    }

    #[test]
    fn an_image_names_the_binary_of_its_last_component() {
        let binaries = [
            Binary {
                package: String::from("tools"),
                bin: String::from("api"),
            },
            Binary {
                package: String::from("api"),
                bin: String::from("api"),
            },
            Binary {
                package: String::from("worker"),
                bin: String::from("worker"),
            },
        ];
        assert_eq!(binary_of("team/api", &binaries), Some(&binaries[1]));
        assert_eq!(binary_of("demo/worker", &binaries), Some(&binaries[2]));
        assert_eq!(binary_of("demo/redis", &binaries), None);
    }

    #[test]
    fn a_dockerfile_that_copies_the_binary_is_told_apart() {
        let prebuilt = "FROM scratch\nCOPY controller-manager /controller-manager\n";
        assert!(copies_binary(prebuilt, "controller-manager"));
        assert!(copies_binary(
            "FROM scratch\ncopy --chmod=755 ./app /app\n",
            "app"
        ));
        let from_source = "FROM rust AS build\nCOPY . .\nRUN cargo build --release\nCOPY --from=build /src/target/release/app /app\n";
        assert!(!copies_binary(from_source, "app"));
    }

    #[test]
    fn containers_of_deployments_and_worker_pools_are_rollout_targets() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: team}\n\
                    spec: {template: {spec: {containers: [{name: main, image: 'r:5000/team/api:dev'}]}}}\n\
                    ---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\n\
                    spec: {template: {spec: {containers: [{name: db, image: postgres:17}]}}}\n\
                    ---\napiVersion: demo.dev-env.io/v1alpha1\nkind: WorkerPool\nmetadata: {name: default, namespace: demo}\n\
                    spec: {template: {spec: {containers: [{name: worker, image: demo/worker}]}}}\n";
        let root = Path::new("/ws");
        let manifests = crate::manifest::parse(&root.join("manifests/app.yaml"), text).unwrap();
        let found = containers(&manifests, root);
        let summary: Vec<(Option<RolloutKind>, &str, &str, &str)> = found
            .iter()
            .map(|c| {
                (
                    c.kind,
                    c.workload.as_str(),
                    c.container.as_str(),
                    c.repository.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    Some(RolloutKind::Deployment),
                    "Deployment/team/api",
                    "main",
                    "team/api"
                ),
                (None, "StatefulSet/db", "db", "postgres"),
                (
                    Some(RolloutKind::WorkerPool),
                    "WorkerPool/demo/default",
                    "worker",
                    "demo/worker"
                ),
            ]
        );
        assert_eq!(found[0].found_in, "manifests/app.yaml:1");
    }
}
