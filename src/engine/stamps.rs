//! Kernel receive timestamps: each response is timed by when the kernel received it
//! (`SO_TIMESTAMPNS` on the socket, read from the control data of a multishot
//! `recvmsg`), not by when the worker reaped it. The worker may then sleep through a
//! resolution window and reap a window's responses in one wake-up without timing any
//! of them late (issue 22: one wake-up per response was the CPU floor at 20,000/s).
//!
//! Two ways in: the TCP worker's multishot `recvmsg` into provided buffers ([`received`]),
//! and the frames worker's single-shot `recvmsg` into each connection's own region
//! ([`RecvMsgs`]).
//!
//! Layout of a provided buffer filled by a multishot `recvmsg` (io_uring ABI): a
//! 16-byte `io_uring_recvmsg_out` header, the name field (`msg_namelen` bytes, 0 here),
//! the control field (`msg_controllen` bytes), then the payload.

use super::iobuf::IoBuf;
use crate::clock::{Clock, Ticks};

/// The io_uring feature a worker reports when every response it timed carried the
/// kernel's receive timestamp.
pub const FEATURE: &str = "receive_timestamps";
/// Room for the control data: one `SCM_TIMESTAMPNS` message (16-byte header and a
/// 16-byte timespec), and as much again should the kernel add one.
pub const CONTROL_BYTES: usize = 64;
/// The `io_uring_recvmsg_out` header before the name and control fields.
const OUT_HEADER_BYTES: usize = 16;
/// Where the payload starts in a provided buffer.
pub const PAYLOAD_OFFSET: usize = OUT_HEADER_BYTES + CONTROL_BYTES;
/// A `cmsghdr` on a 64-bit target: length (8), level (4), type (4).
const CMSG_HEADER_BYTES: usize = 16;

/// What one completed multishot `recvmsg` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Payload bytes, after [`PAYLOAD_OFFSET`] (0: the peer closed the stream).
    pub len: usize,
    /// When the kernel received them, ns since the Unix epoch (None: no timestamp).
    pub unix_ns: Option<u64>,
}

/// Reads the buffer of a completed multishot `recvmsg` whose completion said `res`
/// bytes (header, name, control and payload). None when it is shorter than the
/// header and control fields (not a `recvmsg` buffer).
pub fn received(buf: &[u8], res: usize) -> Option<Received> {
    let buf = &buf[..res.min(buf.len())];
    if buf.len() < PAYLOAD_OFFSET {
        return None;
    }
    let word = |i: usize| u32::from_ne_bytes(buf[i..i + 4].try_into().expect("4 bytes")) as usize;
    let (controllen, payloadlen) = (word(4), word(8));
    let control = &buf[OUT_HEADER_BYTES..OUT_HEADER_BYTES + controllen.min(CONTROL_BYTES)];
    Some(Received {
        len: payloadlen.min(buf.len() - PAYLOAD_OFFSET),
        unix_ns: stamp_ns(control),
    })
}

/// The `SCM_TIMESTAMPNS` timestamp among the control messages `control`, ns since the
/// Unix epoch.
pub fn stamp_ns(mut control: &[u8]) -> Option<u64> {
    if std::mem::size_of::<libc::timespec>() != 16 || std::mem::size_of::<usize>() != 8 {
        return None; // 32-bit layouts: no timestamps, every response timed when reaped
    }
    while control.len() >= CMSG_HEADER_BYTES {
        let len = u64::from_ne_bytes(control[..8].try_into().expect("8 bytes")) as usize;
        let level = i32::from_ne_bytes(control[8..12].try_into().expect("4 bytes"));
        let kind = i32::from_ne_bytes(control[12..16].try_into().expect("4 bytes"));
        if len < CMSG_HEADER_BYTES || len > control.len() {
            return None;
        }
        if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS && len >= 32 {
            let sec = i64::from_ne_bytes(control[16..24].try_into().expect("8 bytes"));
            let nsec = i64::from_ne_bytes(control[24..32].try_into().expect("8 bytes"));
            if sec <= 0 || !(0..1_000_000_000).contains(&nsec) {
                return None;
            }
            return Some(sec as u64 * 1_000_000_000 + nsec as u64);
        }
        let next = len.next_multiple_of(8);
        control = control.get(next..)?;
    }
    None
}

