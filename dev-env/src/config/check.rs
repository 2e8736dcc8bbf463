//! `Check::resolve`: the raw file checked key by key and every default
//! filled in, the one place defaults live.

use std::path::Path;

use super::{
    Build, CargoBinary, Cluster, Component, Config, DEFAULT_IPV4_SUBNET, DEFAULT_K3S_DISABLE,
    DEFAULT_K3S_IMAGE, DEFAULT_POD_START_GRACE, DEFAULT_POD_SUBNET, DEFAULT_REGISTRY_IMAGE,
    DEFAULT_SERVICE_SUBNET, DEFAULT_SIM_IMAGE, K3S_COMPONENTS, Network, Problem, Provider, Purpose,
    REGISTRY_CONTAINER_PORT, Registry, Rollout, RolloutKind,
    locate::Locations,
    raw::{
        RawBuild, RawCargoBuild, RawCluster, RawComponent, RawConfig, RawDockerBuild, RawNetwork,
        RawRegistry,
    },
    validate::{is_dns_label, is_host_port, is_repository},
};

pub(super) struct Check<'a> {
    pub(super) locations: &'a Locations,
    pub(super) root: &'a Path,
    pub(super) purpose: Purpose,
    pub(super) problems: Vec<Problem>,
}

impl Check<'_> {
    /// Runs `check`, keeping what it reports only when the whole file is
    /// read: what names no object is resolved as written for teardown.
    fn full_only<T>(&mut self, check: impl FnOnce(&mut Self) -> T) -> T {
        let before = self.problems.len();
        let value = check(self);
        if self.purpose == Purpose::Identity {
            self.problems.truncate(before);
        }
        value
    }

    pub(super) fn problem(
        &mut self,
        key: &str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.problems.push(Problem {
            location: self.locations.value(key),
            key: key.to_string(),
            message: message.into(),
            fix: fix.into(),
        });
    }

    /// Fills defaults and records every problem found on the way.
    pub(super) fn resolve(&mut self, raw: RawConfig, file: &Path) -> Config {
        let name = raw.name;
        self.dns_label("name", &name);
        let provider = raw.cluster.as_ref().and_then(|c| c.provider);
        if provider != Some(Provider::Existing) {
            self.full_only(|c| c.node_hostname(&name));
        }

        let network = self.network(raw.network.unwrap_or_default(), &name);

        let raw_registry = raw.registry.unwrap_or_default();
        let reachable_registry =
            raw_registry.external.is_some() || raw_registry.cluster_host.is_some();
        let registry = self.registry(raw_registry, &name);
        let cluster = self.cluster(raw.cluster.unwrap_or_default());
        self.full_only(|c| {
            if cluster.provider == Provider::Existing && !reachable_registry {
                // Pods of a cluster elsewhere cannot pull from a container on
                // this machine's Docker network.
                c.problem(
                    "cluster.provider",
                    "`provider: existing` needs a registry that cluster can pull from",
                    "set `registry.external` to a registry both this machine and the cluster reach, or `registry.clusterHost` to the address the cluster uses",
                );
            }
            c.disjoint(&[
                ("network.ipv4Subnet", network.ipv4_subnet),
                ("cluster.podSubnet", cluster.pod_subnet),
                ("cluster.serviceSubnet", cluster.service_subnet),
            ]);
        });

        let manifests = self.full_only(|c| {
            raw.manifests
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    c.existing_path(
                        &format!("manifests[{i}]"),
                        c.root,
                        m,
                        "a manifest file or directory",
                    )
                })
                .collect()
        });

        let components = self.full_only(|c| {
            let mut taken = std::collections::BTreeMap::new();
            raw.components
                .into_iter()
                .map(|(component, raw)| {
                    let resolved = c.component(&component, raw, &mut taken);
                    (component, resolved)
                })
                .collect()
        });

        Config {
            file: file.to_path_buf(),
            root: self.root.to_path_buf(),
            name,
            network,
            registry,
            cluster,
            manifests,
            components,
            locations: Locations::default(),
        }
    }

    fn network(&mut self, raw: RawNetwork, name: &str) -> Network {
        Network {
            name: self.docker_name("network.name", raw.name.unwrap_or_else(|| name.to_string())),
            ipv4_subnet: self.ipv4_subnet(
                "network.ipv4Subnet",
                raw.ipv4_subnet.as_deref(),
                DEFAULT_IPV4_SUBNET,
            ),
            ipv6_subnet: raw
                .ipv6_subnet
                .as_deref()
                .and_then(|s| self.ipv6_subnet("network.ipv6Subnet", s)),
        }
    }

    fn registry(&mut self, raw: RawRegistry, name: &str) -> Registry {
        if let Some(external) = &raw.external {
            if !is_host_port(external) {
                self.problem(
                    "registry.external",
                    format!("`{external}` is not a `host:port`"),
                    "write the address the host pushes to, such as `localhost:5000`",
                );
            }
            for (key, set) in [
                ("registry.name", raw.name.is_some()),
                ("registry.image", raw.image.is_some()),
                ("registry.hostPort", raw.host_port.is_some()),
                ("registry.volume", raw.volume.is_some()),
            ] {
                if set {
                    self.problem(
                        key,
                        "has no effect with `registry.external`: no registry container is created",
                        "remove it, or remove `external` to let dev-env run the registry",
                    );
                }
            }
        }
        let ca_file = self.full_only(|c| c.registry_access(&raw));
        let registry_name = self.docker_name(
            "registry.name",
            raw.name.unwrap_or_else(|| format!("{name}-registry")),
        );
        let cluster_host = match (&raw.cluster_host, &raw.external) {
            (Some(h), _) => {
                if !is_host_port(h) {
                    self.full_only(|c| {
                        c.problem(
                            "registry.clusterHost",
                            format!("`{h}` is not a `host:port`"),
                            "write the address pods pull from, such as `registry.internal:5000`",
                        );
                    });
                }
                h.clone()
            }
            (None, Some(external)) => external.clone(),
            (None, None) => format!("{registry_name}:{REGISTRY_CONTAINER_PORT}"),
        };
        Registry {
            ca_file,
            insecure: raw.insecure.unwrap_or(false),
            pull_secret: raw.pull_secret.unwrap_or(false),
            volume: self.docker_name(
                "registry.volume",
                raw.volume
                    .unwrap_or_else(|| format!("{name}-registry-data")),
            ),
            name: registry_name,
            image: self.full_only(|c| {
                c.image_ref(
                    "registry.image",
                    raw.image
                        .unwrap_or_else(|| DEFAULT_REGISTRY_IMAGE.to_string()),
                )
            }),
            host_port: raw.host_port.unwrap_or(0),
            external: raw.external,
            cluster_host,
        }
    }

    /// `registry.caFile` (relative to the file's directory),
    /// `registry.insecure` and `registry.pullSecret`, which concern only an
    /// external registry.
    fn registry_access(&mut self, raw: &RawRegistry) -> Option<std::path::PathBuf> {
        if raw.external.is_none() {
            for (key, set, why) in [
                (
                    "registry.caFile",
                    raw.ca_file.is_some(),
                    "speaks plain HTTP on 127.0.0.1",
                ),
                (
                    "registry.insecure",
                    raw.insecure.is_some(),
                    "speaks plain HTTP on 127.0.0.1",
                ),
                (
                    "registry.pullSecret",
                    raw.pull_secret.is_some(),
                    "needs no credentials",
                ),
            ] {
                if set {
                    self.problem(
                        key,
                        format!(
                            "applies only to `registry.external`: the registry dev-env runs {why}"
                        ),
                        "remove it, or set `registry.external` to the registry it is for",
                    );
                }
            }
        }
        if raw.insecure == Some(true) && raw.ca_file.is_some() {
            self.problem(
                "registry.caFile",
                "has no effect with `registry.insecure: true`, which speaks plain HTTP",
                "remove `insecure` to use TLS with this CA, or remove `caFile`",
            );
        }
        let file = raw.ca_file.as_deref()?;
        let root = self.root.to_path_buf();
        Some(self.existing_path(
            "registry.caFile",
            &root,
            file,
            "the PEM CA certificate that signed the registry's certificate",
        ))
    }

    fn cluster(&mut self, raw: RawCluster) -> Cluster {
        let provider = raw.provider.unwrap_or(Provider::K3s);
        let image = self.full_only(|c| c.node_image(provider, raw.image));
        self.context(provider, raw.context.as_deref());
        let (pod_subnet, service_subnet) = self.full_only(|c| {
            (
                c.ipv4_subnet(
                    "cluster.podSubnet",
                    raw.pod_subnet.as_deref(),
                    DEFAULT_POD_SUBNET,
                ),
                c.ipv4_subnet(
                    "cluster.serviceSubnet",
                    raw.service_subnet.as_deref(),
                    DEFAULT_SERVICE_SUBNET,
                ),
            )
        });
        let disable = self.disable(provider, raw.disable);
        let pod_start_grace = self.grace(raw.pod_start_grace.as_deref());
        Cluster {
            provider,
            image,
            context: raw.context,
            pod_subnet,
            service_subnet,
            disable,
            pod_start_grace,
            sim_source: None,
        }
    }

    /// `cluster.disable`: k3s components only, and only for k3s.
    fn disable(&mut self, provider: Provider, declared: Option<Vec<String>>) -> Vec<String> {
        let Some(declared) = declared else {
            return match provider {
                Provider::K3s => DEFAULT_K3S_DISABLE
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                Provider::Sim | Provider::Existing => Vec::new(),
            };
        };
        if provider != Provider::K3s {
            self.problem(
                "cluster.disable",
                format!(
                    "has no effect with `provider: {provider}`: only k3s starts these components"
                ),
                "remove `disable`, or choose `provider: k3s`",
            );
            return Vec::new();
        }
        for (i, item) in declared.iter().enumerate() {
            if !K3S_COMPONENTS.contains(&item.as_str()) {
                self.problem(
                    &format!("cluster.disable[{i}]"),
                    format!("`{item}` is not a component k3s can disable"),
                    format!("use some of: {}", K3S_COMPONENTS.join(", ")),
                );
            }
        }
        declared
    }

    /// `cluster.podStartGrace`: a duration such as `60s` or `2m`.
    fn grace(&mut self, declared: Option<&str>) -> std::time::Duration {
        let Some(text) = declared else {
            return DEFAULT_POD_START_GRACE;
        };
        match humantime::parse_duration(text) {
            Ok(grace) if !grace.is_zero() => grace,
            Ok(_) => {
                self.problem(
                    "cluster.podStartGrace",
                    "is zero: every pod would fail the moment it is created",
                    "give a duration such as `60s` or `2m`",
                );
                DEFAULT_POD_START_GRACE
            }
            Err(e) => {
                self.problem(
                    "cluster.podStartGrace",
                    format!("`{text}` is not a duration ({e})"),
                    "give a duration such as `60s` or `2m`",
                );
                DEFAULT_POD_START_GRACE
            }
        }
    }

    fn node_image(&mut self, provider: Provider, declared: Option<String>) -> String {
        let image = match provider {
            Provider::K3s => declared.unwrap_or_else(|| DEFAULT_K3S_IMAGE.to_string()),
            Provider::Sim => declared.unwrap_or_else(|| DEFAULT_SIM_IMAGE.to_string()),
            Provider::Existing => {
                if declared.is_some() {
                    self.problem(
                        "cluster.image",
                        "has no effect with `provider: existing`: no node is created",
                        "remove `image`, or choose `provider: k3s` or `provider: sim`",
                    );
                }
                String::new()
            }
        };
        if image.is_empty() {
            image
        } else {
            self.image_ref("cluster.image", image)
        }
    }

    fn context(&mut self, provider: Provider, context: Option<&str>) {
        match (provider, context) {
            (Provider::Existing, None) => self.problem(
                "cluster.provider",
                "`provider: existing` needs `context`, so dev-env never acts on whatever context happens to be current",
                "add `context: <name>` from `kubectl config get-contexts`",
            ),
            (Provider::Existing, Some(c)) if c.trim().is_empty() => {
                self.problem("cluster.context", "is empty", "name a context from `kubectl config get-contexts`")
            }
            (Provider::K3s | Provider::Sim, Some(_)) => self.problem(
                "cluster.context",
                "is only used with `provider: existing`; k3s and sim clusters get their own kubeconfig",
                "remove `context`, or set `provider: existing`",
            ),
            _ => {}
        }
    }

    fn component(
        &mut self,
        component: &str,
        raw: RawComponent,
        taken: &mut std::collections::BTreeMap<u16, String>,
    ) -> Component {
        let at = format!("components.{component}");
        if !is_dns_label(component) {
            self.problems.push(Problem {
                location: self.locations.key(&at),
                key: at.clone(),
                message: format!("component name `{component}` is not a DNS label"),
                fix: String::from("use lowercase letters, digits and `-` (at most 63, starting and ending alphanumeric)"),
            });
        }
        let image_key = format!("{at}.image");
        if !is_repository(&raw.image) {
            let fix = if raw.image.contains(':') || raw.image.contains('@') {
                "write the repository path only, such as `demo/worker`: dev-env adds the registry host and the `:dev` tag"
            } else {
                "use lowercase path components separated by `/`, such as `demo/worker`"
            };
            self.problem(
                &image_key,
                format!("`{}` is not an image repository path", raw.image),
                fix,
            );
        }
        let build = self.build(&at, raw.build);
        let rollout_key = format!("{at}.rollout");
        let rollout = match raw.rollout {
            Some(r) => Rollout {
                kind: r.kind,
                wait_for_termination: r.wait_for_termination.unwrap_or(false),
                namespace: self.dns_label(
                    &format!("{rollout_key}.namespace"),
                    &r.namespace.unwrap_or_else(|| "default".into()),
                ),
                name: self.dns_subdomain(
                    &format!("{rollout_key}.name"),
                    &r.name.unwrap_or_else(|| component.to_string()),
                ),
                container: self.dns_label(
                    &format!("{rollout_key}.container"),
                    &r.container.unwrap_or_else(|| component.to_string()),
                ),
            },
            None => {
                self.missing(&at, "rollout", "add `rollout: {kind: Deployment, namespace: <ns>, name: <deployment>, container: <container>}`");
                Rollout {
                    kind: RolloutKind::Deployment,
                    namespace: String::new(),
                    name: String::new(),
                    container: String::new(),
                    wait_for_termination: false,
                }
            }
        };
        let forward = self.forwards(component, &raw.forward, taken);
        Component {
            image: raw.image,
            build,
            rollout,
            forward,
        }
    }

    fn build(&mut self, at: &str, raw: Option<RawBuild>) -> Build {
        let key = format!("{at}.build");
        let fallback = Build::Cargo(CargoBinary {
            package: String::new(),
            bin: String::new(),
            profile: String::from(super::DEFAULT_PROFILE),
            target: None,
        });
        match raw {
            None => {
                self.missing(at, "build", "add `build: {cargo: {package: <package>, bin: <bin>}}` or `build: {docker: {context: ., dockerfile: Dockerfile}}`");
                fallback
            }
            Some(RawBuild {
                cargo: Some(_),
                docker: Some(_),
            }) => {
                self.problems.push(Problem {
                    location: self.locations.key(&key),
                    key,
                    message: String::from("declares both `cargo` and `docker`"),
                    fix: String::from("keep exactly one build backend"),
                });
                fallback
            }
            Some(RawBuild {
                cargo: None,
                docker: None,
            }) => {
                self.problems.push(Problem {
                    location: self.locations.key(&key),
                    key,
                    message: String::from("declares no build backend"),
                    fix: String::from(
                        "add `cargo: {package, bin}` or `docker: {context, dockerfile}`",
                    ),
                });
                fallback
            }
            Some(RawBuild {
                cargo: Some(c),
                docker: None,
            }) => Build::Cargo(self.cargo_binary(&format!("{key}.cargo"), c, "builds the binary")),
            Some(RawBuild {
                cargo: None,
                docker: Some(d),
            }) => self.docker_build(&format!("{key}.docker"), d),
        }
    }

    fn cargo_binary(&mut self, key: &str, raw: RawCargoBuild, role: &str) -> CargoBinary {
        if raw.package.trim().is_empty() {
            self.problem(
                &format!("{key}.package"),
                "is empty",
                format!("name the workspace package whose binary {role}"),
            );
        }
        let bin = raw.bin.unwrap_or_else(|| raw.package.clone());
        let profile = raw
            .profile
            .unwrap_or_else(|| String::from(super::DEFAULT_PROFILE));
        if !is_profile_name(&profile) {
            self.problem(
                &format!("{key}.profile"),
                format!("`{profile}` is not a cargo profile name"),
                "name a profile of the workspace (`dev`, `release`, or a `[profile.<name>]` of its Cargo.toml): letters, digits, `-` and `_`",
            );
        }
        if let Some(target) = &raw.target
            && !is_triple(target)
        {
            self.problem(
                &format!("{key}.target"),
                format!("`{target}` is not a Rust target triple"),
                "write it as `rustc --print target-list` does, such as `aarch64-unknown-linux-musl`, or leave it out to build for the cluster's platform",
            );
        }
        CargoBinary {
            package: raw.package,
            bin,
            profile,
            target: raw.target,
        }
    }

    fn docker_build(&mut self, key: &str, raw: RawDockerBuild) -> Build {
        let context = self.existing_path(
            &format!("{key}.context"),
            self.root,
            raw.context.as_deref().unwrap_or("."),
            "the build context directory",
        );
        let dockerfile = self.existing_path(
            &format!("{key}.dockerfile"),
            &context,
            raw.dockerfile.as_deref().unwrap_or("Dockerfile"),
            "a Dockerfile (relative to the build context)",
        );
        let cargo = raw
            .cargo
            .map(|c| self.cargo_binary(&format!("{key}.cargo"), c, "the Dockerfile copies"));
        Build::Docker {
            context,
            dockerfile,
            target: raw.target,
            build_args: raw.build_args,
            cargo,
        }
    }

    fn missing(&mut self, at: &str, field: &str, fix: &str) {
        self.problems.push(Problem {
            location: self.locations.key(at),
            key: format!("{at}.{field}"),
            message: format!("missing `{field}`"),
            fix: fix.to_string(),
        });
    }
}

/// Cargo's rule for profile names: letters, digits, `-` and `_`.
fn is_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `arch-vendor-os[-abi]`: three or four parts of letters, digits, `_` and
/// `.`.
fn is_triple(triple: &str) -> bool {
    let parts: Vec<&str> = triple.split('-').collect();
    (3..=4).contains(&parts.len())
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        })
}
