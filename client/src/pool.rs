//! Connections to datanodes, one channel per datanode id, shared by every
//! key and block a client touches.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use ozone_common::tls::Tls;
use ozone_proto::DatanodeDetails;
use ozone_proto::datanode_client::DatanodeClient;
use tonic::transport::{Channel, Endpoint};

use crate::error::{ClientError, Result};

/// Channels keyed by datanode id (replaced when its address changes).
pub(crate) struct Pool {
    channels: Mutex<HashMap<String, (String, Channel)>>,
    max_message_size: usize,
    tls: Option<Tls>,
}

impl Pool {
    /// An empty pool whose channels speak TLS when `tls` is set.
    pub(crate) fn new(max_message_size: usize, tls: Option<Tls>) -> Self {
        Self {
            channels: Mutex::new(HashMap::new()),
            max_message_size,
            tls,
        }
    }

    /// A gRPC client for `dn`, reusing its channel.
    pub(crate) fn get(&self, dn: &DatanodeDetails) -> Result<DatanodeClient<Channel>> {
        let mut map = self.channels.lock().expect("lock");
        let ch = match map.get(&dn.id) {
            Some((addr, ch)) if *addr == dn.address => ch.clone(),
            _ => {
                if dn.address.is_empty() {
                    return Err(ClientError::Unavailable(format!(
                        "datanode {} has no known address",
                        dn.id
                    )));
                }
                let e = Endpoint::from_shared(format!("http://{}", dn.address))
                    .map_err(|e| {
                        ClientError::InvalidArgument(format!(
                            "datanode address {}: {e}",
                            dn.address
                        ))
                    })?
                    .connect_timeout(Duration::from_secs(3))
                    .tcp_nodelay(true)
                    .initial_stream_window_size(ozone_common::grpc::STREAM_WINDOW)
                    .initial_connection_window_size(ozone_common::grpc::CONNECTION_WINDOW);
                let ch = ozone_common::tls::lazy_channel(e, self.tls.as_ref());
                map.insert(dn.id.clone(), (dn.address.clone(), ch.clone()));
                ch
            }
        };
        Ok(DatanodeClient::new(ch)
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size))
    }

    /// Number of datanodes with an open channel.
    pub(crate) fn len(&self) -> usize {
        self.channels.lock().expect("lock").len()
    }
}
