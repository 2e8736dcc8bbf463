//! Server-side apply of the repository's manifests under one field manager,
//! the way `kubectl apply --server-side --force-conflicts` does it: CRDs
//! first (then wait for `Established`), namespaces next, the rest after.
//!
//! Images of declared components are pinned to their last pushed digest
//! before anything is sent, so re-applying never rolls a component back to
//! an older image.

use std::{collections::HashMap, time::Duration};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{DynamicObject, GroupVersionKind, Patch, PatchParams, ValidationDirective},
    discovery::{ApiCapabilities, ApiResource, Scope},
    runtime::wait::{await_condition, conditions},
};
use serde_json::{Value, json};

use crate::{
    config::Config,
    manifest::{Manifest, Phase},
    state::State,
};

pub mod applyset;
mod prune;
pub mod pull_secret;

pub use applyset::{ApplySet, Member};
pub use prune::{Held, PRUNE_ANNOTATION, Pruning, refuse_everything, would_prune};
pub use pull_secret::PullSecret;

/// The field manager of everything the harness applies.
pub const FIELD_MANAGER: &str = "dev-env";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{at}: the cluster does not serve `{gvk}` ({}); check `apiVersion` and `kind`, or add its CRD to the manifests",
        api_error(error)
    )]
    UnknownKind {
        at: String,
        gvk: String,
        error: kube::Error,
    },
    #[error(
        "{}\n{}; fix the manifests and run again",
        problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"),
        if *applied { "only the CustomResourceDefinitions were applied" } else { "nothing was applied" }
    )]
    Invalid {
        /// Every object the server refused, each an `UnknownKind` or `Apply`.
        problems: Vec<Error>,
        /// Whether the CRDs of the set were applied before the check failed.
        applied: bool,
    },
    #[error("{at}: {what}: the server refuses it: {}", api_error(error))]
    Refused {
        /// `file:line:col` of the field the server names, or of the
        /// document.
        at: String,
        what: String,
        error: kube::Error,
    },
    #[error("{at}: applying {what} failed: {}", api_error(error))]
    Apply {
        at: String,
        what: String,
        error: kube::Error,
    },
    #[error("CRD `{name}` was not Established within {}s; check `kubectl get crd {name} -o yaml`", timeout.as_secs())]
    NotEstablished { name: String, timeout: Duration },
    #[error(
        "{at}: {what} already carries the label `{}`; dev-env sets it on every object it applies, remove it from the manifest",
        applyset::PART_OF
    )]
    Labelled { at: String, what: String },
    #[error(
        "the manifests declare no object, and the environment's ApplySet ({set}) has {count} member(s): nothing was applied or pruned; \
         check `manifests:` in the environment file, or run again with --prune-all to prune them all"
    )]
    PruneEverything { count: usize, set: String },
    #[error(transparent)]
    ApplySet(#[from] applyset::Error),
    #[error(transparent)]
    PullSecret(#[from] pull_secret::Error),
    #[error("cannot watch CRD `{name}` until it is Established")]
    Watch {
        name: String,
        #[source]
        source: kube::runtime::wait::Error,
    },
}

/// A Kubernetes API error as one short line: the server's message and code.
pub fn api_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => {
            let message = status.message.trim();
            match (status.code, status.reason.as_str()) {
                (0, _) => message.to_string(),
                (code, "") => format!("{message} ({code})"),
                (code, reason) => format!("{message} ({code} {reason})"),
            }
        }
        other => other.to_string(),
    }
}

/// What one apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `Kind/namespace/name`.
    pub name: String,
    /// Whether the object's resourceVersion moved.
    pub changed: bool,
}

/// Repository path (`demo/worker`) → `<cluster host>/demo/worker@digest`
/// for every component pushed.
pub fn pinned_images(config: &Config, state: &State) -> HashMap<String, String> {
    config
        .components
        .iter()
        .filter_map(|(name, c)| {
            let pushed = state.images.get(name)?;
            let pinned = format!(
                "{}/{}@{}",
                config.registry.cluster_host, c.image, pushed.digest
            );
            Some((c.image.clone(), pinned))
        })
        .collect()
}

