//! The shared state of a sidecar: the policy generations, the open read and
//! write streams by handle, drain accounting, and counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use ozone_client::prelude::*;
use ozone_client::{KeyReader, KeyWriter};
use ozone_proto::SidecarPolicy;
use tonic::Status;

use crate::active::Active;
use crate::conn::ConnId;
use crate::errors::status;
use crate::metrics::{Metrics, PathLabels, ReadLabels};
use crate::peer::{Access, Peer};

/// Largest single read or write piece.
pub(crate) const MAX_READ: u64 = 16 << 20;
/// Piece size of a streaming read.
pub(crate) const STREAM_PIECE: u64 = 1 << 20;
/// Open streams (read and write) per sidecar.
const MAX_STREAMS: usize = 4096;

/// An open read stream.
pub(crate) struct Stream {
    /// The key's reader, with the stream's verify switch.
    pub(crate) reader: KeyReader,
    /// Keeps the client (and its counters) of the policy it was opened under.
    _active: Arc<Active>,
    /// Milliseconds after the state's birth of the last use.
    used: AtomicU64,
    /// The application connection that opened it.
    owner: Option<ConnId>,
    /// The process that opened it: only it may use the handle.
    opener: Option<Peer>,
}

pub(crate) type Writer = Arc<tokio::sync::Mutex<Option<KeyWriter>>>;

/// An open write and its last use.
struct WriterSlot {
    w: Writer,
    used: AtomicU64,
    owner: Option<ConnId>,
    opener: Option<Peer>,
}

/// Why a stream was closed by the sidecar rather than by its application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaped {
    /// The application's connection went away (it closed it, exited or died).
    Connection,
    /// Unused for longer than `ozone.sidecar.stream.idle.timeout`.
    Idle,
}

impl Reaped {
    fn label(self) -> &'static str {
        match self {
            Reaped::Connection => "connection",
            Reaped::Idle => "idle",
        }
    }
}

/// Shared state of a sidecar.
pub(crate) struct State {
    active: RwLock<Arc<Active>>,
    /// Every policy generation still referenced (for counters).
    generations: Mutex<Vec<Weak<Active>>>,
    streams: Mutex<HashMap<u64, Arc<Stream>>>,
    writers: Mutex<HashMap<u64, Arc<WriterSlot>>>,
    /// The handles each application connection opened.
    owned: Mutex<HashMap<ConnId, std::collections::HashSet<u64>>>,
    draining: AtomicBool,
    inflight: AtomicUsize,
    /// Milliseconds after `born` of the last request that ended.
    last_request: AtomicU64,
    born: Instant,
    /// Metrics.
    pub metrics: Metrics,
    node: String,
    /// Who may connect.
    pub access: Access,
}

