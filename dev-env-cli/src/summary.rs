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
                None => ctx.say(outcome),
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
