//! The streaming side of a kubelet with real containers, behind `pods/exec`, `pods/attach` and
//! `pods/portforward`.

use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::io::AsyncWrite;

use super::Result;

/// Where a pod's ports are and how commands run in its containers, installed by a kubelet that runs real
/// containers (see [`super::Store::set_pod_streams`]).
pub trait PodStreams: Send + Sync {
    /// The address to dial for `port` of `pod`: the container that declares the port, else the first
    /// running one; the error is the kubelet's answer when the pod has no running container.
    fn port_address(&self, pod: &Value, port: u16) -> Result<SocketAddr>;

    /// Starts `request` in a container of `pod`; the error is the kubelet's answer before any stream
    /// opens (an unknown container, a container that does not run, an engine failure).
    fn exec(&self, pod: &Value, request: ExecRequest) -> BoxFuture<'static, Result<ExecSession>>;

    /// Attaches to the main process of a container of `pod` (`request.command` is empty): its output
    /// from now on and, when asked, its stdin. The session's exit code is 0 once the output ends, as a
    /// kubelet reports a finished attach.
    fn attach(&self, pod: &Value, request: ExecRequest) -> BoxFuture<'static, Result<ExecSession>>;
}

/// A command to run in a pod's container, as `pods/exec` asks for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecRequest {
    /// The container; `None` when the request named none (the first container then).
    pub container: Option<String>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Whether the client sends stdin.
    pub stdin: bool,
    /// Whether the command gets a terminal (stdout and stderr then come as one stream).
    pub tty: bool,
}

/// A running command: its stdin, its output and, once the output ended, its exit code.
pub struct ExecSession {
    /// The command's stdin when the request asked for it; shutting it down closes the command's stdin.
    pub stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// The command's output until it exits.
    pub output: Pin<Box<dyn Stream<Item = ExecOutput> + Send>>,
    /// The exit code, asked for after the output ended; `None` when the runtime cannot tell.
    pub exit_code: Box<dyn FnOnce() -> BoxFuture<'static, Option<i64>> + Send>,
    /// Resizes the command's terminal to `(width, height)`; `None` without a terminal.
    pub resize: Option<Resize>,
}

/// Resizes a command's terminal to `(width, height)` in characters.
pub type Resize = Box<dyn Fn(u16, u16) -> BoxFuture<'static, ()> + Send + Sync>;

/// A chunk of a command's output.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecOutput {
    /// From stdout (or the terminal).
    Stdout(Bytes),
    /// From stderr.
    Stderr(Bytes),
}
