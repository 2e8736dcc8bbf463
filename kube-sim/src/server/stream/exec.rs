//! `pods/exec` over WebSocket, subprotocol `v5.channel.k8s.io` (SPDY in [`super::exec_spdy`]): the command starts before the upgrade
//! (so its errors come back as a `Status`), then its output flows to the client on channels 1 and 2,
//! stdin from channel 0 reaches it, and channel 3 carries the final `Status` with the exit code.

use std::pin::Pin;
use std::sync::Arc;

use futures::{SinkExt as _, StreamExt as _};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt as _};
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{Error, accept_spdy, accept_websocket, exec_spdy, spawn_session, websocket};
use crate::server::{Body, Query};
use crate::store::{self, ExecOutput, ExecRequest, ExecSession, PodStreams, Resize};

/// The one exec subprotocol served.
const V5: &str = "v5.channel.k8s.io";
/// Channels of the v5 protocol.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const RESIZE: u8 = 4;
/// A client message on this channel closes the channel named by its second byte.
const CLOSE: u8 = 255;

/// What a session runs: a new command, or the container's main process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    /// `pods/exec`.
    Exec,
    /// `pods/attach`.
    Attach,
}

/// Starts the command (or attaches) and answers the upgrade, or a `Status` when either cannot be done.
pub(super) async fn serve(
    mut req: Request<Incoming>,
    q: &Query,
    pod: &Value,
    streams: Arc<dyn PodStreams>,
    shutdown: watch::Receiver<bool>,
    kind: Kind,
) -> Result<Response<Body>, store::Error> {
    let command: Vec<String> =
        q.0.iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect();
    if command.is_empty() && kind == Kind::Exec {
        return Err(store::Error::BadRequest(
            "you must specify at least 1 command".to_string(),
        ));
    }
    // Checked before the protocol, so that a client falling back to another protocol hears it too.
    crate::kubelet::logs::log_container(pod, q.get("container"))?;
    let request = ExecRequest {
        container: q.get("container").map(str::to_string),
        command,
        stdin: q.flag("stdin"),
        tty: q.flag("tty"),
    };
    let wanted = Wanted {
        stdout: q.flag("stdout"),
        stderr: q.flag("stderr"),
    };
    let start = || match kind {
        Kind::Exec => streams.exec(pod, request.clone()),
        Kind::Attach => streams.attach(pod, request.clone()),
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    if let Some(accepted) = accept_websocket(req.headers(), V5) {
        let session = start().await?;
        spawn_session("exec", shutdown, async move {
            run(websocket(on_upgrade).await?, session, wanted).await
        });
        return Ok(accepted);
    }
    let Some(accepted) = accept_spdy(req.headers(), exec_spdy::V4) else {
        return Err(store::Error::BadRequest(format!(
            "pods/exec is served over WebSocket with the {V5} subprotocol, or over SPDY/3.1 with {}",
            exec_spdy::V4
        )));
    };
    let session = start().await?;
    spawn_session("exec", shutdown, async move {
        let io = TokioIo::new(on_upgrade.await.map_err(Error::Upgrade)?);
        exec_spdy::run(io, session, wanted).await
    });
    Ok(accepted)
}

/// The output channels the client asked for (`stdout=true`, `stderr=true`).
#[derive(Clone, Copy)]
pub(super) struct Wanted {
    pub(super) stdout: bool,
    pub(super) stderr: bool,
}

/// A message on `channel`.
fn on_channel(channel: u8, data: &[u8]) -> Message {
    let mut m = Vec::with_capacity(1 + data.len());
    m.push(channel);
    m.extend_from_slice(data);
    Message::binary(m)
}

/// The final `Status` of a command, as the kubelet reports it.
pub(super) fn exit_status(code: Option<i64>) -> Value {
    match code {
        Some(0) => json!({"metadata": {}, "status": "Success"}),
        Some(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        None => json!({
            "metadata": {},
            "status": "Failure",
            "message": "the command's exit code could not be read from the container runtime",
            "reason": "InternalError",
        }),
    }
}

/// Runs the session until the command's output ended (then sends its status and closes) or the client
/// went away.
async fn run<S>(ws: WebSocketStream<S>, session: ExecSession, wanted: Wanted) -> Result<(), Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, incoming) = ws.split();
    let ExecSession {
        stdin,
        mut output,
        exit_code,
        resize,
    } = session;
    let outputs = async {
        while let Some(chunk) = output.next().await {
            let message = match chunk {
                ExecOutput::Stdout(b) if wanted.stdout => on_channel(STDOUT, &b),
                ExecOutput::Stderr(b) if wanted.stderr => on_channel(STDERR, &b),
                _ => continue,
            };
            sink.send(message).await.map_err(Error::WebSocket)?;
        }
        let status = exit_status(exit_code().await).to_string();
        sink.send(on_channel(STATUS, status.as_bytes()))
            .await
            .map_err(Error::WebSocket)?;
        // A normal closure: the client reads it as the end of every channel. The close handshake may
        // not complete once the client has what it waited for.
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = sink.send(Message::Close(Some(close))).await;
        Ok(())
    };
    tokio::select! {
        r = outputs => r,
        () = feed_input(incoming, stdin, resize) => Ok(()),
    }
}

/// Copies channel 0 into the command's stdin until the client closes it and applies the terminal sizes
/// of channel 4; returns when the client's side of the connection ends, which ends the session.
async fn feed_input<St>(
    mut incoming: St,
    mut stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    resize: Option<Resize>,
) where
    St: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    while let Some(Ok(message)) = incoming.next().await {
        let data = match message {
            Message::Binary(b) => b,
            Message::Close(_) => break,
            _ => continue,
        };
        match (data.first().copied(), data.get(1).copied()) {
            (Some(STDIN), _) => {
                if let Some(w) = stdin.as_mut() {
                    let written = w.write_all(&data[1..]).await;
                    if written.is_err() || w.flush().await.is_err() {
                        stdin = None;
                    }
                }
            }
            (Some(RESIZE), _) => {
                if let (Some(resize), Some((width, height))) = (&resize, terminal_size(&data[1..]))
                {
                    resize(width, height).await;
                }
            }
            (Some(CLOSE), Some(STDIN)) => {
                if let Some(mut w) = stdin.take() {
                    let _ = w.shutdown().await;
                }
            }
            _ => {}
        }
    }
}

/// `(width, height)` of a channel-4 message, `{"Width": …, "Height": …}`.
pub(super) fn terminal_size(json: &[u8]) -> Option<(u16, u16)> {
    let v: Value = serde_json::from_slice(json).ok()?;
    let dimension = |key: &str| v[key].as_u64().and_then(|n| u16::try_from(n).ok());
    Some((dimension("Width")?, dimension("Height")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_status_carries_a_non_zero_exit_code_as_kubectl_reads_it() {
        assert_eq!(exit_status(Some(0))["status"], "Success");
        let failed = exit_status(Some(3));
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(
            failed["details"]["causes"][0],
            json!({"reason": "ExitCode", "message": "3"})
        );
        assert_eq!(exit_status(None)["reason"], "InternalError");
    }

    #[test]
    fn terminal_sizes_are_read_from_the_resize_channel() {
        assert_eq!(
            terminal_size(br#"{"Width":120,"Height":40}"#),
            Some((120, 40))
        );
        assert_eq!(terminal_size(b"{}"), None);
    }

    #[test]
    fn messages_start_with_their_channel() {
        assert_eq!(
            on_channel(STDERR, b"oops"),
            Message::binary(b"\x02oops".to_vec())
        );
    }
}
