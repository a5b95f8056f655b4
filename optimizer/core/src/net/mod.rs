//! How the plugin and the service reach each other: the optimizer's address, TLS, token files.

pub mod endpoint;
#[cfg(feature = "tls")]
pub mod tls;
pub mod token;
