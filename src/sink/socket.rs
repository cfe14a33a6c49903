//! Listening sockets (one per sink thread, all on one port via `SO_REUSEPORT`), the
//! per-connection socket options, and the UDP sink's sockets.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::SinkError;

/// Accept queue requested from `listen`: the kernel caps it at `net.core.somaxconn`,
/// so raising that sysctl (the tuning profile does) raises the sink's queue too.
pub(crate) const LISTEN_BACKLOG: i32 = 65_535;

/// Receive buffer asked for on each UDP socket (the kernel may grant less).
pub(crate) const UDP_RCVBUF_BYTES: usize = 8 << 20;

fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<()> {
    set_int_value(fd, level, name, 1)
}

fn set_int_value(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int for the duration of the call and the length
    // passed is its size; setsockopt only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SO_LINGER {on, 0} on an ordinary descriptor: its close sends RST.
pub(crate) fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` is live for the call and the length passed is its size;
    // setsockopt only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Which of the sink's sockets [`ensure_unused`] probes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Tcp,
    Udp,
}

/// Fails with [`SinkError::PortInUse`] when another socket already holds `addr`.
///
/// The sink's listeners all set SO_REUSEPORT so its threads share one port, but the
/// kernel then lets them join any other SO_REUSEPORT socket of the same user on that
/// port just as silently: a second sink would split the traffic with the first. So
/// before binding, a probe binds `addr` without SO_REUSEPORT, which any socket already
/// there refuses (EADDRINUSE), and is closed at once. TCP's probe keeps SO_REUSEADDR,
/// as the listeners do, so connections of an earlier sink in TIME_WAIT are no
/// conflict. Port 0 needs no probe: the kernel picks a port nobody holds.
pub(crate) fn ensure_unused(addr: SocketAddr, kind: Kind) -> Result<(), SinkError> {
    if addr.port() == 0 {
        return Ok(());
    }
    let bind_err = |source: io::Error| SinkError::Bind { addr, source };
    let (ty, proto) = match kind {
        Kind::Tcp => (Type::STREAM, Protocol::TCP),
        Kind::Udp => (Type::DGRAM, Protocol::UDP),
    };
    let probe = Socket::new(Domain::for_address(addr), ty, Some(proto)).map_err(bind_err)?;
    if kind == Kind::Tcp {
        probe.set_reuse_address(true).map_err(bind_err)?;
    }
    match probe.bind(&addr.into()) {
        // Dropping the probe closes it: a bound socket that never connected or
        // listened leaves nothing behind.
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Err(SinkError::PortInUse { addr }),
        Err(source) => Err(SinkError::Bind { addr, source }),
    }
}

/// A listening socket bound to `addr` with SO_REUSEADDR and SO_REUSEPORT, so that
/// every sink ring can own its own listener on the same port and the kernel
/// spreads incoming connections across them. TCP_NODELAY is set on the listener:
/// accepted sockets inherit it (replies are small and must not wait for Nagle's
/// algorithm), which spares a setsockopt per connection — direct descriptors have
/// no fd to call it on.
pub(crate) fn reuseport_listener(addr: SocketAddr) -> Result<Socket, SinkError> {
    let bind_err = |source: io::Error| SinkError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(bind_err)?;
    socket.set_reuse_address(true).map_err(bind_err)?;
    set_int_option(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT).map_err(bind_err)?;
    // Best effort: without it replies may wait for Nagle's algorithm.
    let _ = set_int_option(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY);
    socket.bind(&addr.into()).map_err(bind_err)?;
    socket.listen(LISTEN_BACKLOG).map_err(bind_err)?;
    Ok(socket)
}

/// A UDP socket bound to `addr` with SO_REUSEPORT (so every sink thread owns one on
/// the same port and the kernel hashes each source to one of them), a receive buffer
/// of [`UDP_RCVBUF_BYTES`] if the kernel allows it (SO_RCVBUFFORCE, which needs
/// CAP_NET_ADMIN, then SO_RCVBUF, capped by net.core.rmem_max; failure is ignored),
/// SO_RXQ_OVFL (the kernel's drop count arrives with each datagram, if supported),
/// and `timeout` on receives and sends so the thread sees the stop flag.
pub(crate) fn reuseport_udp(addr: SocketAddr, timeout: Duration) -> Result<Socket, SinkError> {
    let bind_err = |source: io::Error| SinkError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(bind_err)?;
    let fd = socket.as_raw_fd();
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT).map_err(bind_err)?;
    let want = UDP_RCVBUF_BYTES as libc::c_int;
    if set_int_value(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want).is_err() {
        let _ = socket.set_recv_buffer_size(UDP_RCVBUF_BYTES);
    }
    let _ = set_int_option(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL);
    socket.set_read_timeout(Some(timeout)).map_err(bind_err)?;
    socket.set_write_timeout(Some(timeout)).map_err(bind_err)?;
    socket.bind(&addr.into()).map_err(bind_err)?;
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