/// Rewrites every `image:` of every container list in `object` whose
/// repository path is a key of `pins` (whatever its registry host, tag or
/// digest) to its pinned reference, so manifests name images the same way
/// in every environment. Returns how many were rewritten.
pub fn pin_images(object: &mut Value, pins: &HashMap<String, String>) -> usize {
    let mut count = 0;
    match object {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if matches!(
                    key.as_str(),
                    "containers" | "initContainers" | "ephemeralContainers"
                ) {
                    for container in value.as_array_mut().into_iter().flatten() {
                        if let Some(Value::String(image)) = container.get_mut("image")
                            && let Some(pinned) = pins.get(path_of(repository_of(image)))
                            && image != pinned
                        {
                            *image = pinned.clone();
                            count += 1;
                        }
                    }
                } else {
                    count += pin_images(value, pins);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                count += pin_images(item, pins);
            }
        }
        _ => {}
    }
    count
}

/// A repository without its registry host: the first component is a host
/// when it has a `.` or a `:` or is `localhost`, as Docker reads names.
pub fn path_of(repository: &str) -> &str {
    match repository.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => rest,
        _ => repository,
    }
}

/// The repository part of an image reference: without `@digest` and
/// without a `:tag` after the last `/`.
pub fn repository_of(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

/// The KEP-1755 ConfigMap that tells tools where the local registry is.
pub fn local_registry_hosting(config: &Config, host: &str) -> Value {
    let doc = format!(
        "host: \"{host}\"\nhostFromContainerRuntime: \"{cluster}\"\nhostFromClusterNetwork: \"{cluster}\"\nhelp: \"https://github.com/kubernetes/enhancements/tree/master/keps/sig-cluster-lifecycle/generic/1755-communicating-a-local-registry\"\n",
        cluster = config.registry.cluster_host
    );
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "local-registry-hosting", "namespace": "kube-public"},
        "data": {"localRegistryHosting.v1": doc},
    })
}

/// How [`apply_all`] runs.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Repository path → pinned image, from [`pinned_images`].
    pub pins: &'a HashMap<String, String>,
    /// Deadline of the wait for CRDs to be established.
    pub timeout: Duration,
    /// The set every applied object joins.
    pub set: &'a ApplySet,
    /// What to prune of the set's members that the manifests no longer
    /// declare.
    pub prune: Prune,
    /// Pull credentials for the components' namespaces, applied once the
    /// namespaces are and before the workloads (`registry.pullSecret`).
    pub pull_secret: Option<&'a PullSecret>,
}

/// What a run may prune of the set's members that the manifests no longer
/// declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prune {
    /// Prune at all (`--no-prune` clears it).
    pub enabled: bool,
    /// Also when the manifests declare no object at all (`--prune-all`).
    pub all: bool,
    /// Also Namespaces and CRDs whose deletion would delete objects outside
    /// the prune (`--prune-destructive`).
    pub destructive: bool,
}

impl Prune {
    /// What the manifests declared away, and nothing that takes more.
    pub const DECLARED: Prune = Prune {
        enabled: true,
        all: false,
        destructive: false,
    };
    /// Nothing (`--no-prune`).
    pub const OFF: Prune = Prune {
        enabled: false,
        all: false,
        destructive: false,
    };
}

impl Default for Prune {
    fn default() -> Prune {
        Prune::DECLARED
    }
}

/// What [`apply_all`] did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub applied: Vec<Applied>,
    /// What happened to the members of the set that no manifest declares.
    pub pruning: Pruning,
}

