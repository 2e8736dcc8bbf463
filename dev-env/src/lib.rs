//! The Kubernetes inner dev loop as a library: the declared environment
//! (`config`), the Docker objects that realise it, the registry, the
//! cluster, images, rollouts and waits. The `xtask` binary is a thin command
//! line over this crate. It never prints: what it has to say goes to a
//! `report::Reporter`.

#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod apply;
pub mod bench;
pub mod cluster;
pub mod config;
pub mod deliver;
pub mod docker;
pub mod forward;
pub mod host;
pub mod image;
pub mod init;
pub mod kubeconfig;
pub mod lifecycle;
pub mod lock;
pub mod logs;
pub mod manifest;
pub mod network;
pub mod ownership;
pub mod plan;
pub mod platform;
pub mod preflight;
pub mod registry;
pub mod report;
pub mod rollout;
pub mod state;
pub mod status;
pub mod targets;
pub mod wait;
pub mod watch;

/// `err` and its causes joined by `: `, each once, as `cargo xtask` prints
/// them after `error: `. A cause whose text the message so far already
/// contains is left out: dev-env's messages never quote their source, but
/// errors of bollard, kube and other crates often quote theirs.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        let text = err.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = err.source();
    }
    out
}

/// Installs ring as rustls's process-wide crypto provider, once: kube and
/// the registry client both use rustls, and rustls refuses to choose when
/// no provider, or more than one, is installed.
pub fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Someone else installed one first: theirs is the process's.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    /// An error with an optional cause, which may quote that cause.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn the_chain_names_each_cause_once_in_order() {
        let err = Layer(
            "component `app`: cargo build failed",
            Some(Box::new(Layer(
                "HyperError: connection refused",
                Some(Box::new(Layer("connection refused", None))),
            ))),
        );
        assert_eq!(
            super::error_chain(&err),
            "component `app`: cargo build failed: HyperError: connection refused"
        );
        assert_eq!(super::error_chain(&Layer("alone", None)), "alone");
    }
}
