//! The app-facing gRPC service: keys opened, read and written on behalf of
//! the application, under the workload policy in force when each stream was
//! opened. The state behind it is in [`crate::state`]; the namespace calls
//! are the OM's own service, passed on by [`crate::namespace`].

use ozone_client::prelude::*;
use std::sync::Arc;
use std::time::Instant;

use ozone_proto::sidecar_server::Sidecar;
use ozone_proto::*;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::errors::status;
use crate::metrics::{OpenLabels, ReadLabels};
use crate::state::{MAX_READ, STREAM_PIECE, State};

fn key(k: Option<KeyRef>) -> Result<KeyRef, Status> {
    let k = k.ok_or_else(|| Status::invalid_argument("no key given"))?;
    if k.volume.is_empty() || k.bucket.is_empty() || k.key.is_empty() {
        return Err(Status::invalid_argument(
            "a key needs a volume, a bucket and a name",
        ));
    }
    Ok(k)
}

/// The gRPC service.
#[derive(Clone)]
pub(crate) struct SidecarService {
    state: Arc<State>,
}

impl SidecarService {
    /// A service over `state`.
    pub(crate) fn new(state: Arc<State>) -> Self {
        Self { state }
    }

    async fn read_range(
        &self,
        req: Request<SidecarReadRequest>,
        verified: bool,
    ) -> Result<Response<SidecarReadResponse>, Status> {
        let caller = crate::conn::peer(&req);
        let r = req.into_inner();
        let mut buf = Vec::new();
        self.state
            .read_into(r.handle, caller, r.offset, r.length, verified, &mut buf)
            .await?;
        Ok(Response::new(SidecarReadResponse {
            data: buf.into(),
            offset: r.offset,
        }))
    }

    /// hsync (`sync`) or hflush of the caller's open write.
    async fn flush(
        &self,
        req: Request<SidecarCommitRequest>,
        sync: bool,
    ) -> Result<Response<SidecarWriteResponse>, Status> {
        let _g = self.state.enter_open();
        let caller = crate::conn::peer(&req);
        let h = req.into_inner().handle;
        let w = self.state.writer(h, caller)?;
        let mut g = w.lock().await;
        let w = g
            .as_mut()
            .ok_or_else(|| Status::failed_precondition("the key is already committed"))?;
        if sync {
            w.hsync().await.map_err(status)?;
        } else {
            w.hflush().await.map_err(status)?;
        }
        Ok(Response::new(SidecarWriteResponse { written: w.size() }))
    }
}

#[tonic::async_trait]
impl Sidecar for SidecarService {
    async fn open(
        &self,
        req: Request<SidecarOpenRequest>,
    ) -> Result<Response<SidecarOpenResponse>, Status> {
        let _g = self.state.enter()?;
        let owner = crate::conn::of(&req);
        let opener = crate::conn::peer(&req);
        let r = req.into_inner();
        let k = key(r.key)?;
        let active = self.state.active();
        let verify = active.stream_verify(r.verify_checksum).map_err(|m| {
            self.state.metrics.policy_denials.inc();
            Status::permission_denied(m)
        })?;
        let reader = active
            .client
            .open_key_with(KeyPath::new(&k.volume, &k.bucket, &k.key), Some(verify))
            .await
            .map_err(status)?;
        let size = reader.size();
        let info = reader.info().clone();
        let handle = self.state.add_stream(reader, active, owner, opener)?;
        self.state
            .metrics
            .opens
            .get_or_create(&OpenLabels {
                verify: if verify { "true" } else { "false" },
            })
            .inc();
        Ok(Response::new(SidecarOpenResponse {
            handle,
            size,
            verify_checksum: verify,
            key: Some(info),
        }))
    }

    async fn read(
        &self,
        req: Request<SidecarReadRequest>,
    ) -> Result<Response<SidecarReadResponse>, Status> {
        self.read_range(req, false).await
    }

    type ReadStreamStream = ReceiverStream<Result<SidecarReadResponse, Status>>;

