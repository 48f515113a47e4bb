//! gRPC channels to datanodes by address, shared by the OM's background
//! services (deletion, replication): one lazily connected channel each.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use ozone_common::tls::Tls;
use ozone_proto::datanode_client::DatanodeClient;
use tonic::transport::{Channel, Endpoint};

/// Channels to datanodes, keyed by gRPC address.
#[derive(Default)]
pub(crate) struct DatanodeChannels {
    map: Mutex<HashMap<String, Channel>>,
    tls: Option<Tls>,
}

impl DatanodeChannels {
    /// No channels yet; they speak TLS when `tls` is set.
    pub(crate) fn new(tls: Option<Tls>) -> Self {
        Self {
            map: Mutex::default(),
            tls,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client of the datanode at `address` (`None` for an address that
    /// is no URI). Calls carry no deadline: callers bound them.
    pub(crate) fn client(&self, address: &str) -> Option<DatanodeClient<Channel>> {
        let mut map = self.lock();
        let ch = match map.get(address) {
            Some(c) => c.clone(),
            None => {
                let e = Endpoint::from_shared(format!("http://{address}"))
                    .ok()?
                    .connect_timeout(Duration::from_secs(3));
                let c = ozone_common::tls::lazy_channel(e, self.tls.as_ref());
                map.insert(address.to_string(), c.clone());
                c
            }
        };
        Some(DatanodeClient::new(ch))
    }

    /// Drops the channel to `address` (after a failed call).
    pub(crate) fn forget(&self, address: &str) {
        self.lock().remove(address);
    }
}
