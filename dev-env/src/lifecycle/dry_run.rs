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