/// Counts a request in flight; refused while draining.
pub(crate) struct InFlight(Arc<State>);

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
    /// State with `active` in force on node `node`, its sockets open to
    /// `access`.
    pub(crate) fn new(active: Active, node: String, access: Access) -> Arc<Self> {
        let metrics = Metrics::default();
        metrics.set_policy(&active);
        let active = Arc::new(active);
        Arc::new(Self {
            generations: Mutex::new(vec![Arc::downgrade(&active)]),
            active: RwLock::new(active),
            streams: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            owned: Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            last_request: AtomicU64::new(0),
            born: Instant::now(),
            metrics,
            node,
            access,
        })
    }

    /// The policy generation in force.
    pub(crate) fn active(&self) -> Arc<Active> {
        self.active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts a new policy in force for streams opened from now on.
    pub(crate) fn replace(&self, a: Active) {
        self.metrics.set_policy(&a);
        self.metrics.reloads.inc();
        let a = Arc::new(a);
        lock(&self.generations).push(Arc::downgrade(&a));
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = a;
    }

    /// The policy in force, as served by `GetPolicy` and `/policy`.
    pub(crate) fn policy(&self) -> SidecarPolicy {
        self.active().proto(&self.node)
    }

    /// Starts draining: new requests are refused from now on.
    pub(crate) fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether draining.
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Requests in flight.
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    /// Admits one request that starts new work (open, create, stat, list,
    /// delete) unless draining.
    pub(crate) fn enter(self: &Arc<Self>) -> Result<InFlight, Status> {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        let g = InFlight(self.clone());
        if self.draining() {
            self.metrics.drain_refusals.inc();
            let mut s = Status::unavailable(
                "the sidecar is draining for shutdown: reconnect and reopen once it is back",
            );
            s.metadata_mut().insert(
                ozone_client::DRAINING,
                tonic::metadata::MetadataValue::from_static("1"),
            );
            return Err(s);
        }
        Ok(g)
    }

    /// Admits a request on a stream already open (a read, a write, a
    /// commit): served while draining too, so that open streams finish.
    pub(crate) fn enter_open(self: &Arc<Self>) -> InFlight {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Read and write streams open (not yet closed or committed).
    pub(crate) fn open_handles(&self) -> usize {
        lock(&self.streams).len() + lock(&self.writers).len()
    }

    /// Whether a drain may end: no request in flight, and no open stream
    /// still in use (none, or no request for `idle`: a stream left open by
    /// an application that has gone, as a native sidecar sees at pod
    /// shutdown, is not waited for).
    pub(crate) fn drained(&self, idle: Duration) -> bool {
        if self.inflight() > 0 {
            return false;
        }
        let last = Duration::from_millis(self.last_request.load(Ordering::Acquire));
        self.open_handles() == 0 || self.born.elapsed().saturating_sub(last) >= idle
    }

    /// Moves the clients' read counters into the metrics.
    pub(crate) fn export_stats(&self) {
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

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Read stream `handle`, if `caller` opened it (to anyone else it does
    /// not exist).
    pub(crate) fn stream(&self, handle: u64, caller: Option<Peer>) -> Result<Arc<Stream>, Status> {
        let s = lock(&self.streams)
            .get(&handle)
            .filter(|s| s.opener == caller)
            .cloned()
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no open stream {handle}: it was closed (by its application, or by the \
                     sidecar after its connection went or it was idle) or the sidecar restarted; \
                     reopen the key"
                ))
            })?;
        s.used.store(self.now_ms(), Ordering::Relaxed);
        Ok(s)
    }

    /// Write `handle`, if `caller` opened it.
    pub(crate) fn writer(&self, handle: u64, caller: Option<Peer>) -> Result<Writer, Status> {
        let w = lock(&self.writers)
            .get(&handle)
            .filter(|w| w.opener == caller)
            .cloned()
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no open write {handle}: it was committed, its connection went, it was idle, \
                     or the sidecar restarted; write the key again"
                ))
            })?;
        w.used.store(self.now_ms(), Ordering::Relaxed);
        Ok(w.w.clone())
    }

    /// Counts and logs a connection to `socket` refused for its peer.
    pub(crate) fn refused(&self, socket: &'static str, why: &str) {
        self.metrics
            .connections_refused
            .get_or_create(&crate::metrics::SocketLabels { socket })
            .inc();
        tracing::warn!(socket, "connection refused: {why}");
    }

    /// A fresh handle: random, so no other process can guess one.
    fn new_handle(&self) -> Result<u64, Status> {
        let open = self.open_handles();
        if open >= MAX_STREAMS {
            return Err(Status::resource_exhausted(format!(
                "{open} streams are open (limit {MAX_STREAMS}): close some"
            )));
        }
        loop {
            let h: u64 = rand::random();
            if h != 0
                && !lock(&self.streams).contains_key(&h)
                && !lock(&self.writers).contains_key(&h)
            {
                return Ok(h);
            }
        }
    }

    fn own(&self, owner: Option<ConnId>, handle: u64) {
        if let Some(c) = owner {
            lock(&self.owned).entry(c).or_default().insert(handle);
        }
    }

    /// Forgets handle `h`, a read stream or a write: its gauge and its
    /// connection's set. Whether it was open.
    fn forget(&self, h: u64) -> bool {
        let stream = lock(&self.streams).remove(&h);
        let owner = if let Some(st) = stream {
            self.metrics.open_streams.dec();
            st.owner
        } else {
            let writer = lock(&self.writers).remove(&h);
            match writer {
                Some(w) => {
                    self.metrics.open_writers.dec();
                    w.owner
                }
                None => return false,
            }
        };
        if let Some(c) = owner {
            let mut g = lock(&self.owned);
            if let Some(hs) = g.get_mut(&c) {
                hs.remove(&h);
                if hs.is_empty() {
                    g.remove(&c);
                }
            }
        }
        true
    }

    /// Registers a read stream opened under `active` by connection `owner`;
    /// returns its handle.
    pub(crate) fn add_stream(
        &self,
        reader: KeyReader,
        active: Arc<Active>,
        owner: Option<ConnId>,
        opener: Option<Peer>,
    ) -> Result<u64, Status> {
        let handle = self.new_handle()?;
        lock(&self.streams).insert(
            handle,
            Arc::new(Stream {
                reader,
                _active: active,
                used: AtomicU64::new(self.now_ms()),
                owner,
                opener,
            }),
        );
        self.own(owner, handle);
        self.metrics.open_streams.inc();
        Ok(handle)
    }

    /// Forgets read stream `handle` if `caller` opened it; whether it was
    /// open.
    pub(crate) fn remove_stream(&self, handle: u64, caller: Option<Peer>) -> bool {
        self.stream(handle, caller).is_ok() && self.forget(handle)
    }

    /// Registers an open write of connection `owner` (process `opener`);
    /// returns its handle.
    pub(crate) fn add_writer(
        &self,
        w: KeyWriter,
        owner: Option<ConnId>,
        opener: Option<Peer>,
    ) -> Result<u64, Status> {
        let handle = self.new_handle()?;
        lock(&self.writers).insert(
            handle,
            Arc::new(WriterSlot {
                w: Arc::new(tokio::sync::Mutex::new(Some(w))),
                used: AtomicU64::new(self.now_ms()),
                owner,
                opener,
            }),
        );
        self.own(owner, handle);
        self.metrics.open_writers.inc();
        Ok(handle)
    }

    /// Forgets write `handle` (committed).
    pub(crate) fn remove_writer(&self, handle: u64) {
        self.forget(handle);
    }

    /// Closes handle `h` for the sidecar's own reason: a read stream is
    /// dropped, a write abandoned uncommitted (its file keeps its last
    /// hsync, for lease recovery).
    fn reap(&self, h: u64, why: Reaped) {
        if self.forget(h) {
            self.metrics
                .reaped
                .get_or_create(&crate::metrics::ReapLabels {
                    reason: why.label(),
                })
                .inc();
        }
    }

    /// Connection `c` ended: closes every stream it opened. Returns how many.
    pub(crate) fn connection_closed(&self, c: ConnId) -> usize {
        let Some(handles) = lock(&self.owned).remove(&c) else {
            return 0;
        };
        for &h in &handles {
            self.reap(h, Reaped::Connection);
        }
        if !handles.is_empty() {
            tracing::debug!(
                streams = handles.len(),
                "application connection closed: its streams closed"
            );
        }
        handles.len()
    }

    /// Closes streams unused for `idle` or longer. Returns how many.
    pub(crate) fn reap_idle(&self, idle: Duration) -> usize {
        let now = self.now_ms();
        let limit = idle.as_millis() as u64;
        let old = |used: &AtomicU64| now.saturating_sub(used.load(Ordering::Relaxed)) >= limit;
        let mut victims: Vec<u64> = lock(&self.streams)
            .iter()
            .filter(|(_, s)| old(&s.used))
            .map(|(h, _)| *h)
            .collect();
        victims.extend(
            lock(&self.writers)
                .iter()
                .filter(|(_, w)| old(&w.used))
                .map(|(h, _)| *h),
        );
        for &h in &victims {
            self.reap(h, Reaped::Idle);
        }
        victims.len()
    }
}