    async fn read_stream(
        &self,
        req: Request<SidecarReadRequest>,
    ) -> Result<Response<Self::ReadStreamStream>, Status> {
        let g = self.state.enter_open();
        let caller = crate::conn::peer(&req);
        let r = req.into_inner();
        let s = self.state.stream(r.handle, caller)?;
        let size = s.reader.size();
        if r.offset > size {
            return Err(Status::out_of_range(format!(
                "offset {} is past the end of a {size}-byte key",
                r.offset
            )));
        }
        let end = r.offset + r.length.min(size - r.offset);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let state = self.state.clone();
        tokio::spawn(async move {
            let _g = g;
            let labels = ReadLabels {
                kind: "stream",
                verify: if s.reader.verify_checksum() {
                    "true"
                } else {
                    "false"
                },
            };
            let t = Instant::now();
            let mut at = r.offset;
            while at < end {
                let n = (end - at).min(STREAM_PIECE) as usize;
                let mut buf = vec![0u8; n];
                let piece = match s.reader.read_exact_at(at, &mut buf).await {
                    Ok(()) => Ok(SidecarReadResponse {
                        data: buf.into(),
                        offset: at,
                    }),
                    Err(e) => Err(status(e)),
                };
                let failed = piece.is_err();
                if tx.send(piece).await.is_err() || failed {
                    return;
                }
                at += n as u64;
            }
            state.metrics.reads.get_or_create(&labels).inc();
            state
                .metrics
                .latency
                .get_or_create(&labels)
                .observe(t.elapsed().as_secs_f64());
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn verified_read(
        &self,
        req: Request<SidecarReadRequest>,
    ) -> Result<Response<SidecarReadResponse>, Status> {
        self.read_range(req, true).await
    }

    async fn close(
        &self,
        req: Request<SidecarCloseRequest>,
    ) -> Result<Response<SidecarCloseResponse>, Status> {
        let caller = crate::conn::peer(&req);
        let h = req.into_inner().handle;
        self.state.remove_stream(h, caller);
        // A closed stream's bytes show in the metrics at once, not at the
        // next periodic export.
        self.state.export_stats();
        Ok(Response::new(SidecarCloseResponse {}))
    }

    async fn create(
        &self,
        req: Request<SidecarCreateRequest>,
    ) -> Result<Response<SidecarCreateResponse>, Status> {
        let _g = self.state.enter()?;
        let owner = crate::conn::of(&req);
        let opener = crate::conn::peer(&req);
        let r = req.into_inner();
        let k = key(r.key)?;
        let w = self
            .state
            .active()
            .client
            .create_file(KeyPath::new(&k.volume, &k.bucket, &k.key), !r.exclusive)
            .await
            .map_err(status)?;
        let handle = self.state.add_writer(w, owner, opener)?;
        Ok(Response::new(SidecarCreateResponse { handle }))
    }

    async fn write(
        &self,
        req: Request<SidecarWriteRequest>,
    ) -> Result<Response<SidecarWriteResponse>, Status> {
        let _g = self.state.enter_open();
        let caller = crate::conn::peer(&req);
        let r = req.into_inner();
        if r.data.len() as u64 > MAX_READ {
            return Err(Status::invalid_argument(format!(
                "a write of {} bytes exceeds the {MAX_READ}-byte limit",
                r.data.len()
            )));
        }
        let w = self.state.writer(r.handle, caller)?;
        let mut g = w.lock().await;
        let w = g
            .as_mut()
            .ok_or_else(|| Status::failed_precondition("the key is already committed"))?;
        w.write(&r.data).await.map_err(status)?;
        if r.hflush {
            w.hflush().await.map_err(status)?;
        }
        Ok(Response::new(SidecarWriteResponse { written: w.size() }))
    }

    async fn commit(
        &self,
        req: Request<SidecarCommitRequest>,
    ) -> Result<Response<SidecarCommitResponse>, Status> {
        let _g = self.state.enter_open();
        let caller = crate::conn::peer(&req);
        let h = req.into_inner().handle;
        let w = self.state.writer(h, caller)?;
        let taken = w
            .lock()
            .await
            .take()
            .ok_or_else(|| Status::failed_precondition("the key is already committed"))?;
        self.state.remove_writer(h);
        let key = taken.close().await.map_err(status)?;
        Ok(Response::new(SidecarCommitResponse { key: Some(key) }))
    }

    async fn hsync(
        &self,
        req: Request<SidecarCommitRequest>,
    ) -> Result<Response<SidecarWriteResponse>, Status> {
        self.flush(req, true).await
    }

    async fn hflush(
        &self,
        req: Request<SidecarCommitRequest>,
    ) -> Result<Response<SidecarWriteResponse>, Status> {
        self.flush(req, false).await
    }

    async fn get_policy(
        &self,
        _req: Request<SidecarPolicyRequest>,
    ) -> Result<Response<SidecarPolicy>, Status> {
        Ok(Response::new(self.state.policy()))
    }

    async fn file_checksum(
        &self,
        req: Request<SidecarChecksumRequest>,
    ) -> Result<Response<SidecarFileChecksum>, Status> {
        let _g = self.state.enter()?;
        let k = key(req.into_inner().key)?;
        let c = self
            .state
            .active()
            .client
            .key_checksum(KeyPath::new(&k.volume, &k.bucket, &k.key))
            .await
            .map_err(status)?;
        Ok(Response::new(SidecarFileChecksum {
            r#type: c.kind as i32,
            crc: c.crc,
            length: c.size,
            bytes_per_checksum: c.bytes_per_checksum,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_whole() {
        assert!(key(None).is_err());
        let k = KeyRef {
            volume: "v".into(),
            bucket: String::new(),
            key: "k".into(),
        };
        assert_eq!(
            key(Some(k)).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
