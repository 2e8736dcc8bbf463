//! SPDY/3.1 framing, the server side: frames read from and written to an upgraded connection, with the
//! zlib-compressed header blocks (one compression context per direction, preset with the SPDY/3
//! dictionary, each block ending in a sync flush).

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::dictionary::DICTIONARY;

/// The protocol version in control frames.
const VERSION: u16 = 3;
/// The flag that ends a stream's sending side.
const FLAG_FIN: u8 = 0x01;
/// Stream ids are 31 bits.
const STREAM_ID_MASK: u32 = 0x7fff_ffff;

/// `RST_STREAM` status: the frame broke the protocol.
pub const PROTOCOL_ERROR: u32 = 1;

/// Header names (lower case) and values, in order.
pub type Headers = Vec<(String, String)>;

/// One SPDY/3.1 frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// A peer opens a stream.
    SynStream {
        /// The stream.
        stream_id: u32,
        /// The opener sends nothing more.
        fin: bool,
        /// The stream's headers.
        headers: Headers,
    },
    /// The answer to a `SynStream`.
    SynReply {
        /// The stream.
        stream_id: u32,
        /// The replier sends nothing more.
        fin: bool,
        /// The reply's headers.
        headers: Headers,
    },
    /// A stream ends abnormally.
    RstStream {
        /// The stream.
        stream_id: u32,
        /// Why.
        status: u32,
    },
    /// Connection settings as `(id, value)`.
    Settings(Vec<(u32, u32)>),
    /// A ping, echoed by the other side.
    Ping(u32),
    /// The sender accepts no new streams.
    GoAway {
        /// The last stream the sender handled.
        last_good_stream_id: u32,
        /// Why.
        status: u32,
    },
    /// More headers on a stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// The headers.
        headers: Headers,
    },
    /// The receiver of a stream's data grants `delta` more bytes.
    WindowUpdate {
        /// The stream.
        stream_id: u32,
        /// The bytes granted.
        delta: u32,
    },
    /// Stream data.
    Data {
        /// The stream.
        stream_id: u32,
        /// The sender sends nothing more on this stream.
        fin: bool,
        /// The bytes.
        data: Bytes,
    },
    /// A control frame of another type, skipped.
    Unknown(u16),
}

/// A frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection failed.
    #[error("reading a SPDY frame")]
    Io(#[source] std::io::Error),
    /// A control frame of another protocol version.
    #[error("SPDY version {0} is not served (only 3)")]
    Version(u16),
    /// A frame's payload is shorter than its type requires, or a header block is malformed.
    #[error("a malformed SPDY {0} frame")]
    Malformed(&'static str),
    /// A header block does not inflate.
    #[error("inflating a SPDY header block")]
    Inflate(#[source] flate2::DecompressError),
    /// A header block does not deflate.
    #[error("deflating a SPDY header block")]
    Deflate(#[source] flate2::CompressError),
}

/// Reads frames, keeping the inflate context of the peer's header blocks.
pub struct Decoder {
    inflate: Decompress,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            inflate: Decompress::new(true),
        }
    }
}

/// A big-endian `u32` at `at`, or a malformed-frame error.
fn u32_at(b: &[u8], at: usize, what: &'static str) -> Result<u32, Error> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(Error::Malformed(what))
}

impl Decoder {
    /// The next frame, or `None` when the connection ended between frames.
    pub async fn read<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> Result<Option<Frame>, Error> {
        let mut head = [0u8; 8];
        match r.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(Error::Io(e)),
        }
        let flags = head[4];
        let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload).await.map_err(Error::Io)?;
        let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream_id: first & STREAM_ID_MASK,
                fin: flags & FLAG_FIN != 0,
                data: Bytes::from(payload),
            }));
        }
        let version = ((first >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(Error::Version(version));
        }
        self.control((first & 0xffff) as u16, flags, &payload)
            .map(Some)
    }

    fn control(&mut self, kind: u16, flags: u8, p: &[u8]) -> Result<Frame, Error> {
        let fin = flags & FLAG_FIN != 0;
        let frame = match kind {
            1 => {
                let block = p.get(10..).ok_or(Error::Malformed("SYN_STREAM"))?;
                Frame::SynStream {
                    stream_id: u32_at(p, 0, "SYN_STREAM")? & STREAM_ID_MASK,
                    fin,
                    headers: self.headers(block)?,
                }
            }
            2 => Frame::SynReply {
                stream_id: u32_at(p, 0, "SYN_REPLY")? & STREAM_ID_MASK,
                fin,
                headers: self.headers(&p[4..])?,
            },
            3 => Frame::RstStream {
                stream_id: u32_at(p, 0, "RST_STREAM")? & STREAM_ID_MASK,
                status: u32_at(p, 4, "RST_STREAM")?,
            },
            4 => {
                let count = u32_at(p, 0, "SETTINGS")? as usize;
                let entries = (0..count.min(p.len() / 8))
                    .map(|i| {
                        let id = u32_at(p, 4 + i * 8, "SETTINGS")? & 0x00ff_ffff;
                        Ok((id, u32_at(p, 8 + i * 8, "SETTINGS")?))
                    })
                    .collect::<Result<_, Error>>()?;
                Frame::Settings(entries)
            }
            6 => Frame::Ping(u32_at(p, 0, "PING")?),
            7 => Frame::GoAway {
                last_good_stream_id: u32_at(p, 0, "GOAWAY")? & STREAM_ID_MASK,
                status: u32_at(p, 4, "GOAWAY").unwrap_or(0),
            },
            8 => Frame::Headers {
                stream_id: u32_at(p, 0, "HEADERS")? & STREAM_ID_MASK,
                headers: self.headers(&p[4..])?,
            },
            9 => Frame::WindowUpdate {
                stream_id: u32_at(p, 0, "WINDOW_UPDATE")? & STREAM_ID_MASK,
                delta: u32_at(p, 4, "WINDOW_UPDATE")? & STREAM_ID_MASK,
            },
            other => Frame::Unknown(other),
        };
        Ok(frame)
    }

    /// Inflates and parses a header block.
    fn headers(&mut self, block: &[u8]) -> Result<Headers, Error> {
        let plain = self.inflate_block(block)?;
        parse_headers(&plain)
    }

    fn inflate_block(&mut self, input: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(input.len() * 4 + 256);
        let mut pos = 0;
        loop {
            let (in_before, out_before) = (self.inflate.total_in(), out.len());
            let result =
                self.inflate
                    .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            pos += (self.inflate.total_in() - in_before) as usize;
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&DICTIONARY)
                        .map_err(Error::Inflate)?;
                    continue;
                }
                Err(e) => return Err(Error::Inflate(e)),
            }
            if out.len() == out.capacity() {
                out.reserve(out.capacity());
                continue;
            }
            if pos >= input.len() {
                return Ok(out);
            }
            if self.inflate.total_in() == in_before && out.len() == out_before {
                return Err(Error::Malformed("header block"));
            }
        }
    }
}

