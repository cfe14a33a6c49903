//! Sockets for the generator side and the errno -> error kind mapping, done once at the
//! ring boundary.

use crate::metrics::ErrorKind;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, RawFd};

/// A TCP socket for `target`, TCP_NODELAY set; the connect itself goes through the ring.
pub fn tcp_socket(target: &SocketAddr) -> io::Result<RawFd> {
    let s = Socket::new(
        Domain::for_address(*target),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.set_tcp_nodelay(true)?;
    Ok(s.into_raw_fd())
}

pub fn sock_addr(target: &SocketAddr) -> SockAddr {
    SockAddr::from(*target)
}

/// Closes a socket whose operations may still be in the ring: shutdown first wakes any
/// pending receive, so the kernel drops its reference and the socket really closes.
pub fn close(fd: RawFd) {
    // SAFETY: plain syscalls on a descriptor this worker owns; errors are irrelevant
    // because the descriptor is being discarded.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
        libc::close(fd);
    }
}

/// The error kind of a failed connect (`-res` from the CQE).
pub fn connect_error_kind(errno: i32) -> ErrorKind {
    match errno {
        libc::ECONNREFUSED => ErrorKind::ConnectRefused,
        _ => ErrorKind::ConnectFailed,
    }
}

/// The error kind of a failed send or receive with requests in flight.
pub fn io_error_kind(errno: i32) -> ErrorKind {
    match errno {
        libc::ECONNRESET | libc::EPIPE => ErrorKind::Reset,
        _ => ErrorKind::Io,
    }
}

/// "Connection refused (os error 111)" for an errno.
pub fn errno_text(errno: i32) -> String {
    io::Error::from_raw_os_error(errno).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_maps_to_kinds() {
        assert_eq!(
            connect_error_kind(libc::ECONNREFUSED),
            ErrorKind::ConnectRefused
        );
        assert_eq!(
            connect_error_kind(libc::ETIMEDOUT),
            ErrorKind::ConnectFailed
        );
        assert_eq!(io_error_kind(libc::EPIPE), ErrorKind::Reset);
        assert_eq!(io_error_kind(libc::EIO), ErrorKind::Io);
        assert!(errno_text(libc::ECONNREFUSED).contains("refused"));
    }
}
