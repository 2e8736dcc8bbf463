//! A byte stream tunnelled in WebSocket binary messages, as kubectl tunnels SPDY port forwarding: each
//! message carries the next bytes of the stream, a normal closure ends it.

use futures::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, DuplexStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::Error;

/// How many bytes one message carries at most, and the tunnel buffers.
const CHUNK: usize = 32 * 1024;

/// Runs `session` on the byte stream the WebSocket carries, until the session ends.
pub(super) async fn run<S, F, Fut>(ws: WebSocketStream<S>, session: F) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(DuplexStream) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let (ours, theirs) = tokio::io::duplex(CHUNK);
    let (mut from_session, mut to_session) = tokio::io::split(ours);
    let (mut sink, mut messages) = ws.split();
    let inbound = async {
        while let Some(message) = messages.next().await {
            match message.map_err(Error::WebSocket)? {
                Message::Binary(bytes) => to_session.write_all(&bytes).await.map_err(Error::Io)?,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = to_session.shutdown().await;
        Ok::<_, Error>(())
    };
    let outbound = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = from_session.read(&mut buf).await.map_err(Error::Io)?;
            if n == 0 {
                break;
            }
            let message = Message::binary(buf[..n].to_vec());
            sink.send(message).await.map_err(Error::WebSocket)?;
        }
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = sink.send(Message::Close(Some(close))).await;
        Ok::<_, Error>(())
    };
    // The session ends first (the client went away or sent GOAWAY); its end closes the tunnel.
    let (session, outbound) = tokio::select! {
        both = async { tokio::join!(session(theirs), outbound) } => both,
        inbound = inbound => {
            inbound?;
            return Ok(());
        }
    };
    session.and(outbound)
}