/// Parses an inflated header block: a count, then length-prefixed names and values.
fn parse_headers(b: &[u8]) -> Result<Headers, Error> {
    let count = u32_at(b, 0, "header block")? as usize;
    let mut at = 4;
    let field = |at: &mut usize| -> Result<String, Error> {
        let len = u32_at(b, *at, "header block")? as usize;
        let bytes = b
            .get(*at + 4..*at + 4 + len)
            .ok_or(Error::Malformed("header block"))?;
        *at += 4 + len;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    };
    let mut headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let name = field(&mut at)?.to_ascii_lowercase();
        let value = field(&mut at)?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// Writes frames, keeping the deflate context of this side's header blocks.
pub struct Encoder {
    deflate: Compress,
}

impl Default for Encoder {
    fn default() -> Encoder {
        let mut deflate = Compress::new(Compression::best(), true);
        // A fresh context always takes a dictionary.
        let _ = deflate.set_dictionary(&DICTIONARY);
        Encoder { deflate }
    }
}

impl Encoder {
    /// The bytes of `frame` on the wire. Data payloads must stay under 16 MiB (24-bit lengths).
    pub fn encode(&mut self, frame: &Frame) -> Result<Vec<u8>, Error> {
        let (kind, flags, payload) = match frame {
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                let mut out = Vec::with_capacity(8 + data.len());
                out.extend_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
                out.push(if *fin { FLAG_FIN } else { 0 });
                out.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
                out.extend_from_slice(data);
                return Ok(out);
            }
            Frame::SynStream {
                stream_id,
                fin,
                headers,
            } => {
                let mut p = stream_id.to_be_bytes().to_vec();
                p.extend_from_slice(&[0; 6]);
                p.extend(self.header_block(headers)?);
                (1, fin_flag(*fin), p)
            }
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            } => (2, fin_flag(*fin), self.with_block(*stream_id, headers)?),
            Frame::RstStream { stream_id, status } => (3, 0, two_words(*stream_id, *status)),
            Frame::Settings(entries) => {
                let mut p = (entries.len() as u32).to_be_bytes().to_vec();
                for (id, value) in entries {
                    p.extend_from_slice(&(id & 0x00ff_ffff).to_be_bytes());
                    p.extend_from_slice(&value.to_be_bytes());
                }
                (4, 0, p)
            }
            Frame::Ping(id) => (6, 0, id.to_be_bytes().to_vec()),
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => (7, 0, two_words(*last_good_stream_id, *status)),
            Frame::Headers { stream_id, headers } => (8, 0, self.with_block(*stream_id, headers)?),
            Frame::WindowUpdate { stream_id, delta } => (9, 0, two_words(*stream_id, *delta)),
            Frame::Unknown(_) => return Err(Error::Malformed("unknown")),
        };
        let mut out = Vec::with_capacity(8 + payload.len());
        out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
        out.extend_from_slice(&(kind as u16).to_be_bytes());
        out.push(flags);
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        out.extend(payload);
        Ok(out)
    }

    fn with_block(&mut self, stream_id: u32, headers: &Headers) -> Result<Vec<u8>, Error> {
        let mut p = stream_id.to_be_bytes().to_vec();
        p.extend(self.header_block(headers)?);
        Ok(p)
    }

    /// Serializes and deflates a header block, ending in a sync flush.
    fn header_block(&mut self, headers: &Headers) -> Result<Vec<u8>, Error> {
        let mut plain = (headers.len() as u32).to_be_bytes().to_vec();
        for (name, value) in headers {
            for field in [name.to_ascii_lowercase().as_bytes(), value.as_bytes()] {
                plain.extend_from_slice(&(field.len() as u32).to_be_bytes());
                plain.extend_from_slice(field);
            }
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut pos = 0;
        loop {
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(&plain[pos..], &mut out, FlushCompress::Sync)
                .map_err(Error::Deflate)?;
            pos += (self.deflate.total_in() - before) as usize;
            if pos >= plain.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(out.capacity().max(64));
        }
    }
}

