//! The app-facing gRPC service: keys opened, read, written and deleted on
//! behalf of the application, under the workload policy in force when each
//! stream was opened.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ozone_client::{Client, ClientConfig, ClientError, KeyReader, KeyWriter, ReadStatsSnapshot};
use ozone_common::config::{Conf, ConfigError};
use ozone_proto::sidecar_server::Sidecar;
use ozone_proto::*;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::metrics::{Metrics, PathLabels, ReadLabels};
use crate::policy::{Policy, ShortCircuit};

/// Largest single read or write piece.
pub const MAX_READ: u64 = 16 << 20;
/// Piece size of a streaming read.
const STREAM_PIECE: u64 = 1 << 20;
/// Open streams (read and write) per sidecar.
const MAX_STREAMS: usize = 4096;

/// A sidecar that cannot start or reload.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// A config value is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// The policy in force and the client that applies it.
pub struct Active {
    /// The policy.
    pub policy: Policy,
    /// Client whose defaults follow the policy.
    pub client: Client,
    /// When it was loaded (seconds since the epoch).
    pub loaded_at: u64,
    /// Client counters already exported.
    exported: Mutex<ReadStatsSnapshot>,
}

impl Active {
    /// Builds the client for `conf`'s policy against the OM at `om`, on
    /// node `node` (local-first placement and reads).
    pub fn build(om: &str, node: Option<&str>, conf: &Conf) -> Result<Self, SidecarError> {
        let policy = Policy::from_conf(conf)?;
        let mut cfg = ClientConfig::from_conf(om, conf)?;
        cfg.node_name = node.filter(|n| !n.is_empty()).map(str::to_string);
        cfg.verify_checksum = policy.verify_checksum;
        match policy.short_circuit {
            ShortCircuit::Off => cfg.short_circuit = None,
            ShortCircuit::On if cfg.short_circuit.is_none() => tracing::warn!(
                "short-circuit is on but no datanode socket directory is set \
                 (ozone.domain.socket.path): reads use gRPC"
            ),
            _ => {}
        }
        Ok(Self {
            policy,
            client: Client::connect(cfg)?,
            loaded_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            exported: Mutex::new(ReadStatsSnapshot::default()),
        })
    }

    fn proto(&self, node: &str) -> SidecarPolicy {
        SidecarPolicy {
            verify_checksum: self.policy.verify_checksum,
            allow_verify_override: self.policy.allow_verify_override,
            short_circuit: self.policy.short_circuit.as_str().into(),
            passthrough: self.policy.passthrough,
            node_name: node.into(),
            loaded_at: self.loaded_at,
        }
    }
}

struct Stream {
    reader: KeyReader,
    /// Keeps the client (and its counters) of the policy it was opened under.
    _active: Arc<Active>,
}

type Writer = Arc<tokio::sync::Mutex<Option<KeyWriter>>>;

/// Shared state of a sidecar.
pub struct State {
    active: RwLock<Arc<Active>>,
    /// Every policy generation still referenced (for counters).
    generations: Mutex<Vec<Weak<Active>>>,
    streams: Mutex<HashMap<u64, Arc<Stream>>>,
    writers: Mutex<HashMap<u64, Writer>>,
    next: AtomicU64,
    draining: AtomicBool,
    inflight: AtomicUsize,
    /// Milliseconds after `born` of the last request that ended.
    last_request: AtomicU64,
    born: Instant,
    /// Metrics.
    pub metrics: Metrics,
    node: String,
}