impl State {
    /// Reads `length` bytes (fewer at the end of the key) at `offset` of
    /// stream `handle` into `buf` (resized; reused across calls), verified
    /// when `verified` or the stream says so.
    pub(crate) async fn read_into(
        self: &Arc<Self>,
        handle: u64,
        caller: Option<Peer>,
        offset: u64,
        length: u64,
        verified: bool,
        buf: &mut Vec<u8>,
    ) -> Result<(), Status> {
        let _g = self.enter_open();
        let s = self.stream(handle, caller)?;
        let n = range(offset, length, s.reader.size())?;
        buf.resize(n, 0);
        let t = Instant::now();
        let verify = verified || s.reader.verify_checksum();
        let res = if verified {
            s.reader.verified_read_at(offset, buf).await
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
}

#[cfg(test)]
mod drain_tests {
    use super::*;
    use ozone_common::config::Conf;

    #[tokio::test]
    async fn draining_refuses_new_requests_and_counts_in_flight_ones() {
        let a = Active::build("127.0.0.1:1", None, &Conf::new()).unwrap();
        let s = State::new(a, "n1".into(), Access::default());
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
        let s = State::new(a, "n1".into(), Access::default());
        assert!(s.policy().verify_checksum);
        let off = Conf::parse("ozone.client.verify.checksum = false\n", "t").unwrap();
        s.replace(Active::build("127.0.0.1:1", None, &off).unwrap());
        let p = s.policy();
        assert!(!p.verify_checksum);
        assert_eq!(p.node_name, "n1");
        assert_eq!(s.metrics.reloads.get(), 1);
    }
}
