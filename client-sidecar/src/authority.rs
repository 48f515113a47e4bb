//! Requests from gRPC's C core (Python's `grpcio`, C++, Ruby) over a UNIX
//! socket carry the socket's path, percent-encoded, as `:authority`
//! (`tmp%2Fapp%2Fsidecar.sock`). That is no valid authority, and the HTTP/2
//! server under tonic (h2) resets such a stream with
//! `RST_STREAM(PROTOCOL_ERROR)`. For a UNIX socket the authority says
//! nothing (the socket is the peer), so the sidecar reads the first header
//! block of each application connection: when its authority is valid (Rust,
//! Java and Go clients send `localhost` or a host name) the connection is
//! passed through untouched from then on; when it is not, every header
//! block of that connection is decoded and encoded again (HPACK, a table of
//! its own towards the server) with `:authority: localhost`. Only header
//! blocks are touched; DATA frames are copied as they are.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// The client connection preface (RFC 9113, 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Frames this module writes stay within HTTP/2's initial maximum frame
/// size, which every server accepts.
const MAX_FRAME: usize = 16_384;
/// A header block larger than this is passed on as it is (h2 refuses it).
const MAX_BLOCK: usize = 1 << 20;
/// What replaces an invalid authority.
const LOCAL: &[u8] = b"localhost";

enum Mode {
    /// Reading the preface and the frames up to the first header block.
    Inspect,
    /// Bytes pass as they are.
    Pass,
    /// Header blocks are decoded and encoded again.
    Rewrite(Box<Codec>),
}

struct Codec {
    decoder: fluke_hpack::Decoder<'static>,
    encoder: fluke_hpack::Encoder<'static>,
}

/// A header block being gathered: its HEADERS frame's stream, flags and
/// priority fields, and its fragments so far.
struct Block {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    raw: Vec<u8>,
    fragment: Vec<u8>,
}

/// The client-to-server direction of one connection, with the authority
/// fix.
pub(crate) struct AuthorityFix {
    mode: Mode,
    preface_left: usize,
    /// Bytes read and not yet framed.
    input: Vec<u8>,
    /// Bytes ready for the server.
    output: Vec<u8>,
    sent: usize,
    block: Option<Block>,
    /// A decoder for the first block, to look at it.
    look: fluke_hpack::Decoder<'static>,
}

impl Default for AuthorityFix {
    fn default() -> Self {
        Self {
            mode: Mode::Inspect,
            preface_left: PREFACE.len(),
            input: Vec::new(),
            output: Vec::new(),
            sent: 0,
            block: None,
            look: fluke_hpack::Decoder::new(),
        }
    }
}

fn valid_authority(v: &[u8]) -> bool {
    http::uri::Authority::try_from(v).is_ok()
}