/// Counts a request in flight; refused while draining.
pub struct InFlight(Arc<State>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = self.0.born.elapsed().as_millis() as u64;
        self.0.last_request.fetch_max(now, Ordering::AcqRel);
        self.0.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// State with `active` in force on node `node`.
    pub fn new(active: Active, node: String) -> Arc<Self> {
        let metrics = Metrics::default();
        metrics.set_policy(&active.policy);
        let active = Arc::new(active);
        Arc::new(Self {
            generations: Mutex::new(vec![Arc::downgrade(&active)]),
            active: RwLock::new(active),
            streams: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            last_request: AtomicU64::new(0),
            born: Instant::now(),
            metrics,
            node,
        })
    }

    /// The policy generation in force.
    pub fn active(&self) -> Arc<Active> {
        self.active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts a new policy in force for streams opened from now on.
    pub fn replace(&self, a: Active) {
        self.metrics.set_policy(&a.policy);
        self.metrics.reloads.inc();
        let a = Arc::new(a);
        lock(&self.generations).push(Arc::downgrade(&a));
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = a;
    }

    /// The policy in force, as served by `GetPolicy` and `/policy`.
    pub fn policy(&self) -> SidecarPolicy {
        self.active().proto(&self.node)
    }

    /// Starts draining: new requests are refused from now on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether draining.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Requests in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    /// Admits one request that starts new work (open, create, stat, list,
    /// delete) unless draining.
    pub fn enter(self: &Arc<Self>) -> Result<InFlight, Status> {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        let g = InFlight(self.clone());
        if self.draining() {
            self.metrics.drain_refusals.inc();
            return Err(Status::unavailable(
                "the sidecar is draining for shutdown: reconnect and reopen once it is back",
            ));
        }
        Ok(g)
    }

    /// Admits a request on a stream already open (a read, a write, a
    /// commit): served while draining too, so that open streams finish.
    pub fn enter_open(self: &Arc<Self>) -> InFlight {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Read and write streams open (not yet closed or committed).
    pub fn open_handles(&self) -> usize {
        lock(&self.streams).len() + lock(&self.writers).len()
    }

    /// Whether a drain may end: no request in flight, and no open stream
    /// still in use (none, or no request for `idle`: a stream left open by
    /// an application that has gone, as a native sidecar sees at pod
    /// shutdown, is not waited for).
    pub fn drained(&self, idle: Duration) -> bool {
        if self.inflight() > 0 {
            return false;
        }
        let last = Duration::from_millis(self.last_request.load(Ordering::Acquire));
        self.open_handles() == 0 || self.born.elapsed().saturating_sub(last) >= idle
    }

    /// Moves the clients' read counters into the metrics.
    pub fn export_stats(&self) {
        let live: Vec<Arc<Active>> = {
            let mut g = lock(&self.generations);
            g.retain(|w| w.strong_count() > 0);
            g.iter().filter_map(Weak::upgrade).collect()
        };
        for a in live {
            let now = a.client.stats();
            let mut last = lock(&a.exported);
            let m = &self.metrics;
            let sc = now.short_circuit_bytes - last.short_circuit_bytes;
            let local = (now.local_bytes - last.local_bytes).saturating_sub(sc);
            m.bytes
                .get_or_create(&PathLabels {
                    path: "short-circuit",
                })
                .inc_by(sc);
            m.bytes
                .get_or_create(&PathLabels { path: "grpc-local" })
                .inc_by(local);
            m.bytes
                .get_or_create(&PathLabels {
                    path: "grpc-remote",
                })
                .inc_by(now.remote_bytes - last.remote_bytes);
            m.fallbacks
                .inc_by(now.short_circuit_fallbacks - last.short_circuit_fallbacks);
            m.checksum_failures
                .inc_by(now.checksum_failures - last.checksum_failures);
            *last = now;
        }
    }

    fn stream(&self, handle: u64) -> Result<Arc<Stream>, Status> {
        lock(&self.streams).get(&handle).cloned().ok_or_else(|| {
            Status::not_found(format!(
                "no open stream {handle}: it was closed or the sidecar restarted; reopen the key"
            ))
        })
    }

    fn writer(&self, handle: u64) -> Result<Writer, Status> {
        lock(&self.writers).get(&handle).cloned().ok_or_else(|| {
            Status::not_found(format!(
                "no open write {handle}: it was committed or the sidecar restarted; write the key again"
            ))
        })
    }

    fn new_handle(&self) -> Result<u64, Status> {
        let open = lock(&self.streams).len() + lock(&self.writers).len();
        if open >= MAX_STREAMS {
            return Err(Status::resource_exhausted(format!(
                "{open} streams are open (limit {MAX_STREAMS}): close some"
            )));
        }
        Ok(self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// A client error as a gRPC status.
pub fn status(e: ClientError) -> Status {
    let m = e.to_string();
    match e {
        ClientError::NotFound(_) => Status::not_found(m),
        ClientError::AlreadyExists(_) => Status::already_exists(m),
        ClientError::InvalidArgument(_) | ClientError::Name(_) | ClientError::Config(_) => {
            Status::invalid_argument(m)
        }
        ClientError::OutOfRange { .. } => Status::out_of_range(m),
        ClientError::Unavailable(_) | ClientError::AllReplicasFailed { .. } => {
            Status::unavailable(m)
        }
        ClientError::Checksum(_) => Status::data_loss(m),
        ClientError::Rpc { code, message } => Status::new(code, message),
        _ => Status::internal(m),
    }
}

fn key(k: Option<KeyRef>) -> Result<KeyRef, Status> {
    let k = k.ok_or_else(|| Status::invalid_argument("no key given"))?;
    if k.volume.is_empty() || k.bucket.is_empty() || k.key.is_empty() {
        return Err(Status::invalid_argument(
            "a key needs a volume, a bucket and a name",
        ));
    }
    Ok(k)
}

/// Checks a read range against a stream of `size` bytes; returns the
/// length to read (short at the end of the key).
fn range(offset: u64, length: u64, size: u64) -> Result<usize, Status> {
    if length > MAX_READ {
        return Err(Status::invalid_argument(format!(
            "a read of {length} bytes exceeds the {MAX_READ}-byte limit; use ReadStream"
        )));
    }
    if offset > size {
        return Err(Status::out_of_range(format!(
            "offset {offset} is past the end of a {size}-byte key"
        )));
    }
    Ok(length.min(size - offset) as usize)
}

/// The gRPC service.
#[derive(Clone)]
pub struct SidecarService {
    state: Arc<State>,
}

impl SidecarService {
    /// A service over `state`.
    pub fn new(state: Arc<State>) -> Self {
        Self { state }
    }

    async fn read_range(
        &self,
        r: SidecarReadRequest,
        verified: bool,
    ) -> Result<Response<SidecarReadResponse>, Status> {
        let mut buf = Vec::new();
        self.state
            .read_into(r.handle, r.offset, r.length, verified, &mut buf)
            .await?;
        Ok(Response::new(SidecarReadResponse {
            data: buf.into(),
            offset: r.offset,
        }))
    }
}

impl State {
    /// Reads `length` bytes (fewer at the end of the key) at `offset` of
    /// stream `handle` into `buf` (resized; reused across calls), verified
    /// when `verified` or the stream says so.
    pub async fn read_into(
        self: &Arc<Self>,
        handle: u64,
        offset: u64,
        length: u64,
        verified: bool,
        buf: &mut Vec<u8>,
    ) -> Result<(), Status> {
        let _g = self.enter_open();
        let s = self.stream(handle)?;
        let n = range(offset, length, s.reader.size())?;
        buf.resize(n, 0);
        let t = Instant::now();
        let verify = verified || s.reader.verify_checksum();
        let res = if verified && !s.reader.verify_checksum() {
            let mut v = s.reader.clone();
            v.set_verify_checksum(true);
            v.read_exact_at(offset, buf).await
        } else {
            s.reader.read_exact_at(offset, buf).await
        };
        res.map_err(status)?;
        let labels = ReadLabels {
            kind: if verified { "verified" } else { "read" },
            verify: if verify { "true" } else { "false" },
        };
        self.metrics
            .latency
            .get_or_create(&labels)
            .observe(t.elapsed().as_secs_f64());
        self.metrics.reads.get_or_create(&labels).inc();
        Ok(())
    }
}

#[tonic::async_trait]
impl Sidecar for SidecarService {
    async fn stat(
        &self,
        req: Request<SidecarStatRequest>,
    ) -> Result<Response<SidecarStatResponse>, Status> {
        let _g = self.state.enter()?;
        let k = key(req.into_inner().key)?;
        let info = self
            .state
            .active()
            .client
            .key_info(&k.volume, &k.bucket, &k.key)
            .await
            .map_err(status)?;
        Ok(Response::new(SidecarStatResponse { key: Some(info) }))
    }

    async fn list(
        &self,
        req: Request<SidecarListRequest>,
    ) -> Result<Response<SidecarListResponse>, Status> {
        let _g = self.state.enter()?;
        let r = req.into_inner();
        let mut keys = self
            .state
            .active()
            .client
            .list_keys(&r.volume, &r.bucket, &r.prefix)
            .await
            .map_err(status)?;
        if r.limit > 0 {
            keys.truncate(r.limit as usize);
        }
        Ok(Response::new(SidecarListResponse { keys }))
    }

    async fn open(
        &self,
        req: Request<SidecarOpenRequest>,
    ) -> Result<Response<SidecarOpenResponse>, Status> {
        let _g = self.state.enter()?;
        let r = req.into_inner();
        let k = key(r.key)?;
        let active = self.state.active();
        let verify = active
            .policy
            .stream_verify(r.verify_checksum)
            .map_err(|m| {
                self.state.metrics.policy_denials.inc();
                Status::permission_denied(m)
            })?;
        let handle = self.state.new_handle()?;
        let mut reader = active
            .client
            .open_key(&k.volume, &k.bucket, &k.key)
            .await
            .map_err(status)?;
        reader.set_verify_checksum(verify);
        let size = reader.size();
        lock(&self.state.streams).insert(
            handle,
            Arc::new(Stream {
                reader,
                _active: active,
            }),
        );
        self.state.metrics.open_streams.inc();
        Ok(Response::new(SidecarOpenResponse {
            handle,
            size,
            verify_checksum: verify,
        }))
    }

    async fn read(
        &self,
        req: Request<SidecarReadRequest>,
    ) -> Result<Response<SidecarReadResponse>, Status> {
        self.read_range(req.into_inner(), false).await
    }

    type ReadStreamStream = ReceiverStream<Result<SidecarReadResponse, Status>>;

    async fn read_stream(
        &self,
        req: Request<SidecarReadRequest>,
    ) -> Result<Response<Self::ReadStreamStream>, Status> {
        let g = self.state.enter_open();
        let r = req.into_inner();
        let s = self.state.stream(r.handle)?;
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
        self.read_range(req.into_inner(), true).await
    }

    async fn close(
        &self,
        req: Request<SidecarCloseRequest>,
    ) -> Result<Response<SidecarCloseResponse>, Status> {
        let h = req.into_inner().handle;
        if lock(&self.state.streams).remove(&h).is_some() {
            self.state.metrics.open_streams.dec();
        }
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
        let k = key(req.into_inner().key)?;
        let handle = self.state.new_handle()?;
        let w = self
            .state
            .active()
            .client
            .create_key(&k.volume, &k.bucket, &k.key)
            .await
            .map_err(status)?;
        lock(&self.state.writers).insert(handle, Arc::new(tokio::sync::Mutex::new(Some(w))));
        self.state.metrics.open_writers.inc();
        Ok(Response::new(SidecarCreateResponse { handle }))
    }

    async fn write(
        &self,
        req: Request<SidecarWriteRequest>,
    ) -> Result<Response<SidecarWriteResponse>, Status> {
        let _g = self.state.enter_open();
        let r = req.into_inner();
        if r.data.len() as u64 > MAX_READ {
            return Err(Status::invalid_argument(format!(
                "a write of {} bytes exceeds the {MAX_READ}-byte limit",
                r.data.len()
            )));
        }
        let w = self.state.writer(r.handle)?;
        let mut g = w.lock().await;
        let w = g
            .as_mut()
            .ok_or_else(|| Status::failed_precondition("the key is already committed"))?;
        w.write(&r.data).await.map_err(status)?;
        Ok(Response::new(SidecarWriteResponse { written: w.size() }))
    }

    async fn commit(
        &self,
        req: Request<SidecarCommitRequest>,
    ) -> Result<Response<SidecarCommitResponse>, Status> {
        let _g = self.state.enter_open();
        let h = req.into_inner().handle;
        let w = self.state.writer(h)?;
        let taken = w
            .lock()
            .await
            .take()
            .ok_or_else(|| Status::failed_precondition("the key is already committed"))?;
        if lock(&self.state.writers).remove(&h).is_some() {
            self.state.metrics.open_writers.dec();
        }
        let key = taken.close().await.map_err(status)?;
        Ok(Response::new(SidecarCommitResponse { key: Some(key) }))
    }

    async fn delete(
        &self,
        req: Request<SidecarDeleteRequest>,
    ) -> Result<Response<SidecarDeleteResponse>, Status> {
        let _g = self.state.enter()?;
        let k = key(req.into_inner().key)?;
        self.state
            .active()
            .client
            .delete_key(&k.volume, &k.bucket, &k.key)
            .await
            .map_err(status)?;
        Ok(Response::new(SidecarDeleteResponse {}))
    }

    async fn get_policy(
        &self,
        _req: Request<SidecarPolicyRequest>,
    ) -> Result<Response<SidecarPolicy>, Status> {
        Ok(Response::new(self.state.policy()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked() {
        assert_eq!(range(0, 10, 100).unwrap(), 10);
        assert_eq!(range(95, 10, 100).unwrap(), 5);
        assert_eq!(range(100, 10, 100).unwrap(), 0);
        assert_eq!(
            range(101, 1, 100).unwrap_err().code(),
            tonic::Code::OutOfRange
        );
        assert_eq!(
            range(0, MAX_READ + 1, u64::MAX).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

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

#[cfg(test)]
mod drain_tests {
    use super::*;

    #[tokio::test]
    async fn draining_refuses_new_requests_and_counts_in_flight_ones() {
        let a = Active::build("127.0.0.1:1", None, &Conf::new()).unwrap();
        let s = State::new(a, "n1".into());
        let g = s.enter().unwrap();
        assert_eq!(s.inflight(), 1);
        s.drain();
        let e = s.enter().err().unwrap();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert!(e.message().contains("draining"), "{}", e.message());
        // The refused request is not left counted; the admitted one is
        // until it finishes.
        assert_eq!(s.inflight(), 1);
        // Requests on streams already open are still served, and counted.
        let open = s.enter_open();
        assert_eq!(s.inflight(), 2);
        drop(open);
        assert!(!s.drained(Duration::ZERO), "a request in flight");
        drop(g);
        assert_eq!(s.inflight(), 0);
        assert!(s.drained(Duration::from_secs(3600)), "no open stream");
        assert_eq!(s.metrics.drain_refusals.get(), 1);
    }

    #[tokio::test]
    async fn a_new_policy_is_in_force_and_shown() {
        let a = Active::build("127.0.0.1:1", None, &Conf::new()).unwrap();
        let s = State::new(a, "n1".into());
        assert!(s.policy().verify_checksum);
        let off = Conf::parse("ozone.client.verify.checksum = false\n", "t").unwrap();
        s.replace(Active::build("127.0.0.1:1", None, &off).unwrap());
        let p = s.policy();
        assert!(!p.verify_checksum);
        assert_eq!(p.node_name, "n1");
        assert_eq!(s.metrics.reloads.get(), 1);
    }
}