/// Applies `manifests` (already in apply order) with images pinned, all or
/// nothing: every object is first validated by the server (a dry run with
/// strict field validation), and nothing is applied unless all pass. Custom
/// resources whose CRD the same set declares cannot be validated before
/// that CRD exists: they are validated once the CRDs are applied and
/// established, before any other object is applied.
///
/// Every object joins the environment's ApplySet; once all are applied, the
/// set's members that no manifest declares any more are pruned (see
/// [`prune`] for what is kept). Manifests that declare no object while the
/// set has members change nothing, unless `options.prune.all`.
pub async fn apply_all(
    client: &Client,
    manifests: &[Manifest],
    options: Options<'_>,
) -> Result<Report, Error> {
    let objects = prepare(manifests, options)?;
    prune::refuse_everything(client, manifests, options.set, options.prune).await?;
    let mut kinds = Kinds::default();
    let declared = Declared::of(&objects);
    let deferred = validate(client, &mut kinds, &objects, &declared, Validation::Now).await?;
    let recorded = options.set.recorded(client).await?;
    let mut scope = recorded.clone();
    scope.extend(&prune::scope_of(manifests, &kinds));
    options.set.record(client, &scope).await?;

    let (crds, rest): (Vec<&Object<'_>>, Vec<&Object<'_>>) = objects
        .iter()
        .partition(|o| o.manifest.phase() == Phase::CustomResourceDefinitions);
    let mut applied = apply_each(client, &mut kinds, &crds).await?;
    let names: Vec<String> = crds.iter().map(|c| c.manifest.name.clone()).collect();
    wait_established(client, &names, options.timeout).await?;
    if !deferred.is_empty() {
        let deferred: Vec<Object<'_>> = deferred.into_iter().cloned().collect();
        validate(
            client,
            &mut kinds,
            &deferred,
            &declared,
            Validation::Deferred,
        )
        .await?;
    }
    let (namespaces, rest): (Vec<&Object<'_>>, Vec<&Object<'_>>) = rest
        .into_iter()
        .partition(|o| o.manifest.phase() == Phase::Namespaces);
    applied.extend(apply_each(client, &mut kinds, &namespaces).await?);
    if let Some(secret) = options.pull_secret {
        applied.extend(secret.apply(client, &mut kinds).await?);
    }
    applied.extend(apply_each(client, &mut kinds, &rest).await?);
    let pruning = match options.prune.enabled {
        true => prune_undeclared(client, &mut kinds, manifests, &scope, options).await?,
        false => Pruning::default(),
    };
    Ok(Report { applied, pruning })
}

/// Prunes the members of the set within `scope` that `manifests` do not
/// declare, then records what the set spans now: what the manifests put
/// members in, and the kinds of the members it kept.
async fn prune_undeclared(
    client: &Client,
    kinds: &mut Kinds,
    manifests: &[Manifest],
    scope: &applyset::Recorded,
    options: Options<'_>,
) -> Result<Pruning, Error> {
    let declared = prune::members(manifests, kinds);
    let set = options.set;
    let pruning = prune::prune(client, kinds, set, scope, &declared, options.prune).await?;
    let mut now = prune::scope_of(manifests, kinds);
    for held in &pruning.held {
        now.kinds.insert(held.member.kind.clone());
        now.namespaces.extend(held.member.namespace.clone());
    }
    set.record(client, &now).await?;
    Ok(pruning)
}

/// Applies `objects` in order.
async fn apply_each(
    client: &Client,
    kinds: &mut Kinds,
    objects: &[&Object<'_>],
) -> Result<Vec<Applied>, Error> {
    let mut applied = Vec::with_capacity(objects.len());
    for object in objects {
        applied.push(apply_one(client, kinds, &object.at(), &object.object, Mode::Apply).await?);
    }
    Ok(applied)
}

/// The objects to send: images pinned, the set's label added; a manifest
/// that sets that label itself is refused before anything is sent.
fn prepare<'m>(manifests: &'m [Manifest], options: Options<'_>) -> Result<Vec<Object<'m>>, Error> {
    manifests
        .iter()
        .map(|manifest| {
            if manifest.object["metadata"]["labels"]
                .get(applyset::PART_OF)
                .is_some()
            {
                return Err(Error::Labelled {
                    at: format!("{}:{}", manifest.file.display(), manifest.line),
                    what: manifest.display_name(),
                });
            }
            let mut object = manifest.object.clone();
            pin_images(&mut object, options.pins);
            applyset::label(&mut object, options.set);
            Ok(Object { manifest, object })
        })
        .collect()
}

/// A manifest with its images pinned: what is sent.
#[derive(Debug, Clone)]
struct Object<'a> {
    manifest: &'a Manifest,
    object: Value,
}