/// The instant on the worker's clock when the kernel received bytes stamped
/// `stamp_unix_ns`, from one reading of both clocks at the reap (`now_t`,
/// `now_unix_ns`): only the age (a window at most) is converted, so the two clocks'
/// drift does not add up over a run. A stamp from the future (the wall clock stepped)
/// is `now_t`; the caller bounds it below by the request's send.
pub fn arrival(clock: &Clock, now_t: Ticks, now_unix_ns: u64, stamp_unix_ns: u64) -> Ticks {
    clock.ticks_before(now_t, now_unix_ns.saturating_sub(stamp_unix_ns))
}

/// The `msghdr` a multishot `recvmsg` is armed with: no name, [`CONTROL_BYTES`] of
/// control, no iovec (the payload goes into a provided buffer). The kernel reads only
/// the two lengths, when the receive is submitted.
pub fn msghdr() -> Box<libc::msghdr> {
    // SAFETY: msghdr is plain data (pointers, lengths, flags); all zero is a valid
    // value (null pointers, zero lengths).
    let mut h: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
    h.msg_controllen = CONTROL_BYTES as _;
    h
}

/// Control field per connection for a single-shot `recvmsg`: one `SCM_TIMESTAMPNS`
/// message, exactly.
const CONN_CONTROL_BYTES: usize = 32;

/// One single-shot `recvmsg` header per connection, each with its iovec and control
/// field (104 bytes a connection), for receives into the connection's own region. A
/// connection's header is rewritten only by [`RecvMsgs::arm`], while it has no receive
/// in the kernel.
pub struct RecvMsgs {
    hdrs: Box<[libc::msghdr]>,
    iovs: Box<[libc::iovec]>,
    control: IoBuf,
}

impl RecvMsgs {
    pub fn new(n: usize) -> RecvMsgs {
        // SAFETY: msghdr and iovec are plain data; all zero is a valid value of each
        // (null pointers, zero lengths).
        let (hdr, iov) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        RecvMsgs {
            hdrs: vec![hdr; n].into_boxed_slice(),
            iovs: vec![iov; n].into_boxed_slice(),
            control: IoBuf::zeroed(n * CONN_CONTROL_BYTES),
        }
    }

    /// Points connection `c`'s header at `len` bytes at `buf` and clears its control
    /// field (a receive without a stamp must not read the last one); returns the
    /// header for a `RecvMsg`. Call only while `c` has no receive in the kernel.
    pub fn arm(&mut self, c: usize, buf: *mut u8, len: usize) -> *mut libc::msghdr {
        let field = c * CONN_CONTROL_BYTES..(c + 1) * CONN_CONTROL_BYTES;
        self.control.region_mut(field.clone()).fill(0);
        self.iovs[c] = libc::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let h = &mut self.hdrs[c];
        h.msg_iov = &mut self.iovs[c];
        h.msg_iovlen = 1;
        h.msg_control = self.control.kernel_ptr(field).cast();
        h.msg_controllen = CONN_CONTROL_BYTES as _;
        h.msg_flags = 0;
        h
    }

    /// The timestamp of connection `c`'s completed receive, ns since the Unix epoch.
    pub fn stamp_ns(&self, c: usize) -> Option<u64> {
        stamp_ns(
            self.control
                .region(c * CONN_CONTROL_BYTES..(c + 1) * CONN_CONTROL_BYTES),
        )
    }

    /// The worker ends with receives still in the kernel: their headers, iovecs and
    /// control fields stay allocated.
    pub fn leak(&mut self) {
        std::mem::forget(std::mem::take(&mut self.hdrs));
        std::mem::forget(std::mem::take(&mut self.iovs));
        self.control.leak();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let mut v = ((CMSG_HEADER_BYTES + data.len()) as u64)
            .to_ne_bytes()
            .to_vec();
        v.extend(level.to_ne_bytes());
        v.extend(kind.to_ne_bytes());
        v.extend(data);
        v.resize(v.len().next_multiple_of(8), 0);
        v
    }

    fn timespec(sec: i64, nsec: i64) -> Vec<u8> {
        [sec.to_ne_bytes(), nsec.to_ne_bytes()].concat()
    }

    /// A provided buffer as the kernel fills it: header, control field, payload.
    fn buffer(control: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(0u32.to_ne_bytes()); // namelen
        b.extend((control.len() as u32).to_ne_bytes());
        b.extend((payload.len() as u32).to_ne_bytes());
        b.extend(0u32.to_ne_bytes()); // flags
        let mut field = control.to_vec();
        field.resize(CONTROL_BYTES, 0xAA); // the rest of the field: whatever was there
        b.extend(field);
        b.extend(payload);
        b
    }

