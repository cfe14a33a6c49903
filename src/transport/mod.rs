//! What sits between the ring's bytes and the protocol: TLS ([`tls`], rustls): the
//! client configuration, one session type over the caller's buffers ([`tls_session`])
//! and its record layer ([`tls_record`]). A plain connection needs nothing here.

pub mod tls;
pub mod tls_record;
pub mod tls_session;