impl AuthorityFix {
    /// Reads from `io` into `buf`, fixing header blocks as needed.
    pub(crate) fn poll_read<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if self.sent < self.output.len() {
                let n = (self.output.len() - self.sent).min(buf.remaining());
                buf.put_slice(&self.output[self.sent..self.sent + n]);
                self.sent += n;
                if self.sent == self.output.len() {
                    self.output.clear();
                    self.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if matches!(self.mode, Mode::Pass) && self.input.is_empty() {
                return Pin::new(io).poll_read(cx, buf);
            }
            if matches!(self.mode, Mode::Pass) {
                // What was read before the decision.
                self.output = std::mem::take(&mut self.input);
                continue;
            }
            let mut chunk = [0u8; 16 << 10];
            let mut rb = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut *io).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                // End of stream: what is left goes on as it is.
                self.output = std::mem::take(&mut self.input);
                if let Some(b) = self.block.take() {
                    self.output.extend_from_slice(&b.raw);
                }
                if self.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                self.mode = Mode::Pass;
                continue;
            }
            self.input.extend_from_slice(rb.filled());
            self.process();
        }
    }

    /// Frames what has been read and moves it to `output`, fixed.
    fn process(&mut self) {
        if self.preface_left > 0 {
            let n = self.preface_left.min(self.input.len());
            self.output.extend(self.input.drain(..n));
            self.preface_left -= n;
            if self.preface_left > 0 {
                return;
            }
        }
        while self.input.len() >= FRAME_HEADER && !matches!(self.mode, Mode::Pass) {
            let len = u32::from_be_bytes([0, self.input[0], self.input[1], self.input[2]]) as usize;
            if self.input.len() < FRAME_HEADER + len {
                return;
            }
            let frame: Vec<u8> = self.input.drain(..FRAME_HEADER + len).collect();
            self.frame(frame);
        }
        if matches!(self.mode, Mode::Pass) {
            self.output.append(&mut self.input);
        }
    }

    fn frame(&mut self, frame: Vec<u8>) {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER..];
        match kind {
            HEADERS if self.block.is_none() => {
                let mut p = payload;
                let mut pad = 0usize;
                if flags & PADDED != 0 {
                    let Some((&n, rest)) = p.split_first() else {
                        return self.give_up(frame);
                    };
                    pad = n as usize;
                    p = rest;
                }
                let mut priority = None;
                if flags & PRIORITY != 0 {
                    if p.len() < 5 {
                        return self.give_up(frame);
                    }
                    priority = Some([p[0], p[1], p[2], p[3], p[4]]);
                    p = &p[5..];
                }
                if pad > p.len() {
                    return self.give_up(frame);
                }
                let fragment = p[..p.len() - pad].to_vec();
                self.block = Some(Block {
                    stream,
                    flags,
                    priority,
                    fragment,
                    raw: frame.clone(),
                });
            }
            CONTINUATION if self.block.is_some() => {
                let b = self.block.as_mut().expect("a block");
                b.fragment.extend_from_slice(payload);
                b.raw.extend_from_slice(&frame);
                b.flags |= flags & END_HEADERS;
            }
            _ => {
                // Anything else (or a frame out of place, for the server to
                // refuse) passes as it is.
                if let Some(b) = self.block.take() {
                    self.output.extend_from_slice(&b.raw);
                }
                self.output.extend_from_slice(&frame);
                return;
            }
        }
        let done = self
            .block
            .as_ref()
            .is_some_and(|b| b.flags & END_HEADERS != 0 || b.fragment.len() > MAX_BLOCK);
        if done {
            let b = self.block.take().expect("a block");
            self.block_done(b);
        }
    }

    /// A frame this module cannot read: it and everything after pass as
    /// they are (the server judges them).
    fn give_up(&mut self, frame: Vec<u8>) {
        if let Some(b) = self.block.take() {
            self.output.extend_from_slice(&b.raw);
        }
        self.output.extend_from_slice(&frame);
        self.mode = Mode::Pass;
    }

    fn block_done(&mut self, b: Block) {
        match &mut self.mode {
            Mode::Inspect => {
                let bad = match self.look.decode(&b.fragment) {
                    Ok(headers) => headers
                        .iter()
                        .any(|(n, v)| n.as_slice() == b":authority" && !valid_authority(v)),
                    Err(_) => false,
                };
                if !bad {
                    self.output.extend_from_slice(&b.raw);
                    self.mode = Mode::Pass;
                    return;
                }
                tracing::debug!(
                    "a client sent an invalid :authority (a UNIX socket path); rewriting its header blocks"
                );
                // Decode this block again with the connection's decoder.
                let mut codec = Box::new(Codec {
                    decoder: fluke_hpack::Decoder::new(),
                    encoder: fluke_hpack::Encoder::new(),
                });
                let out = codec.rewrite(&b);
                match out {
                    Some(bytes) => {
                        self.output.extend_from_slice(&bytes);
                        self.mode = Mode::Rewrite(codec);
                    }
                    None => self.give_up(b.raw),
                }
            }
            Mode::Rewrite(codec) => match codec.rewrite(&b) {
                Some(bytes) => self.output.extend_from_slice(&bytes),
                // The tables no longer agree: the server is best placed to
                // refuse the connection.
                None => self.give_up(b.raw),
            },
            Mode::Pass => self.output.extend_from_slice(&b.raw),
        }
    }
}

impl Codec {
    /// Block `b` decoded and encoded again, an invalid authority replaced,
    /// as frames; `None` when it does not decode.
    fn rewrite(&mut self, b: &Block) -> Option<Vec<u8>> {
        let headers = self.decoder.decode(&b.fragment).ok()?;
        let fixed = headers.iter().map(|(n, v)| {
            if n.as_slice() == b":authority" && !valid_authority(v) {
                (n.as_slice(), LOCAL)
            } else {
                (n.as_slice(), v.as_slice())
            }
        });
        let block = self.encoder.encode(fixed);
        Some(frames(b, &block))
    }
}

