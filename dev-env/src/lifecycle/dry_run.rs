//! `dev up --dry-run`: the plan, and what already exists that would block
//! or be replaced. Reads only.

use std::fmt;

use super::{Error, drift};
use crate::{config::Config, docker, manifest, plan::Plan, state::State};

/// What `dev up` would do.
#[derive(Debug)]
pub struct DryRun {
    pub plan: Plan,
    /// The drift of what exists, or why it could not be compared.
    pub drift: Result<Vec<crate::plan::Drift>, Error>,
    /// Whether `--recreate` was asked.
    pub recreate: bool,
}

/// Reads the config's state and manifests and compares what exists with
/// the plan; changes nothing.
pub async fn dry_run(config: &Config, recreate: bool) -> Result<DryRun, Error> {
    let state = State::load(&config.state_dir())?;
    let manifests = manifest::load(&config.manifests)?;
    let plan = Plan::new(config, &state, manifests);
    let drift = match docker::connect().await {
        Ok(docker) => drift(&docker, config).await,
        Err(e) => Err(e.into()),
    };
    Ok(DryRun {
        plan,
        drift,
        recreate,
    })
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
                let verb = if self.recreate {
                    "would be recreated"
                } else {
                    "block `dev up`; add --recreate"
                };
                writeln!(f, "{} drifted object(s) {verb}", drifts.len())?;
            }
            Err(e) => writeln!(f, "cannot compare with what exists: {e}")?,
        }
        writeln!(f, "dry run: nothing was changed")
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
        Plan::new(&config, &State::default(), Vec::new())
    }

    #[test]
    fn a_dry_run_ends_with_what_already_exists_and_names_the_file() {
        let plan = plan();
        let file = plan.config.file.display().to_string();
        let clean = DryRun {
            plan: plan.clone(),
            drift: Ok(Vec::new()),
            recreate: false,
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
            recreate: true,
        };
        let text = drifted.to_string();
        assert!(
            text.ends_with(
                "    ipv4Subnet: 10.0.0.0/24 -> 10.1.0.0/24\n1 drifted object(s) would be recreated\ndry run: nothing was changed\n"
            ),
            "{text}"
        );
        for debug in ["Some(", "{ ", "None"] {
            assert!(!text.contains(debug), "{text}");
        }
    }
}
