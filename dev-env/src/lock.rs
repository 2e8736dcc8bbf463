//! One writer per environment: every command that changes an environment
//! or its state holds `.dev-env/<name>/lock` while it runs.
//!
//! The lock is an advisory `flock` on that file, so the kernel releases it
//! when the holder exits, however it exits (a crash or `kill -9` included);
//! no stale lock file ever needs cleaning up. The holder writes its pid into
//! the file so that a waiting run can say whom it waits for. A second run
//! waits, says so once through its `waiting` callback, and gives up with
//! [`Error::Timeout`] when the deadline passes.
//!
//! A long-running command (`watch`) holds the lock for its whole life as a
//! [`Session`]; the steps it runs take the lock again, which within that
//! process is granted at once. State writes of those concurrent steps are
//! serialised in the process by `state::State::update`.

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{Read, Seek, Write},
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::time::Instant;

/// The lock file inside an environment's state directory.
pub const LOCK_FILE: &str = "lock";
/// How long a run waits for another one by default: longer than the
/// slowest first `dev up`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often a waiting run tries again.
const RETRY: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open the lock file {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "another dev-env run on `{env}` ({}) still holds {} after {}s; wait for it to finish, or stop it",
        holder_text(*holder),
        path.display(),
        timeout.as_secs()
    )]
    Timeout {
        env: String,
        path: PathBuf,
        holder: Option<u32>,
        timeout: Duration,
    },
}

fn holder_text(pid: Option<u32>) -> String {
    pid.map_or_else(|| String::from("pid unknown"), |pid| format!("pid {pid}"))
}

/// Another run holds the lock; reported once while waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub env: String,
    /// The holder's pid, when it wrote it already.
    pub holder: Option<u32>,
}

/// The held lock; released on drop (or when the process ends). Within a
/// [`Session`] of this process it holds nothing of its own.
#[derive(Debug)]
pub struct Lock {
    _file: Option<File>,
}

/// The state directories whose lock a [`Session`] of this process holds.
static SESSIONS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The lock held for a whole run of steps that each take it again.
#[derive(Debug)]
pub struct Session {
    _lock: Lock,
    state_dir: PathBuf,
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut sessions = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|d| d != &self.state_dir);
    }
}

/// Takes the lock of the environment of `config` for a session: until it is
/// dropped, other processes wait, and this process's own steps go on.
pub async fn session(
    config: &crate::config::Config,
    reporter: &dyn crate::report::Reporter,
) -> Result<Session, Error> {
    let lock = environment(config, reporter).await?;
    Ok(Session::of(lock, config.state_dir()))
}

impl Session {
    /// Makes `lock`, the lock of `state_dir`, a session of this process.
    fn of(lock: Lock, state_dir: PathBuf) -> Session {
        SESSIONS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(state_dir.clone());
        Session {
            _lock: lock,
            state_dir,
        }
    }
}

/// Takes the lock of the environment of `config`, waiting for another
/// holder up to [`DEFAULT_TIMEOUT`] and telling `reporter` once if it has
/// to.
pub async fn environment(
    config: &crate::config::Config,
    reporter: &dyn crate::report::Reporter,
) -> Result<Lock, Error> {
    let waiting = |w: &Waiting| {
        reporter.report(&crate::report::Event::WaitingForLock {
            env: w.env.clone(),
            holder: w.holder,
        })
    };
    acquire(&config.state_dir(), &config.name, DEFAULT_TIMEOUT, &waiting).await
}

