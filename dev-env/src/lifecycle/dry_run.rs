//! `dev up --dry-run`: the plan, and what already exists that would block
//! or be replaced. Reads only.

use std::fmt;

use super::{Error, drift, has_cluster};
use crate::{
    apply::{self, ApplySet, Pruning},
    config::Config,
    docker, manifest,
    plan::Plan,
    state::State,
};

/// What `dev up` would do.
#[derive(Debug)]
pub struct DryRun {
    pub plan: Plan,
    /// The drift of what exists, or why it could not be compared.
    pub drift: Result<Vec<crate::plan::Drift>, Error>,
    /// Why `dev up` would stop before changing anything: components whose
    /// rollout targets the manifests do not declare.
    pub targets: Result<(), crate::targets::Error>,
    /// What a prune would do (`None`: no cluster to ask yet), or why it
    /// would not or could not be asked.
    pub prune: Result<Option<Pruning>, String>,
    pub options: DryRunOptions,
}

/// What the `dev up` being previewed was asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct DryRunOptions {
    /// `--recreate`.
    pub recreate: bool,
    /// What it would prune (`--no-prune`, `--prune-all`,
    /// `--prune-destructive`).
    pub prune: apply::Prune,
}

/// Reads the config's state and manifests and compares what exists with
/// the plan, and the environment's ApplySet with the manifests; changes
/// nothing.
pub async fn dry_run(config: &Config, options: DryRunOptions) -> Result<DryRun, Error> {
    let state = State::load(&config.state_dir())?;
    let manifests = manifest::load(&config.manifests)?;
    let targets = crate::targets::verify(config, config.components.keys(), &manifests).await;
    let prune = would_prune(config, &manifests, options.prune).await;
    // The engine decides how the node is made; without an engine, or on
    // one that refuses the provider, the plan is the one for Docker Engine
    // on this machine.
    let local = crate::plan::EngineSetup::local(config);
    let (setup, drift) = match docker::connect_engine().await {
        Ok(engine) => match super::engine_setup(&engine, config).await {
            Ok(on) => {
                let drift = drift(&engine.docker, config, &on.setup).await;
                (on.setup, drift)
            }
            Err(e) => (local, Err(e)),
        },
        Err(e) => (local, Err(e.into())),
    };
    let plan = Plan::new(config, &state, manifests, &setup);
    Ok(DryRun {
        plan,
        drift,
        targets,
        prune,
        options,
    })
}

/// What a prune of the members of the environment's ApplySet the
/// manifests no longer declare would do; `None` when the environment has
/// no cluster yet.
async fn would_prune(
    config: &Config,
    manifests: &[manifest::Manifest],
    prune: apply::Prune,
) -> Result<Option<Pruning>, String> {
    if !has_cluster(config) {
        return Ok(None);
    }
    let client = crate::deliver::cluster_client(config)
        .await
        .map_err(|e| crate::error_chain(&e))?;
    let set = ApplySet::of_environment(&config.name);
    apply::would_prune(&client, manifests, &set, prune)
        .await
        .map(Some)
        .map_err(|e| crate::error_chain(&e))
}

impl fmt::Display for DryRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.plan)?;
        let file = self.plan.config.file.display();
        match &self.drift {
            Ok(drifts) if drifts.is_empty() => writeln!(f, "nothing has drifted from {file}")?,
            Ok(drifts) => {
                for d in drifts {
                    writeln!(f, "{d}")?;
                }
                let verb = if self.options.recreate {
                    "would be recreated"
                } else {
                    "block `dev up`; add --recreate"
                };
                writeln!(f, "{} drifted object(s) {verb}", drifts.len())?;
            }
            Err(e) => writeln!(f, "cannot compare with what exists: {e}")?,
        }
        if let Err(e) = &self.targets {
            writeln!(f, "would stop before changing anything:\n{e}")?;
        }
        match &self.prune {
            Ok(None) => {}
            Ok(Some(pruning)) => self.fmt_pruning(f, pruning)?,
            Err(e) => writeln!(f, "would not prune: {e}")?,
        }
        writeln!(f, "dry run: nothing was changed")
    }
}

impl DryRun {
    fn fmt_pruning(&self, f: &mut fmt::Formatter<'_>, pruning: &Pruning) -> fmt::Result {
        if pruning == &Pruning::default() {
            return writeln!(
                f,
                "nothing to prune: every object applied before is still declared"
            );
        }
        let verb = if self.options.prune.enabled {
            "would be pruned"
        } else {
            "no longer declared, kept (--no-prune)"
        };
        for m in &pruning.deleted {
            writeln!(f, "{m}: {verb}")?;
        }
        for held in &pruning.held {
            writeln!(
                f,
                "{}: would be kept: deleting it would delete {} object(s) outside the set ({}); --prune-destructive prunes it",
                held.member,
                held.takes.len(),
                held.takes.join(", ")
            )?;
        }
        for m in &pruning.released {
            writeln!(
                f,
                "{m}: would leave the set and stay ({}: disabled)",
                apply::PRUNE_ANNOTATION
            )?;
        }
        writeln!(f, "{} object(s) {verb}", pruning.deleted.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Change, Drift, Object};

    fn plan() -> Plan {
        let dir = crate::config::tests::workspace(&[]);
        let file = dir.path().join("dev-env.yaml");
        let config = Config::parse(&file, "name: demo\ncluster: {provider: k3s}\n").unwrap();
        Plan::new(
            &config,
            &State::default(),
            Vec::new(),
            &crate::plan::EngineSetup::local(&config),
        )
    }

    #[test]
    fn a_dry_run_ends_with_what_already_exists_and_names_the_file() {
        let plan = plan();
        let file = plan.config.file.display().to_string();
        let clean = DryRun {
            plan: plan.clone(),
            drift: Ok(Vec::new()),
            targets: Ok(()),
            prune: Ok(None),
            options: DryRunOptions::default(),
        };
        let text = clean.to_string();
        assert!(
            text.starts_with(&format!("plan for `demo` ({file})\n")),
            "{text}"
        );
        assert!(
            text.ends_with(&format!(
                "nothing has drifted from {file}\ndry run: nothing was changed\n"
            )),
            "{text}"
        );
        let drifted = DryRun {
            plan,
            drift: Ok(vec![Drift {
                object: Object::Network,
                name: String::from("demo"),
                changes: vec![Change {
                    field: String::from("ipv4Subnet"),
                    was: String::from("10.0.0.0/24"),
                    now: String::from("10.1.0.0/24"),
                }],
            }]),
            targets: Ok(()),
            prune: Ok(Some(Pruning {
                deleted: vec![apply::Member {
                    kind: apply::applyset::GroupKind::of("v1", "ConfigMap"),
                    namespace: Some(String::from("shop")),
                    name: String::from("old"),
                }],
                ..Pruning::default()
            })),
            options: DryRunOptions {
                recreate: true,
                prune: apply::Prune::DECLARED,
            },
        };
        let text = drifted.to_string();
        assert!(
            text.ends_with(
                "    ipv4Subnet: 10.0.0.0/24 -> 10.1.0.0/24\n1 drifted object(s) would be recreated\nConfigMap/shop/old: would be pruned\n1 object(s) would be pruned\ndry run: nothing was changed\n"
            ),
            "{text}"
        );
        for debug in ["Some(", "{ ", "None"] {
            assert!(!text.contains(debug), "{text}");
        }
    }
}
