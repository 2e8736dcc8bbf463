//! `pods/portforward` over SPDY/3.1 (`portforward.k8s.io`), as the kubelet serves it, on the upgraded
//! connection or tunnelled in WebSocket messages (see [`super::tunnel`]): per forwarded
//! connection the client opens an `error` stream and a `data` stream carrying the same `port` and
//! `requestid` headers. Once both are open the server dials the pod's port and copies bytes between the
//! TCP connection and the data stream; a failed dial is written to the error stream. Both streams are
//! closed when the pod closes its side.
//!
//! Flow control: every data frame received is granted back at once with a `WINDOW_UPDATE`; sending does
//! not wait for windows, as with the kubelet: kubectl's SPDY library neither grants nor checks them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::spdy::{self, Frame, Headers};
use super::{
    Error, accept_spdy, accept_websocket, spawn_session, tunnel, wants_websocket, websocket,
};
use crate::meta;
use crate::server::Body;
use crate::store::{self, PodStreams};

/// The one port-forward protocol served.
const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol of SPDY port forwarding tunnelled in WebSocket messages.
const TUNNELED: &str = "SPDY/3.1+portforward.k8s.io";
/// How long dialling the pod's port may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest data frame sent.
const CHUNK: usize = 32 * 1024;

/// Answers the upgrade, to SPDY tunnelled in WebSocket or to plain SPDY, and serves the connection.
pub(super) fn serve(
    mut req: Request<Incoming>,
    pod: Value,
    streams: Arc<dyn PodStreams>,
    shutdown: watch::Receiver<bool>,
) -> Result<Response<Body>, store::Error> {
    let on_upgrade = hyper::upgrade::on(&mut req);
    let headers = req.headers();
    if wants_websocket(headers) {
        if let Some(accepted) = accept_websocket(headers, super::portforward_ws::PROTOCOL)
            .filter(|_| accept_websocket(headers, TUNNELED).is_none())
        {
            let query = crate::server::Query::parse(req.uri().query());
            let values: Vec<&str> = query
                .0
                .iter()
                .filter(|(k, _)| k == "ports")
                .map(|(_, v)| v.as_str())
                .collect();
            let ports = super::portforward_ws::ports(&values).map_err(store::Error::BadRequest)?;
            spawn_session("port-forward", shutdown, async move {
                let ws = websocket(on_upgrade).await?;
                super::portforward_ws::run(ws, pod, streams, ports).await
            });
            return Ok(accepted);
        }
        let Some(accepted) = accept_websocket(headers, TUNNELED) else {
            return Err(store::Error::BadRequest(format!(
                "pods/portforward over WebSocket is served with the {TUNNELED} or {} subprotocols",
                super::portforward_ws::PROTOCOL
            )));
        };
        spawn_session("port-forward", shutdown, async move {
            let ws = websocket(on_upgrade).await?;
            tunnel::run(ws, |io| Session::new(pod, streams).run(io)).await
        });
        return Ok(accepted);
    }
    let Some(accepted) = accept_spdy(headers, PROTOCOL) else {
        return Err(store::Error::BadRequest(format!(
            "pods/portforward needs an upgrade to SPDY/3.1 with X-Stream-Protocol-Version: {PROTOCOL}, \
             or to WebSocket with the {TUNNELED} subprotocol"
        )));
    };
    spawn_session("port-forward", shutdown, async move {
        let io = TokioIo::new(on_upgrade.await.map_err(Error::Upgrade)?);
        Session::new(pod, streams).run(io).await
    });
    Ok(accepted)
}

/// The streams of one forwarded connection, as they open.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
}

/// One SPDY connection: open streams and the forwards running for them.
struct Session {
    pod: Value,
    streams: Arc<dyn PodStreams>,
    /// Requests whose two streams are not both open yet, by `requestid`.
    pending: HashMap<String, Pair>,
    /// Where the client's bytes on a data stream go, by stream id.
    inbound: HashMap<u32, mpsc::Sender<Bytes>>,
    forwards: JoinSet<()>,
}

impl Session {
    fn new(pod: Value, streams: Arc<dyn PodStreams>) -> Session {
        Session {
            pod,
            streams,
            pending: HashMap::new(),
            inbound: HashMap::new(),
            forwards: JoinSet::new(),
        }
    }

