//! Sockets for the generator side and the errno -> error kind mapping, done once at the
//! ring boundary.

use super::recorder::ErrorKind;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

/// Socket options applied to every generator TCP socket before it connects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SockOpts {
    /// SO_SNDBUF and SO_RCVBUF (`--sockbuf`); `None` keeps the kernel's autotuning.
    pub sockbuf: Option<usize>,
    /// TCP keepalive (idle, interval, count) (`--keepalive`).
    pub keepalive: Option<(std::time::Duration, std::time::Duration, u32)>,
    /// Close with RST instead of FIN (`--linger0`): no TIME_WAIT on the generator.
    pub linger0: bool,
    /// SO_TIMESTAMPNS: receives carry the kernel's receive time (set by a worker that
    /// times responses by it, never by a flag).
    pub rx_stamps: bool,
}

/// A TCP socket for `target`, TCP_NODELAY and `opts` set, bound to `source` (port
/// chosen by the kernel at connect time: IP_BIND_ADDRESS_NO_PORT keeps the whole
/// 4-tuple space instead of one port per source); the connect goes through the ring.
/// With `port`, the socket is bound to exactly (source, port) (with `reuse`,
/// SO_REUSEADDR, so one source port serves several destinations): connect() then skips
/// the kernel's port
/// search, which prefers even ports and scans the whole range once they are taken
/// (establishment falls to about a thousand connects a second past half the range). A
/// port that is taken falls back to the kernel's choice.
pub fn tcp_socket(
    target: &SocketAddr,
    source: Option<std::net::IpAddr>,
    port: Option<u16>,
    reuse: bool,
    opts: &SockOpts,
) -> io::Result<RawFd> {
    let s = Socket::new(
        Domain::for_address(*target),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.set_tcp_nodelay(true)?;
    if let Some(n) = opts.sockbuf {
        s.set_send_buffer_size(n)?;
        s.set_recv_buffer_size(n)?;
    }
    if let Some((idle, interval, count)) = opts.keepalive {
        let ka = socket2::TcpKeepalive::new()
            .with_time(idle)
            .with_interval(interval)
            .with_retries(count);
        s.set_tcp_keepalive(&ka)?;
    }
    if opts.linger0 {
        s.set_linger(Some(std::time::Duration::ZERO))?;
    }
    if opts.rx_stamps {
        set_int(&s, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS)?;
    }
    if let (Some(ip), Some(port)) = (source, port) {
        if reuse {
            s.set_reuse_address(true)?;
        }
        match s.bind(&SockAddr::from(SocketAddr::new(ip, port))) {
            Ok(()) => return Ok(s.into_raw_fd()),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                if reuse {
                    s.set_reuse_address(false)?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(ip) = source {
        if ip.is_ipv4() {
            set_int(&s, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT)?;
        }
        s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    }
    Ok(s.into_raw_fd())
}

/// Sets the integer option `name` at `level` to 1 (options socket2 does not name).
fn set_int(s: &Socket, level: libc::c_int, name: libc::c_int) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

/// Closes a descriptor at once (one already registered in the ring's file table: the
/// ring keeps the socket alive, the process's descriptor table does not hold it).
pub fn close_descriptor(fd: RawFd) {
    // SAFETY: closing a descriptor this worker owns and no longer uses.
    unsafe { libc::close(fd) };
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

/// Whether a failed socket operation only has to be issued again: interrupted by a
/// signal, or nothing to do yet.
pub fn is_transient(errno: i32) -> bool {
    matches!(errno, libc::EINTR | libc::EAGAIN)
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
        assert!(is_transient(libc::EINTR) && is_transient(libc::EAGAIN));
        assert!(!is_transient(libc::ECONNRESET) && !is_transient(libc::ENOBUFS));
    }
}