/// Encodes the frames a session sends onto the connection, in order, until the senders are gone or the
/// connection fails; then shuts the connection's writing side.
pub async fn write_frames<W: AsyncWrite + Unpin>(mut w: W, mut frames: mpsc::Receiver<Frame>) {
    let mut encoder = Encoder::default();
    while let Some(frame) = frames.recv().await {
        let bytes = match encoder.encode(&frame) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "encoding a SPDY frame failed");
                break;
            }
        };
        if w.write_all(&bytes).await.is_err() || w.flush().await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

fn fin_flag(fin: bool) -> u8 {
    if fin { FLAG_FIN } else { 0 }
}

fn two_words(a: u32, b: u32) -> Vec<u8> {
    let mut p = a.to_be_bytes().to_vec();
    p.extend_from_slice(&b.to_be_bytes());
    p
}

/// A SPDY connection being served: its reading half with a decoder, and the frames to write, which
/// a task writes in order until every sender is dropped.
pub struct Connection<R> {
    pub reader: R,
    pub decoder: Decoder,
    pub out: mpsc::Sender<Frame>,
    pub writing: tokio::task::JoinHandle<()>,
}

/// Splits `io` into a [`Connection`].
pub fn connect<IO>(io: IO) -> Connection<tokio::io::ReadHalf<IO>>
where
    IO: tokio::io::AsyncRead + AsyncWrite + Send + 'static,
{
    let (reader, writer) = tokio::io::split(io);
    let (out, frames) = mpsc::channel::<Frame>(64);
    Connection {
        reader,
        decoder: Decoder::default(),
        out,
        writing: tokio::spawn(write_frames(writer, frames)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Frames written by one side read back the same on the other, header contexts carried across frames.
    #[tokio::test]
    async fn frames_round_trip_through_the_shared_compression_contexts() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                fin: false,
                headers: headers(&[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "0"),
                ]),
            },
            Frame::SynReply {
                stream_id: 1,
                fin: false,
                headers: Vec::new(),
            },
            Frame::SynStream {
                stream_id: 3,
                fin: false,
                headers: headers(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]),
            },
            Frame::Data {
                stream_id: 3,
                fin: true,
                data: Bytes::from_static(b"GET / HTTP/1.0\r\n\r\n"),
            },
            Frame::Ping(1),
            Frame::Settings(vec![(7, 65536)]),
            Frame::WindowUpdate {
                stream_id: 3,
                delta: 18,
            },
            Frame::RstStream {
                stream_id: 3,
                status: 5,
            },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: 0,
            },
        ];
        let mut encoder = Encoder::default();
        let mut wire = Vec::new();
        for f in &frames {
            wire.extend(encoder.encode(f).unwrap());
        }
        let mut decoder = Decoder::default();
        let mut reader = wire.as_slice();
        let mut read = Vec::new();
        while let Some(f) = decoder.read(&mut reader).await.unwrap() {
            read.push(f);
        }
        assert_eq!(read, frames);
    }

    #[tokio::test]
    async fn another_protocol_version_is_refused() {
        let wire = [0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1];
        let err = Decoder::default().read(&mut &wire[..]).await.unwrap_err();
        assert!(matches!(err, Error::Version(2)), "{err}");
    }
}
