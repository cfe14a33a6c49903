//! What sits between the ring's bytes and the protocol: TLS ([`tls`], rustls). A plain
//! connection needs nothing here.

pub mod tls;
pub mod tls_record;
