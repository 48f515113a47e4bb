//! Library side of the `ozone` command: the local cluster of OM and
//! datanode processes, and test data helpers.

pub mod data;
pub mod local;
