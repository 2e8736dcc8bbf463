//! `pods/portforward` over WebSocket with the `v4.channel.k8s.io` subprotocol, as the kubelet serves it
//! (kube-rs's `Api::portforward` speaks it): the ports come from the `ports` query parameter, port `i`
//! has data channel `2i` and error channel `2i+1`, and every message starts with its channel byte. The
//! server first writes each port, two bytes little-endian, on both of its channels, then dials the pod
//! once per port and copies bytes between that connection and the data channel; a failed dial is written
//! to the error channel. One WebSocket carries one connection per port: once every one has ended, the
//! server closes it.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::Error;
use crate::meta;
use crate::store::{self, PodStreams};

/// The subprotocol: binary messages, each prefixed with its channel.
pub(super) const PROTOCOL: &str = "v4.channel.k8s.io";
/// How long dialling the pod's port may take.
const DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The ports of a request's `ports` parameters (`ports=80,8080` or repeated), or why they are invalid.
pub(super) fn ports(values: &[&str]) -> Result<Vec<u16>, String> {
    let ports: Vec<u16> = values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|p| match p.trim().parse::<u16>() {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(format!("invalid port {p:?}: ports must be from 1 to 65535")),
        })
        .collect::<Result<_, _>>()?;
    if ports.is_empty() {
        return Err(String::from("at least one port must be specified"));
    }
    Ok(ports)
}

/// Serves the session on `ws` until every forwarded connection ends or the client goes away.
pub(super) async fn run<S>(
    ws: WebSocketStream<S>,
    pod: Value,
    streams: Arc<dyn PodStreams>,
    ports: Vec<u16>,
) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut messages) = ws.split();
    for (i, port) in ports.iter().enumerate() {
        for channel in [2 * i, 2 * i + 1] {
            let mut first = vec![channel as u8];
            first.extend(port.to_le_bytes());
            sink.send(Message::binary(first))
                .await
                .map_err(Error::WebSocket)?;
        }
    }
    let (out, mut outgoing) = mpsc::channel::<Vec<u8>>(16);
    let mut inbound = Vec::new();
    let mut forwards = tokio::task::JoinSet::new();
    for (i, port) in ports.iter().enumerate() {
        let (tx, rx) = mpsc::channel(16);
        inbound.push(tx);
        let forward = Forward {
            target: streams.port_address(&pod, *port),
            port: *port,
            channel: (2 * i) as u8,
            pod: pod.clone(),
            out: out.clone(),
        };
        forwards.spawn(forward.run(rx));
    }
    drop(out);
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(Ok(Message::Binary(bytes))) if bytes.len() > 1 => {
                    let channel = usize::from(bytes[0]);
                    if channel % 2 == 0
                        && let Some(tx) = inbound.get(channel / 2)
                    {
                        let _ = tx.send(bytes.slice(1..)).await;
                    }
                }
                Some(Ok(Message::Close(_))) | None => return Ok(()),
                Some(Err(e)) => return Err(Error::WebSocket(e)),
                Some(Ok(_)) => {}
            },
            frame = outgoing.recv() => match frame {
                Some(bytes) => sink.send(Message::binary(bytes)).await.map_err(Error::WebSocket)?,
                None => break,
            },
        }
    }
    let close = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(close))).await;
    Ok(())
}

/// One port's connection to the pod.
struct Forward {
    target: store::Result<SocketAddr>,
    port: u16,
    /// The data channel; the error channel follows it.
    channel: u8,
    pod: Value,
    out: mpsc::Sender<Vec<u8>>,
}

impl Forward {
    fn message(channel: u8, bytes: &[u8]) -> Vec<u8> {
        let mut message = Vec::with_capacity(bytes.len() + 1);
        message.push(channel);
        message.extend_from_slice(bytes);
        message
    }

    /// Dials the pod and copies until it closes its side; a failed dial goes to the error channel.
    async fn run(self, inbound: mpsc::Receiver<Bytes>) {
        let dialled = match &self.target {
            Ok(addr) => match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(tcp)) => Ok(tcp),
                Ok(Err(e)) => Err(format!("failed to connect to {addr}: {e}")),
                Err(_) => Err(format!("failed to connect to {addr}: timed out")),
            },
            Err(e) => Err(e.to_string()),
        };
        match dialled {
            Ok(tcp) => self.copy(tcp, inbound).await,
            Err(why) => {
                let message = format!(
                    "error forwarding port {} to pod {}/{}, uid {}: {why}",
                    self.port,
                    meta::namespace_of(&self.pod),
                    meta::name_of(&self.pod),
                    meta::str_at(&self.pod, "/metadata/uid").unwrap_or("")
                );
                let _ = self
                    .out
                    .send(Self::message(self.channel + 1, message.as_bytes()))
                    .await;
            }
        }
    }

    async fn copy(&self, tcp: TcpStream, inbound: mpsc::Receiver<Bytes>) {
        let message = |bytes: &[u8]| Self::message(self.channel, bytes);
        super::portforward::pump(tcp, inbound, message, &self.out).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_comma_separated_or_repeated_and_none_is_refused() {
        assert_eq!(ports(&["80,8080", "9090"]), Ok(vec![80, 8080, 9090]));
        assert!(ports(&[]).unwrap_err().contains("at least one port"));
        assert!(ports(&["0"]).is_err());
        assert!(ports(&["http"]).is_err());
    }
}