    /// Reads frames until the client goes away; the forwards end with the connection.
    async fn run<IO>(mut self, io: IO) -> Result<(), Error>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let mut spdy = spdy::connect(io);
        let out = spdy.out.clone();
        let result = loop {
            match spdy.decoder.read(&mut spdy.reader).await {
                Ok(Some(Frame::GoAway { .. })) | Ok(None) => break Ok(()),
                Ok(Some(frame)) => {
                    if self.on_frame(frame, &out).await.is_err() {
                        break Ok(());
                    }
                }
                Err(e) => break Err(Error::Spdy(e)),
            }
        };
        self.forwards.abort_all();
        drop((out, spdy.out));
        let _ = spdy.writing.await;
        result
    }

    /// Handles one frame from the client; an error means the writer is gone.
    async fn on_frame(&mut self, frame: Frame, out: &mpsc::Sender<Frame>) -> Result<(), ()> {
        let send = |f: Frame| async move { out.send(f).await.map_err(|_| ()) };
        match frame {
            Frame::SynStream {
                stream_id, headers, ..
            } => self.on_open(stream_id, &headers, out).await?,
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                if !data.is_empty() {
                    let delta = data.len() as u32;
                    send(Frame::WindowUpdate { stream_id, delta }).await?;
                    if let Some(tx) = self.inbound.get(&stream_id) {
                        let _ = tx.send(data).await;
                    }
                }
                if fin {
                    self.inbound.remove(&stream_id);
                }
            }
            Frame::RstStream { stream_id, .. } => {
                self.inbound.remove(&stream_id);
            }
            Frame::Ping(id) => send(Frame::Ping(id)).await?,
            _ => {}
        }
        Ok(())
    }

    /// Answers a new stream and starts the forward once both streams of its request are open.
    async fn on_open(
        &mut self,
        stream_id: u32,
        headers: &Headers,
        out: &mpsc::Sender<Frame>,
    ) -> Result<(), ()> {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let port = get("port")
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0);
        let (Some(kind), Some(port), Some(request)) = (get("streamtype"), port, get("requestid"))
        else {
            let reset = Frame::RstStream {
                stream_id,
                status: spdy::PROTOCOL_ERROR,
            };
            return out.send(reset).await.map_err(|_| ());
        };
        let reply = Frame::SynReply {
            stream_id,
            fin: false,
            headers: Vec::new(),
        };
        out.send(reply).await.map_err(|_| ())?;
        let pair = self.pending.entry(request.to_string()).or_default();
        pair.port = port;
        match kind {
            "error" => pair.error = Some(stream_id),
            "data" => pair.data = Some(stream_id),
            _ => {}
        }
        let (Some(error), Some(data)) = (pair.error, pair.data) else {
            return Ok(());
        };
        self.pending.remove(request);
        let (tx, rx) = mpsc::channel(16);
        self.inbound.insert(data, tx);
        let forward = Forward {
            target: self.streams.port_address(&self.pod, port),
            port,
            pod: format!(
                "{}/{}",
                meta::namespace_of(&self.pod),
                meta::name_of(&self.pod)
            ),
            uid: meta::str_at(&self.pod, "/metadata/uid")
                .unwrap_or("")
                .to_string(),
            error,
            data,
            out: out.clone(),
        };
        self.forwards.spawn(forward.run(rx));
        Ok(())
    }
}

/// One forwarded connection: the pod's address and the two streams.
struct Forward {
    target: store::Result<SocketAddr>,
    port: u16,
    pod: String,
    uid: String,
    error: u32,
    data: u32,
    out: mpsc::Sender<Frame>,
}

impl Forward {
    fn data(&self, stream_id: u32, fin: bool, data: Bytes) -> Frame {
        Frame::Data {
            stream_id,
            fin,
            data,
        }
    }

    /// Dials the pod and copies both ways; closes both streams at the end, after writing a failed dial
    /// to the error stream.
    async fn run(self, inbound: mpsc::Receiver<Bytes>) {
        let dialled = match &self.target {
            Ok(addr) => match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(tcp)) => Ok(tcp),
                Ok(Err(e)) => Err(format!("failed to connect to {addr}: {e}")),
                Err(_) => Err(format!(
                    "failed to connect to {addr}: timed out after {DIAL_TIMEOUT:?}"
                )),
            },
            Err(e) => Err(e.to_string()),
        };
        match dialled {
            Ok(tcp) => self.copy(tcp, inbound).await,
            Err(why) => {
                let message = format!(
                    "error forwarding port {} to pod {}, uid {}: {why}",
                    self.port, self.pod, self.uid
                );
                let _ = self
                    .out
                    .send(self.data(self.error, false, message.into()))
                    .await;
            }
        }
        let _ = self
            .out
            .send(self.data(self.data, true, Bytes::new()))
            .await;
        let _ = self
            .out
            .send(self.data(self.error, true, Bytes::new()))
            .await;
    }

    /// Copies until the pod closes its side; the client closing its side half-closes the TCP connection.
    async fn copy(&self, tcp: TcpStream, inbound: mpsc::Receiver<Bytes>) {
        let frame = |bytes: &[u8]| self.data(self.data, false, Bytes::copy_from_slice(bytes));
        pump(tcp, inbound, frame, &self.out).await;
    }
}

/// Copies between a pod's port and a client's stream until the pod closes its side: what `inbound`
/// brings is written to the pod (its end half-closes the TCP connection), what the pod sends goes out
/// as `frame`s.
pub(super) async fn pump<T>(
    tcp: TcpStream,
    mut inbound: mpsc::Receiver<Bytes>,
    frame: impl Fn(&[u8]) -> T,
    out: &mpsc::Sender<T>,
) {
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let upstream = async {
        while let Some(bytes) = inbound.recv().await {
            if to_pod.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to_pod.shutdown().await;
        std::future::pending::<()>().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from_pod.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if out.send(frame(&buf[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = downstream => {}
        () = upstream => {}
    }
}
