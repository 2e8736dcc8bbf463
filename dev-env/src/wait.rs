//! Waiting, always under a deadline. Kubernetes workloads are waited on
//! with watches (`workload`); what has no watch (a file appearing in a
//! container, an HTTP endpoint answering) is polled here with a backoff
//! that starts at 50 ms and settles at 1 s.

pub mod node;
pub mod workload;

use std::{fmt, future::Future, time::Duration};

use tokio::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("timed out after {}s waiting for {what}; last seen: {last}", timeout.as_secs_f32())]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
    },
}

/// One look at what is being waited for.
pub enum Step<T> {
    Done(T),
    /// Not yet; the text says what was seen, for the timeout message.
    Pending(String),
}

/// Calls `check` until it is done, fails, or `timeout` passes.
pub async fn poll<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<Result<T, E>, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Step<T>, E>>,
{
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(50);
    let mut last = String::from("nothing yet");
    loop {
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(Ok(Step::Done(value))) => return Ok(Ok(value)),
            Ok(Err(err)) => return Ok(Err(err)),
            Ok(Ok(Step::Pending(seen))) => last = seen,
            Err(_) => break,
        }
        if Instant::now() + interval >= deadline {
            break;
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_secs(1));
    }
    Err(Error::Timeout {
        what: what.to_string(),
        timeout,
        last,
    })
}

/// Seconds with one decimal, as progress lines print them.
pub struct Elapsed(pub Duration);

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}s", self.0.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn poll_returns_once_done_and_reports_the_last_state_on_timeout() {
        let calls = AtomicU32::new(0);
        let out: Result<Result<u32, String>, Error> =
            poll("three calls", Duration::from_secs(5), || async {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(if n == 3 {
                    Step::Done(n)
                } else {
                    Step::Pending(format!("call {n}"))
                })
            })
            .await;
        assert_eq!(out.unwrap().unwrap(), 3);

        let err = poll::<(), String, _, _>("a file", Duration::from_secs(2), || async {
            Ok(Step::Pending(String::from("not there")))
        })
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "timed out after 2s waiting for a file; last seen: not there"
        );

        let fatal = poll::<(), String, _, _>("x", Duration::from_secs(2), || async {
            Err(String::from("broken"))
        })
        .await;
        assert_eq!(fatal.unwrap(), Err(String::from("broken")));
    }
}
