//! `pods/exec` over SPDY/3.1 (`v4.channel.k8s.io`), for clients before WebSocket (kubectl before 1.30,
//! or with `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`): the client opens one stream per channel, named by
//! its `streamtype` header (`error`, `stdin`, `stdout`, `stderr`, `resize`). Once the asked-for streams
//! are open the command's output flows on `stdout` and `stderr`, then the final `Status` on `error`, and
//! every stream is closed.

use std::collections::HashMap;
use std::pin::Pin;

use bytes::Bytes;
use futures::StreamExt as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::Error;
use super::exec::{Wanted, exit_status, terminal_size};
use super::spdy::{self, Decoder, Frame};
use crate::store::{ExecOutput, ExecSession, Resize};

/// The one exec protocol served over SPDY.
pub(super) const V4: &str = "v4.channel.k8s.io";

/// The streams of a session by their `streamtype`, as they open.
#[derive(Default)]
struct Streams {
    by_type: HashMap<String, u32>,
}

impl Streams {
    fn get(&self, kind: &str) -> Option<u32> {
        self.by_type.get(kind).copied()
    }

    /// Whether every stream the request asked for is open.
    fn complete(&self, wanted: Wanted, stdin: bool) -> bool {
        self.get("error").is_some()
            && (!wanted.stdout || self.get("stdout").is_some())
            && (!wanted.stderr || self.get("stderr").is_some())
            && (!stdin || self.get("stdin").is_some())
    }
}

/// Runs the session: waits for the streams, then copies until the command's output ended.
pub(super) async fn run<IO>(io: IO, session: ExecSession, wanted: Wanted) -> Result<(), Error>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let mut spdy = spdy::connect(io);
    let out = spdy.out.clone();
    let mut streams = Streams::default();
    let ExecSession {
        stdin,
        output,
        exit_code,
        resize,
    } = session;
    let wants_stdin = stdin.is_some();
    while !streams.complete(wanted, wants_stdin) {
        match spdy
            .decoder
            .read(&mut spdy.reader)
            .await
            .map_err(Error::Spdy)?
        {
            Some(frame) => {
                if !on_setup_frame(frame, &mut streams, &out).await {
                    return Ok(());
                }
            }
            None => return Ok(()),
        }
    }
    let input = Input {
        stdin,
        resize,
        streams: &streams,
        out: &out,
    };
    let send_output = send_output(output, exit_code, &streams, &out);
    let result = tokio::select! {
        () = send_output => Ok(()),
        r = input.feed(&mut spdy.decoder, &mut spdy.reader) => r,
    };
    drop((out, spdy.out));
    let _ = spdy.writing.await;
    result
}

/// Answers the frames that come before the streams are all open; `false` when the client went away.
async fn on_setup_frame(frame: Frame, streams: &mut Streams, out: &mpsc::Sender<Frame>) -> bool {
    let reply = match frame {
        Frame::SynStream {
            stream_id, headers, ..
        } => {
            let kind = headers.iter().find(|(k, _)| k == "streamtype");
            if let Some((_, kind)) = kind {
                streams.by_type.insert(kind.clone(), stream_id);
            }
            Frame::SynReply {
                stream_id,
                fin: false,
                headers: Vec::new(),
            }
        }
        Frame::Ping(id) => Frame::Ping(id),
        Frame::GoAway { .. } => return false,
        _ => return true,
    };
    out.send(reply).await.is_ok()
}

/// Sends the command's output, then its `Status`, and closes every stream this side writes on.
async fn send_output(
    mut output: Pin<Box<dyn futures::Stream<Item = ExecOutput> + Send>>,
    exit_code: Box<dyn FnOnce() -> futures::future::BoxFuture<'static, Option<i64>> + Send>,
    streams: &Streams,
    out: &mpsc::Sender<Frame>,
) {
    let data = |stream_id: u32, fin: bool, data: Bytes| Frame::Data {
        stream_id,
        fin,
        data,
    };
    while let Some(chunk) = output.next().await {
        let (stream, bytes) = match chunk {
            ExecOutput::Stdout(b) => (streams.get("stdout"), b),
            ExecOutput::Stderr(b) => (streams.get("stderr"), b),
        };
        if let Some(id) = stream
            && out.send(data(id, false, bytes)).await.is_err()
        {
            return;
        }
    }
    for kind in ["stdout", "stderr"] {
        if let Some(id) = streams.get(kind) {
            let _ = out.send(data(id, true, Bytes::new())).await;
        }
    }
    if let Some(id) = streams.get("error") {
        let status = exit_status(exit_code().await).to_string();
        let _ = out.send(data(id, true, Bytes::from(status))).await;
    }
}

/// What the client sends once the streams are open: stdin, terminal sizes, pings.
struct Input<'a> {
    stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    resize: Option<Resize>,
    streams: &'a Streams,
    out: &'a mpsc::Sender<Frame>,
}

impl Input<'_> {
    /// Reads frames until the client goes away.
    async fn feed<R: AsyncRead + Unpin>(
        mut self,
        decoder: &mut Decoder,
        reader: &mut R,
    ) -> Result<(), Error> {
        loop {
            match decoder.read(reader).await.map_err(Error::Spdy)? {
                Some(Frame::Data {
                    stream_id,
                    fin,
                    data,
                }) => self.on_data(stream_id, fin, &data).await,
                Some(Frame::Ping(id)) => {
                    let _ = self.out.send(Frame::Ping(id)).await;
                }
                Some(Frame::GoAway { .. }) | None => return Ok(()),
                Some(_) => {}
            }
        }
    }

    async fn on_data(&mut self, stream_id: u32, fin: bool, data: &[u8]) {
        if !data.is_empty() {
            let delta = data.len() as u32;
            let _ = self
                .out
                .send(Frame::WindowUpdate { stream_id, delta })
                .await;
        }
        if Some(stream_id) == self.streams.get("stdin") {
            if let Some(w) = self.stdin.as_mut()
                && !data.is_empty()
                && (w.write_all(data).await.is_err() || w.flush().await.is_err())
            {
                self.stdin = None;
            }
            if fin && let Some(mut w) = self.stdin.take() {
                let _ = w.shutdown().await;
            }
        } else if Some(stream_id) == self.streams.get("resize")
            && let Some(resize) = &self.resize
        {
            // Sizes come as JSON objects one after the other.
            for line in data.split(|b| *b == b'\n') {
                if let Some((width, height)) = terminal_size(line) {
                    resize(width, height).await;
                }
            }
        }
    }
}
