//! `cargo xtask push-image`: build, push, roll out, wait.

use std::process::ExitCode;

use anyhow::bail;
use dev_env::{
    image::{self, PushOptions, Pushed, distribution},
    registry,
    state::State,
};
use xshell::Shell;

use crate::{Ctx, flags};

impl flags::PushImage {
    pub(crate) fn run(self, _sh: &Shell, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        for name in &self.components {
            config.component(name)?;
        }
        if !self.no_rollout {
            bail!(
                "rolling out after a push is not available in this build; add `--no-rollout` to build and push only"
            )
        }
        let state = State::load(&config.state_dir())?;
        let host = registry::host(&config, &state)?;
        let client = distribution::Client::new(&host);
        let options = PushOptions {
            verbose: ctx.verbose,
        };
        let results = ctx.block_on(image::push_components(
            &config,
            &client,
            &self.components,
            options,
        ))?;
        let failed = results.iter().filter(|r| r.is_err()).count();
        if self.json {
            let components: Vec<_> = self
                .components
                .iter()
                .zip(&results)
                .map(|(name, result)| match result {
                    Ok(pushed) => json_of(&config, pushed),
                    Err(e) => serde_json::json!({"component": name, "error": e.to_string()}),
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "components": components }))?
            );
        } else {
            for result in &results {
                match result {
                    Ok(pushed) => ctx.say(line_of(pushed)),
                    Err(e) => eprintln!("error: {e}"),
                }
            }
        }
        Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

/// `worker  sha256:…  uploaded 1.2 MB in 2 blobs, 0 skipped  3.4s`
fn line_of(pushed: &Pushed) -> String {
    format!(
        "{}  {}  uploaded {} in {} blob(s), {} skipped  {:.1}s",
        pushed.component,
        pushed.digest,
        human_bytes(pushed.uploaded_bytes),
        pushed.uploaded_blobs,
        pushed.skipped_blobs,
        pushed.elapsed.as_secs_f64()
    )
}

fn json_of(config: &dev_env::config::Config, pushed: &Pushed) -> serde_json::Value {
    serde_json::json!({
        "component": pushed.component,
        "image": image::cluster_reference(config, &pushed.image, &pushed.digest),
        "reference": pushed.reference,
        "digest": pushed.digest,
        "uploadedBytes": pushed.uploaded_bytes,
        "uploadedBlobs": pushed.uploaded_blobs,
        "skippedBlobs": pushed.skipped_blobs,
        "rolledOut": false,
        "elapsedMs": pushed.elapsed.as_millis() as u64,
    })
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} kB", n as f64 / f64::from(1 << 10)),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn summaries_carry_the_documented_fields() {
        let dir = tempfile::tempdir().unwrap();
        let config =
            dev_env::config::Config::parse(&dir.path().join("dev-env.yaml"), "name: demo\n")
                .unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let pushed = Pushed {
            component: String::from("worker"),
            image: String::from("demo/worker"),
            reference: String::from("localhost:5001/demo/worker:dev"),
            digest: digest.clone(),
            uploaded_bytes: 1536,
            uploaded_blobs: 1,
            skipped_blobs: 1,
            elapsed: Duration::from_millis(2500),
        };
        let json = json_of(&config, &pushed);
        assert_eq!(json["component"], "worker");
        assert_eq!(
            json["image"],
            format!("demo-registry:5000/demo/worker@{digest}")
        );
        assert_eq!(json["digest"], digest.as_str());
        assert_eq!(json["uploadedBytes"], 1536);
        assert_eq!(json["skippedBlobs"], 1);
        assert_eq!(json["rolledOut"], false);
        assert_eq!(json["elapsedMs"], 2500);
        assert_eq!(
            line_of(&pushed),
            format!("worker  {digest}  uploaded 1.5 kB in 1 blob(s), 1 skipped  2.5s")
        );
    }
}