impl Object<'_> {
    fn at(&self) -> String {
        format!("{}:{}", self.manifest.file.display(), self.manifest.line)
    }
}

/// The kinds the cluster serves, looked up once each.
pub(crate) type Kinds = HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Validation {
    /// Before anything is applied: kinds that CRDs of the same set declare
    /// are handed back for later.
    Now,
    /// After the CRDs are established: every kind must be served.
    Deferred,
}

/// Dry-runs every object with strict field validation and reports every
/// failure at once. Returns the objects left for later: custom resources
/// whose CRD is among `objects` and not served yet.
async fn validate<'o, 'm>(
    client: &Client,
    kinds: &mut Kinds,
    objects: &'o [Object<'m>],
    declared: &Declared,
    when: Validation,
) -> Result<Vec<&'o Object<'m>>, Error> {
    let mut namespaces = Namespaces::new(client);
    let mut deferred = Vec::new();
    let mut problems = Vec::new();
    for object in objects {
        let mut sent = object.object.clone();
        // An object in a namespace that the same set creates is checked in
        // `default`: the server refuses a dry run in a namespace that does
        // not exist yet, and nothing it validates depends on which one.
        if let Some(ns) = object.manifest.namespace.as_deref()
            && declared.namespaces.iter().any(|n| n == ns)
            && !namespaces.exists(ns).await?
        {
            sent["metadata"]["namespace"] = Value::from("default");
        }
        match apply_one(client, kinds, &object.at(), &sent, Mode::DryRun).await {
            Ok(_) => {}
            Err(Error::Apply { error, .. }) => problems.push(Error::Refused {
                at: locate_problem(object.manifest, &api_error(&error)),
                what: object.manifest.display_name(),
                error,
            }),
            Err(Error::UnknownKind { .. })
                if when == Validation::Now && declared.kinds.contains(&group_kind(&sent)) =>
            {
                deferred.push(object);
            }
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(deferred)
    } else {
        Err(Error::Invalid {
            problems,
            applied: when == Validation::Deferred,
        })
    }
}

/// Where in its file a refusal points: the first field the server's
/// message names (`unknown field "spec.replicaz"` as the strict decoder
/// says it, `.spec.replicaz: field not declared in schema` as server-side
/// apply does), found in the manifest's own document; the document's first
/// line when the message names no field found there.
fn locate_problem(manifest: &Manifest, message: &str) -> String {
    let file = manifest.file.display();
    let document_start = format!("{file}:{}", manifest.line);
    let Some(path) = named_field(message) else {
        return document_start;
    };
    let Ok(text) = std::fs::read_to_string(&manifest.file) else {
        return document_start;
    };
    let document: String = text
        .lines()
        .skip(manifest.line.saturating_sub(1))
        .take_while(|line| !line.starts_with("---"))
        .map(|line| format!("{line}\n"))
        .collect();
    let locations = crate::config::locate::Locations::index(&document);
    if !locations.has(&path) {
        return document_start;
    }
    let at = locations.key(&path);
    format!("{file}:{}:{}", manifest.line + at.line - 1, at.column)
}

/// The dotted path of the first field a server message names.
fn named_field(message: &str) -> Option<String> {
    if let Some(rest) = message.split("unknown field \"").nth(1) {
        return rest.split('"').next().map(str::to_string);
    }
    let (path, _) = message.split_once(": field not declared in schema")?;
    let path = path.rsplit(' ').next()?.trim_start_matches('.');
    Some(path.to_string())
}

/// What the whole set declares, which a dry run of one object cannot see.
struct Declared {
    /// `(group, kind)` of every custom resource its CRDs define.
    kinds: Vec<(String, String)>,
    /// The namespaces it creates.
    namespaces: Vec<String>,
}

impl Declared {
    fn of(objects: &[Object<'_>]) -> Declared {
        let kinds = objects
            .iter()
            .filter(|o| o.manifest.phase() == Phase::CustomResourceDefinitions)
            .filter_map(|o| {
                let spec = &o.object["spec"];
                Some((
                    spec["group"].as_str()?.to_string(),
                    spec["names"]["kind"].as_str()?.to_string(),
                ))
            })
            .collect();
        let namespaces = objects
            .iter()
            .filter(|o| o.manifest.phase() == Phase::Namespaces)
            .map(|o| o.manifest.name.clone())
            .collect();
        Declared { kinds, namespaces }
    }
}

fn group_kind(object: &Value) -> (String, String) {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let kind = object["kind"].as_str().unwrap_or_default();
    (group.to_string(), kind.to_string())
}

/// Which namespaces exist, asked once each.
struct Namespaces {
    api: Api<k8s_openapi::api::core::v1::Namespace>,
    known: HashMap<String, bool>,
}

impl Namespaces {
    fn new(client: &Client) -> Namespaces {
        Namespaces {
            api: Api::all(client.clone()),
            known: HashMap::new(),
        }
    }

    async fn exists(&mut self, name: &str) -> Result<bool, Error> {
        if let Some(known) = self.known.get(name) {
            return Ok(*known);
        }
        let exists = self
            .api
            .get_opt(name)
            .await
            .map_err(|error| Error::Apply {
                at: String::from("(namespaces)"),
                what: format!("Namespace/{name}"),
                error,
            })?
            .is_some();
        self.known.insert(name.to_string(), exists);
        Ok(exists)
    }
}

/// Applies one object.
pub async fn apply_value(client: &Client, object: &Value) -> Result<Applied, Error> {
    apply_one(
        client,
        &mut HashMap::new(),
        "(generated)",
        object,
        Mode::Apply,
    )
    .await
}

/// Whether a request changes the cluster or only asks the server to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Apply,
    DryRun,
}

async fn apply_one(
    client: &Client,
    kinds: &mut Kinds,
    at: &str,
    object: &Value,
    mode: Mode,
) -> Result<Applied, Error> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = match kinds.get(&gvk) {
        Some(found) => found.clone(),
        None => {
            let found = kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|source| Error::UnknownKind {
                    at: at.to_string(),
                    gvk: format!("{api_version} {kind}"),
                    error: source,
                })?;
            kinds.insert(gvk.clone(), found.clone());
            found
        }
    };
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let display = match object["metadata"]["namespace"].as_str() {
        Some(ns) if caps.scope == Scope::Namespaced => format!("{kind}/{ns}/{name}"),
        _ => format!("{kind}/{name}"),
    };
    let err = |source| Error::Apply {
        at: at.to_string(),
        what: display.clone(),
        error: source,
    };
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.field_validation = Some(ValidationDirective::Strict);
    params.dry_run = mode == Mode::DryRun;
    if mode == Mode::DryRun {
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .map_err(err)?;
        return Ok(Applied {
            name: display,
            changed: false,
        });
    }
    let before = api
        .get_opt(name)
        .await
        .map_err(err)?
        .and_then(|o| o.metadata.resource_version);
    let after = api
        .patch(name, &params, &Patch::Apply(object))
        .await
        .map_err(err)?;
    Ok(Applied {
        name: display.clone(),
        changed: before != after.metadata.resource_version,
    })
}

async fn wait_established(
    client: &Client,
    names: &[String],
    timeout: Duration,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        let wait = await_condition(api.clone(), name, conditions::is_crd_established());
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(_)) => {}
            Ok(Err(source)) => {
                return Err(Error::Watch {
                    name: name.clone(),
                    source,
                });
            }
            Err(_) => {
                return Err(Error::NotEstablished {
                    name: name.clone(),
                    timeout,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
