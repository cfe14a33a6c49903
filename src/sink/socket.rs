//! Listening sockets (one per sink thread, all on one port via `SO_REUSEPORT`) and the
//! per-connection socket options.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

use super::SinkError;

/// Deep enough that a burst of connects during start-up is never refused.
pub(crate) const LISTEN_BACKLOG: i32 = 4096;

fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `one` is a live c_int for the duration of the call and the length passed
    // is its size; setsockopt only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets TCP_NODELAY on an accepted connection: replies are small and must not wait
/// for Nagle's algorithm.
pub(crate) fn set_nodelay(fd: RawFd) -> io::Result<()> {
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY)
}

/// A listening socket bound to `addr` with SO_REUSEADDR and SO_REUSEPORT, so that
/// every sink thread can own its own listener on the same port and the kernel
/// spreads incoming connections across them.
pub(crate) fn reuseport_listener(addr: SocketAddr) -> Result<Socket, SinkError> {
    let bind_err = |source: io::Error| SinkError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(bind_err)?;
    socket.set_reuse_address(true).map_err(bind_err)?;
    set_int_option(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT).map_err(bind_err)?;
    socket.bind(&addr.into()).map_err(bind_err)?;
    socket.listen(LISTEN_BACKLOG).map_err(bind_err)?;
    Ok(socket)
}

/// The address the kernel actually bound (resolves port 0).
pub(crate) fn bound_addr(socket: &Socket, requested: SocketAddr) -> Result<SocketAddr, SinkError> {
    socket
        .local_addr()
        .and_then(|a| {
            a.as_socket()
                .ok_or_else(|| io::Error::other("listener has a non-IP local address"))
        })
        .map_err(|source| SinkError::Bind {
            addr: requested,
            source,
        })
}
