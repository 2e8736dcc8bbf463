//! The result lines of `push-image` and `reload`, as text or JSON.

use std::process::ExitCode;

use dev_env::deliver::Outcome;

use crate::Ctx;

/// Prints one line per component (or the JSON summary); fails when any
/// component failed.
pub(crate) fn report(ctx: &Ctx, outcomes: &[Outcome], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "components": outcomes }))?
        );
    } else {
        for outcome in outcomes {
            match &outcome.error {
                Some(error) => eprintln!("error: {}: {error}", outcome.component),
                None => ctx.say(line(outcome)),
            }
        }
    }
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn line(o: &Outcome) -> String {
    let mut parts = vec![o.component.clone()];
    if let Some(digest) = &o.digest {
        parts.push(digest.clone());
    }
    if o.uploaded_bytes > 0 || o.skipped_blobs > 0 {
        parts.push(format!(
            "uploaded {}, {} blob(s) already there",
            bytes(o.uploaded_bytes),
            o.skipped_blobs
        ));
    }
    if o.rolled_out {
        parts.push(String::from("rolled out"));
    } else if !o.pods.is_empty() {
        parts.push(String::from("already running it"));
    }
    if !o.pods.is_empty() {
        parts.push(format!(
            "{} pod(s) ready in {:.1}s",
            o.pods.len(),
            o.wait_ms as f64 / 1000.0
        ));
    }
    parts.push(format!("{:.1}s", o.elapsed_ms as f64 / 1000.0));
    parts.join("  ")
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} kB", n as f64 / f64::from(1 << 10)),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        serde_json::from_value(serde_json::json!({
            "component": "worker",
            "image": "demo-registry:5000/demo/worker@sha256:ab",
            "digest": "sha256:ab",
            "uploadedBytes": 1536,
            "skippedBlobs": 1,
            "rolledOut": true,
            "pods": ["w-1", "w-2"],
            "waitMs": 1250,
            "elapsedMs": 2500,
        }))
        .unwrap()
    }

    #[test]
    fn summaries_carry_the_documented_fields() {
        let o = outcome();
        let json = serde_json::to_value(&o).unwrap();
        for key in [
            "component",
            "image",
            "digest",
            "uploadedBytes",
            "skippedBlobs",
            "rolledOut",
            "pods",
            "waitMs",
            "elapsedMs",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        assert!(json.get("error").is_none());
        assert_eq!(
            line(&o),
            "worker  sha256:ab  uploaded 1.5 kB, 1 blob(s) already there  rolled out  2 pod(s) ready in 1.2s  2.5s"
        );
    }
}
