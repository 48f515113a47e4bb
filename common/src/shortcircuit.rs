//! Framing of the short-circuit socket protocol and file descriptor passing
//! (SCM_RIGHTS) over a tokio `UnixStream`.
//!
//! A frame is `version: u8, command: u8, length: u32 (big-endian), body`,
//! the body a protobuf message. A response may carry file descriptors,
//! attached to its first byte.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use prost::Message;
use tokio::io::Interest;
use tokio::net::UnixStream;

/// Protocol version spoken by this build.
pub const VERSION: u8 = 1;
/// Largest frame body accepted.
pub const MAX_FRAME: u32 = 4 << 20;
/// Bytes of a frame header.
pub const HEADER: usize = 6;

/// Handshake request/response.
pub const CMD_HANDSHAKE: u8 = 1;
/// GetBlock request/response.
pub const CMD_GET_BLOCK: u8 = 2;
/// Release-slot request/response.
pub const CMD_RELEASE: u8 = 3;
/// Error response (body `ScError`).
pub const CMD_ERROR: u8 = 0x7f;
/// Sidecar data socket: positional read of an open stream.
pub const CMD_SIDECAR_READ: u8 = 0x10;
/// Set on the command byte of a response.
pub const RESPONSE: u8 = 0x80;

/// The VALID bit of a slot: set while the datanode vouches for the block.
pub const SLOT_VALID: u64 = 1 << 63;
/// Bytes per slot in the shared segment.
pub const SLOT_SIZE: usize = 64;

/// Framing and transport errors.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("peer closed the connection")]
    Closed,
    #[error("unsupported protocol version {0} (this side speaks {VERSION})")]
    Version(u8),
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(u32),
    #[error("malformed message: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}

/// A received frame.
pub struct Frame {
    /// Command byte.
    pub cmd: u8,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Descriptors that came with the frame.
    pub fds: Vec<OwnedFd>,
}

impl Frame {
    /// Decodes the body as `M`.
    pub fn decode<M: Message + Default>(&self) -> Result<M, FrameError> {
        Ok(M::decode(self.body.as_slice())?)
    }
}

/// Sends one frame with optional descriptors.
pub async fn send(
    stream: &UnixStream,
    cmd: u8,
    msg: &impl Message,
    fds: &[RawFd],
) -> Result<(), FrameError> {
    let len = msg.encoded_len();
    if len > MAX_FRAME as usize {
        return Err(FrameError::TooLarge(len as u32));
    }
    let mut body = Vec::with_capacity(len);
    msg.encode(&mut body).expect("vec has room");
    send_raw(stream, cmd, &body, fds).await
}

/// Sends one frame of already-encoded `body` (a relay forwarding frames).
pub async fn send_raw(
    stream: &UnixStream,
    cmd: u8,
    body: &[u8],
    fds: &[RawFd],
) -> Result<(), FrameError> {
    if body.len() > MAX_FRAME as usize {
        return Err(FrameError::TooLarge(body.len() as u32));
    }
    let mut buf = Vec::with_capacity(HEADER + body.len());
    buf.push(VERSION);
    buf.push(cmd);
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(body);
    let mut sent = 0;
    while sent < buf.len() {
        let n = stream
            .async_io(Interest::WRITABLE, || {
                let iov = [std::io::IoSlice::new(&buf[sent..])];
                let cmsg = [ControlMessage::ScmRights(fds)];
                let cm: &[ControlMessage] = if sent == 0 && !fds.is_empty() {
                    &cmsg
                } else {
                    &[]
                };
                sendmsg::<()>(stream.as_raw_fd(), &iov, cm, MsgFlags::MSG_NOSIGNAL, None)
                    .map_err(std::io::Error::from)
            })
            .await?;
        sent += n;
    }
    Ok(())
}

async fn recv_some(
    stream: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<usize, FrameError> {
    let n = stream
        .async_io(Interest::READABLE, || {
            let mut cmsg = nix::cmsg_space!([RawFd; 4]);
            let mut iov = [std::io::IoSliceMut::new(buf)];
            let msg = recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)?;
            let bytes = msg.bytes;
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: the kernel just installed these descriptors in this process.
                        fds.extend(
                            raw.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
            }
            Ok(bytes)
        })
        .await?;
    if n == 0 {
        return Err(FrameError::Closed);
    }
    Ok(n)
}

/// Receives one frame (and any descriptors sent with it).
pub async fn recv(stream: &UnixStream) -> Result<Frame, FrameError> {
    recv_limited(stream, MAX_FRAME).await
}

/// Receives one frame whose body is at most `max` bytes.
pub async fn recv_limited(stream: &UnixStream, max: u32) -> Result<Frame, FrameError> {
    let mut fds = Vec::new();
    let mut hdr = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        got += recv_some(stream, &mut hdr[got..], &mut fds).await?;
    }
    if hdr[0] != VERSION {
        return Err(FrameError::Version(hdr[0]));
    }
    let len = u32::from_be_bytes([hdr[2], hdr[3], hdr[4], hdr[5]]);
    if len > max.min(MAX_FRAME) {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    let mut got = 0;
    while got < body.len() {
        got += recv_some(stream, &mut body[got..], &mut fds).await?;
    }
    Ok(Frame {
        cmd: hdr[1],
        body,
        fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[tokio::test]
    async fn frames_and_fds_round_trip() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"payload").unwrap();
        let msg = ozone_proto::ScError {
            message: "hello".into(),
            refusal: ozone_proto::ScRefusal::Busy as i32,
        };
        send(&a, CMD_ERROR, &msg, &[f.as_raw_fd()]).await.unwrap();
        let fr = recv(&b).await.unwrap();
        assert_eq!(fr.cmd, CMD_ERROR);
        assert_eq!(
            fr.decode::<ozone_proto::ScError>().unwrap().message,
            "hello"
        );
        assert_eq!(fr.fds.len(), 1);
        let mut got = std::fs::File::from(fr.fds.into_iter().next().unwrap());
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "payload");
    }

    #[tokio::test]
    async fn bad_version_and_size_and_eof() {
        use tokio::io::AsyncWriteExt;
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&[9, 1, 0, 0, 0, 0]).await.unwrap();
        assert!(matches!(recv(&b).await, Err(FrameError::Version(9))));
        a.write_all(&[VERSION, 1, 0xff, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        assert!(matches!(recv(&b).await, Err(FrameError::TooLarge(_))));
        a.write_all(&[VERSION, 1, 0, 0]).await.unwrap();
        drop(a);
        assert!(matches!(recv(&b).await, Err(FrameError::Closed)));
    }
}