/// `block` as a HEADERS frame (with `b`'s stream, END_STREAM and priority)
/// and CONTINUATION frames.
fn frames(b: &Block, block: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len() + 64);
    let prio = b.priority.map_or(0, |_| 5);
    let first = block.len().min(MAX_FRAME - prio);
    let mut flags = b.flags & END_STREAM;
    if b.priority.is_some() {
        flags |= PRIORITY;
    }
    if first == block.len() {
        flags |= END_HEADERS;
    }
    header(&mut out, first + prio, HEADERS, flags, b.stream);
    if let Some(p) = b.priority {
        out.extend_from_slice(&p);
    }
    out.extend_from_slice(&block[..first]);
    let mut rest = &block[first..];
    while !rest.is_empty() {
        let n = rest.len().min(MAX_FRAME);
        let flags = if n == rest.len() { END_HEADERS } else { 0 };
        header(&mut out, n, CONTINUATION, flags, b.stream);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

fn header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's bytes: the preface, a SETTINGS frame, then one request
    /// per authority (headers and a DATA frame each) from one encoder.
    fn client_bytes(authorities: &[&[u8]]) -> Vec<u8> {
        let mut enc = fluke_hpack::Encoder::new();
        let mut out = PREFACE.to_vec();
        header(&mut out, 0, 0x4, 0, 0);
        for (i, a) in authorities.iter().enumerate() {
            let stream = 1 + 2 * i as u32;
            let block = enc.encode([
                (&b":method"[..], &b"POST"[..]),
                (b":scheme", b"http"),
                (b":path", b"/ozone.v1.Sidecar/GetPolicy"),
                (b":authority", a),
                (b"content-type", b"application/grpc"),
            ]);
            // Split over a HEADERS and a CONTINUATION frame, padded.
            let cut = block.len() / 2;
            header(&mut out, cut + 3, HEADERS, PADDED, stream);
            out.push(2);
            out.extend_from_slice(&block[..cut]);
            out.extend_from_slice(&[0, 0]);
            header(
                &mut out,
                block.len() - cut,
                CONTINUATION,
                END_HEADERS,
                stream,
            );
            out.extend_from_slice(&block[cut..]);
            header(&mut out, 5, 0x0, END_STREAM, stream);
            out.extend_from_slice(&[0, 0, 0, 0, 0]);
        }
        out
    }

    /// What the server reads of `bytes`, fed in pieces of `piece` bytes.
    async fn through(bytes: Vec<u8>, piece: usize) -> Vec<u8> {
        let (mut w, mut r) = tokio::io::duplex(1 << 20);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in bytes.chunks(piece) {
                w.write_all(c).await.unwrap();
            }
        });
        let mut fix = AuthorityFix::default();
        let mut out = Vec::new();
        let mut buf = [0u8; 1000];
        loop {
            let mut rb = ReadBuf::new(&mut buf);
            std::future::poll_fn(|cx| fix.poll_read(&mut r, cx, &mut rb))
                .await
                .unwrap();
            if rb.filled().is_empty() {
                break;
            }
            out.extend_from_slice(rb.filled());
        }
        writer.await.unwrap();
        out
    }

    /// The requests the server decodes from `bytes`: (stream, authority,
    /// data frames seen after it).
    fn requests(bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
        assert_eq!(&bytes[..PREFACE.len()], PREFACE);
        let mut p = &bytes[PREFACE.len()..];
        let mut dec = fluke_hpack::Decoder::new();
        let mut out = Vec::new();
        let mut block = Vec::new();
        while !p.is_empty() {
            let len = u32::from_be_bytes([0, p[0], p[1], p[2]]) as usize;
            let (kind, flags) = (p[3], p[4]);
            let stream = u32::from_be_bytes([p[5], p[6], p[7], p[8]]);
            let mut payload = &p[9..9 + len];
            if kind == HEADERS || kind == CONTINUATION {
                if flags & PADDED != 0 {
                    let pad = payload[0] as usize;
                    payload = &payload[1..payload.len() - pad];
                }
                block.extend_from_slice(payload);
                if flags & END_HEADERS != 0 {
                    let h = dec.decode(&block).unwrap();
                    block.clear();
                    let a = h
                        .iter()
                        .find(|(n, _)| n == b":authority")
                        .unwrap()
                        .1
                        .clone();
                    out.push((stream, a));
                }
            }
            p = &p[9 + len..];
        }
        out
    }

    #[tokio::test]
    async fn a_socket_path_as_authority_becomes_localhost_on_every_request() {
        let bad: &[u8] = b"tmp%2Fapp%2Fsidecar.sock";
        let bytes = client_bytes(&[bad, bad, b"tmp%2Fother"]);
        for piece in [1, 7, 4096] {
            let got = requests(&through(bytes.clone(), piece).await);
            assert_eq!(
                got,
                vec![
                    (1, b"localhost".to_vec()),
                    (3, b"localhost".to_vec()),
                    (5, b"localhost".to_vec()),
                ],
                "pieces of {piece}"
            );
        }
    }

    #[tokio::test]
    async fn a_valid_authority_passes_untouched() {
        let bytes = client_bytes(&[b"localhost", b"tmp%2Flater"]);
        assert_eq!(through(bytes.clone(), 5).await, bytes);
    }

    #[tokio::test]
    async fn garbage_passes_as_it_is() {
        let mut bytes = PREFACE.to_vec();
        bytes.extend_from_slice(b"\x00\x00\x02\x01\x08\x00\x00\x00\x01\x09\x09");
        bytes.extend_from_slice(b"not a frame at all");
        assert_eq!(through(bytes.clone(), 3).await, bytes);
    }
}