/// Takes the lock of environment `env` whose state lives in `state_dir`,
/// waiting up to `timeout` for another holder; `waiting` is called once if
/// it has to wait.
pub async fn acquire(
    state_dir: &Path,
    env: &str,
    timeout: Duration,
    waiting: &(dyn Fn(&Waiting) + Sync),
) -> Result<Lock, Error> {
    let in_session = SESSIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|d| d == state_dir);
    if in_session {
        return Ok(Lock { _file: None });
    }
    let path = state_dir.join(LOCK_FILE);
    let open_err = |source| Error::Open {
        path: path.clone(),
        source,
    };
    let deadline = Instant::now() + timeout;
    let mut told = false;
    let mut file = open_lock_file(state_dir, &path).map_err(open_err)?;
    loop {
        match file.try_lock() {
            // `dev reset --purge` removes the state directory, lock file
            // included, while holding it: a lock on a removed file is
            // nobody's, so it is taken again on the file now there.
            Ok(()) if is_linked(&file, &path) => break,
            Ok(()) => {
                file = open_lock_file(state_dir, &path).map_err(open_err)?;
                continue;
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(source)) => return Err(open_err(source)),
        }
        let holder = read_pid(&mut file);
        if !told {
            waiting(&Waiting {
                env: env.to_string(),
                holder,
            });
            told = true;
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                env: env.to_string(),
                path,
                holder,
                timeout,
            });
        }
        tokio::time::sleep(RETRY).await;
    }
    // Whom a waiting run waits for; the lock, not this text, is what counts.
    let pid = std::process::id().to_string();
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(pid.as_bytes()))
        .and_then(|()| file.flush());
    Ok(Lock { _file: Some(file) })
}

/// Opens (creating it and its directory) the lock file at `path`.
fn open_lock_file(state_dir: &Path, path: &Path) -> std::io::Result<File> {
    std::fs::create_dir_all(state_dir)?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Whether the open `file` is still the file at `path`.
fn is_linked(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test]
    async fn steps_inside_a_session_go_on_and_the_lock_is_held_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let quick = Duration::from_millis(300);
        let never = |_: &Waiting| panic!("nothing else holds it");
        let lock = acquire(dir.path(), "env", quick, &never).await.unwrap();
        let session = Session::of(lock, dir.path().to_path_buf());
        // A step of this process takes the lock again at once.
        let step = acquire(dir.path(), "env", quick, &never).await.unwrap();
        drop(step);
        // The file lock is still held: another holder (its own open file) waits.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join(LOCK_FILE))
            .unwrap();
        assert!(matches!(file.try_lock(), Err(TryLockError::WouldBlock)));
        drop(session);
        assert!(
            file.try_lock().is_ok(),
            "the session's end releases the lock"
        );
    }

    #[tokio::test]
    async fn a_second_holder_waits_says_whom_for_and_gets_the_lock_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), "env", Duration::from_secs(1), &|_| {
            panic!("nothing holds it yet")
        })
        .await
        .unwrap();
        let told = Mutex::new(Vec::new());
        let record = |w: &Waiting| told.lock().unwrap().push(w.clone());
        let err = acquire(dir.path(), "env", Duration::from_millis(300), &record)
            .await
            .unwrap_err();
        let own = Some(std::process::id());
        assert!(
            matches!(&err, Error::Timeout { holder, .. } if *holder == own),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("pid {}", std::process::id()))
        );
        assert_eq!(
            told.lock().unwrap().as_slice(),
            [Waiting {
                env: "env".into(),
                holder: own
            }]
        );

        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(first);
        });
        let started = std::time::Instant::now();
        acquire(dir.path(), "env", Duration::from_secs(5), &|_| {})
            .await
            .expect("the lock once the first holder lets go");
        assert!(started.elapsed() >= Duration::from_millis(250));
        release.await.unwrap();
    }

    #[tokio::test]
    async fn a_waiter_on_a_removed_lock_file_takes_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("env");
        let first = acquire(&state, "env", Duration::from_secs(1), &|_| {})
            .await
            .unwrap();
        let waiter = {
            let state = state.clone();
            tokio::spawn(async move {
                acquire(&state, "env", Duration::from_secs(5), &|_| {})
                    .await
                    .unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        // What `dev reset --purge` does while it holds the lock.
        std::fs::remove_dir_all(&state).unwrap();
        drop(first);
        let second = waiter.await.unwrap();
        let held = second._file.as_ref().expect("a lock of its own");
        assert!(is_linked(held, &state.join(LOCK_FILE)));
        // A third run waits for it, as for any holder.
        let err = acquire(&state, "env", Duration::from_millis(200), &|_| {})
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
    }
}