    #[test]
    fn the_stamp_and_the_payload_come_out_of_a_recvmsg_buffer() {
        let control = cmsg(
            libc::SOL_SOCKET,
            libc::SCM_TIMESTAMPNS,
            &timespec(1_700_000_000, 5),
        );
        let b = buffer(&control, b"HTTP/1.1 200 OK\r\n");
        let r = received(&b, b.len()).unwrap();
        assert_eq!(r.len, 17);
        assert_eq!(
            &b[PAYLOAD_OFFSET..PAYLOAD_OFFSET + r.len],
            b"HTTP/1.1 200 OK\r\n"
        );
        assert_eq!(r.unix_ns, Some(1_700_000_000_000_000_005));
    }

    #[test]
    fn an_end_of_stream_is_an_empty_payload_and_a_short_buffer_is_none() {
        let b = buffer(&[], b"");
        assert_eq!(
            received(&b, b.len()),
            Some(Received {
                len: 0,
                unix_ns: None
            })
        );
        assert_eq!(received(&b, PAYLOAD_OFFSET - 1), None);
    }

    #[test]
    fn the_stamp_is_found_after_another_message_and_nothing_else_passes_for_one() {
        let other = cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[1, 2, 3, 4]);
        let ts = cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &timespec(2, 7));
        assert_eq!(stamp_ns(&[other.clone(), ts].concat()), Some(2_000_000_007));
        assert_eq!(stamp_ns(&other), None);
        let wrong_level = cmsg(libc::IPPROTO_IP, libc::SCM_TIMESTAMPNS, &timespec(2, 7));
        assert_eq!(stamp_ns(&wrong_level), None);
        let bad_nsec = cmsg(
            libc::SOL_SOCKET,
            libc::SCM_TIMESTAMPNS,
            &timespec(2, 1_000_000_000),
        );
        assert_eq!(stamp_ns(&bad_nsec), None);
        // A length past the data, or shorter than a header: no stamp, no panic.
        let mut broken = cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &timespec(2, 7));
        broken[..8].copy_from_slice(&999u64.to_ne_bytes());
        assert_eq!(stamp_ns(&broken), None);
        broken[..8].copy_from_slice(&3u64.to_ne_bytes());
        assert_eq!(stamp_ns(&broken), None);
    }

    #[test]
    fn a_controllen_past_the_field_reads_only_the_field() {
        let mut b = buffer(&[], b"xy");
        b[4..8].copy_from_slice(&9999u32.to_ne_bytes());
        assert_eq!(received(&b, b.len()).unwrap().len, 2);
    }

    #[test]
    fn a_connections_header_points_at_its_region_and_reads_only_its_own_stamp() {
        let mut rx = RecvMsgs::new(3);
        let mut region = [0u8; 100];
        let h = rx.arm(1, region.as_mut_ptr(), 100);
        // SAFETY: `h` points into `rx.hdrs`, alive and not written meanwhile.
        let (iov, control, controllen) =
            unsafe { (*(*h).msg_iov, (*h).msg_control, (*h).msg_controllen) };
        assert_eq!(
            (iov.iov_base as *mut u8, iov.iov_len),
            (region.as_mut_ptr(), 100)
        );
        assert_eq!(controllen as u64, CONN_CONTROL_BYTES as u64);
        // The kernel's stamp, written where the header says.
        let ts = cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &timespec(3, 9));
        let at = rx
            .control
            .kernel_ptr(CONN_CONTROL_BYTES..2 * CONN_CONTROL_BYTES);
        assert_eq!(control as *mut u8, at);
        rx.control
            .region_mut(CONN_CONTROL_BYTES..2 * CONN_CONTROL_BYTES)
            .copy_from_slice(&ts);
        assert_eq!(rx.stamp_ns(1), Some(3_000_000_009));
        assert_eq!(rx.stamp_ns(0), None);
        // Armed again, the old stamp is gone.
        rx.arm(1, region.as_mut_ptr(), 100);
        assert_eq!(rx.stamp_ns(1), None);
    }

    #[test]
    fn the_arrival_is_the_reap_less_the_stamps_age_and_never_later_than_the_reap() {
        let (clock, mock) = Clock::mock();
        mock.increment(10_000_000);
        let now_t = clock.ticks();
        let at = arrival(&clock, now_t, 5_000_300_000, 5_000_000_000);
        assert_eq!(clock.between_ns(at, now_t), 300_000);
        assert_eq!(arrival(&clock, now_t, 5_000_000_000, 5_000_300_000), now_t);
    }
}
