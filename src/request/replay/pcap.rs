//! A pcap or pcapng capture of a TCP or a UDP conversation as a recording.
//!
//! TCP: the bytes the client sent the server, one request per run of client segments
//! (consecutive segments of one connection before anything else of it is seen are one
//! request, so a request split over several segments is sent whole), at the instant of
//! its first segment relative to the first request's. The server is the endpoint on
//! `--replay-port` when given; else the destination of the first SYN, or of the first
//! segment carrying data when the capture started after the handshake. Several client
//! connections to the server merge into one timetable; other conversations in the
//! capture are ignored. A segment that repeats bytes of the request being assembled (a
//! retransmission) is dropped.
//!
//! UDP: each datagram to the server is one request, at its capture instant relative to
//! the first's. The server is the endpoint on `--replay-port` when given, else the
//! destination of the capture's first datagram; datagrams from any client to it merge
//! into one timetable, the rest is ignored. A fragment of a UDP datagram to the server
//! is refused: blaster does not reassemble IP fragments, and a request must not
//! silently vanish (a fragmented reply is skipped like any reply).
//!
//! Link types: Ethernet (what `tshark -i lo` writes), Linux cooked (v1 and v2, `-i
//! any`), raw IP, and BSD loopback.

use super::{Carrier, Recording, ReplayError};
use crate::clock::Nanos;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{Block, Linktype, PcapBlockOwned, PcapError};
use std::net::IpAddr;

type Endpoint = (IpAddr, u16);

/// The request being assembled: its connection (the client's endpoint), the capture
/// instant of its first segment, the next sequence number expected, its bytes.
struct Pending {
    client: Endpoint,
    ts_ns: u64,
    next_seq: u32,
    bytes: Vec<u8>,
}

/// What the capture said so far, apart from the reader (which lends its blocks).
struct State {
    carrier: Carrier,
    port: Option<u16>,
    server: Option<Endpoint>,
    /// Per pcapng interface: its link type and time units per second.
    interfaces: Vec<(Linktype, u64)>,
    /// Legacy pcap: the link type and units per second.
    legacy: (Linktype, u64),
    pending: Option<Pending>,
    /// A finished request, waiting to be handed out.
    ready: Option<(u64, Vec<u8>)>,
    first_ts: Option<u64>,
    last_ns: Nanos,
    packets: u64,
    /// Packets of the other carrier (UDP in a TCP replay, TCP in a UDP one): named
    /// when the capture holds no request of the replay's own.
    other_seen: u64,
    longest_max: usize,
    /// The last [`SKIPPED_FRAGMENTED_MAX`] datagrams (source, destination, the IPv4
    /// identification or the IPv6 fragment header's) whose first fragment went
    /// elsewhere than the server: their later fragments are skipped too.
    skipped_fragmented: std::collections::VecDeque<(IpAddr, IpAddr, u32)>,
}

/// Fragmented datagrams to others (replies) remembered at once.
const SKIPPED_FRAGMENTED_MAX: usize = 64;

pub struct PcapRecording {
    reader: Box<dyn PcapReaderIterator + Send>,
    state: State,
    done: bool,
}

impl PcapRecording {
    /// A capture read from `input`; `port` names the server's port (`--replay-port`).
    pub fn new(
        input: impl std::io::Read + Send + 'static,
        carrier: Carrier,
        port: Option<u16>,
    ) -> Result<PcapRecording, ReplayError> {
        let reader = pcap_parser::create_reader(1 << 20, input).map_err(|e| ReplayError {
            line: 0,
            what: "packet",
            message: format!("not a pcap or pcapng capture ({e:?})"),
        })?;
        Ok(PcapRecording {
            reader,
            state: State {
                carrier,
                port,
                server: None,
                interfaces: Vec::new(),
                legacy: (Linktype::ETHERNET, 1_000_000),
                pending: None,
                ready: None,
                first_ts: None,
                last_ns: 0,
                packets: 0,
                skipped_fragmented: std::collections::VecDeque::new(),
                other_seen: 0,
                longest_max: super::text::LINE_BYTES_MAX,
            },
            done: false,
        })
    }
}

impl State {
    fn error(&self, message: String) -> ReplayError {
        ReplayError {
            line: self.packets,
            what: "packet",
            message,
        }
    }

    fn block(&mut self, block: PcapBlockOwned<'_>) -> Result<(), ReplayError> {
        match block {
            PcapBlockOwned::LegacyHeader(h) => {
                let units = if h.is_nanosecond_precision() {
                    1_000_000_000
                } else {
                    1_000_000
                };
                self.legacy = (h.network, units);
            }
            PcapBlockOwned::Legacy(b) => {
                self.packets += 1;
                let (lt, units) = self.legacy;
                let ts = u64::from(b.ts_sec) * 1_000_000_000
                    + u64::from(b.ts_usec) * (1_000_000_000 / units);
                self.packet(lt, ts, b.data)?;
            }
            PcapBlockOwned::NG(Block::SectionHeader(_)) => self.interfaces.clear(),
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                let units = idb.ts_resolution().unwrap_or(1_000_000).max(1);
                self.interfaces.push((idb.linktype, units));
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                self.packets += 1;
                let Some(&(lt, units)) = self.interfaces.get(epb.if_id as usize) else {
                    return Err(self.error(format!("interface {} was never described", epb.if_id)));
                };
                let raw = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                let ts = (u128::from(raw) * 1_000_000_000 / u128::from(units)) as u64;
                let len = (epb.caplen as usize).min(epb.data.len());
                self.packet(lt, ts, &epb.data[..len])?;
            }
            PcapBlockOwned::NG(_) => {}
        }
        Ok(())
    }

    /// One captured packet: the TCP segment it carries, if any.
    fn packet(&mut self, lt: Linktype, ts_ns: u64, data: &[u8]) -> Result<(), ReplayError> {
        let sliced = match lt {
            Linktype::ETHERNET => SlicedPacket::from_ethernet(data),
            Linktype::LINUX_SLL => SlicedPacket::from_ip(data.get(16..).unwrap_or(&[])),
            Linktype::LINUX_SLL2 => SlicedPacket::from_ip(data.get(20..).unwrap_or(&[])),
            Linktype::NULL | Linktype::LOOP => SlicedPacket::from_ip(data.get(4..).unwrap_or(&[])),
            Linktype::RAW | Linktype::IPV4 | Linktype::IPV6 => SlicedPacket::from_ip(data),
            other => {
                return Err(self.error(format!(
                    "link type {} is not one blaster reads (Ethernet, Linux cooked, raw IP, loopback)",
                    other.0
                )));
            }
        };
        // A packet that is not IP (ARP, a truncated frame) carries no request.
        let Ok(p) = sliced else { return Ok(()) };
        let (src, dst) = match &p.net {
            Some(NetSlice::Ipv4(v)) => (
                IpAddr::V4(v.header().source_addr()),
                IpAddr::V4(v.header().destination_addr()),
            ),
            Some(NetSlice::Ipv6(v)) => (
                IpAddr::V6(v.header().source_addr()),
                IpAddr::V6(v.header().destination_addr()),
            ),
            _ => return Ok(()),
        };
        let t = match (&p.transport, self.carrier) {
            (Some(TransportSlice::Tcp(t)), Carrier::Tcp) => t,
            (Some(TransportSlice::Udp(u)), Carrier::Udp) => {
                return self.datagram(
                    (src, u.source_port()),
                    (dst, u.destination_port()),
                    ts_ns,
                    u.payload(),
                );
            }
            (Some(TransportSlice::Tcp(_) | TransportSlice::Udp(_)), _) => {
                self.other_seen += 1;
                return Ok(());
            }
            (None, Carrier::Udp)
                if p.is_ip_payload_fragmented()
                    && p.net
                        .as_ref()
                        .and_then(NetSlice::ip_payload_ref)
                        .is_some_and(|ip| ip.ip_number == etherparse::IpNumber::UDP) =>
            {
                let net = p.net.as_ref().expect("checked above");
                if self.fragment_may_be_a_request(net, src, dst) {
                    return Err(self.error(
                        "a fragment of a UDP datagram to the server: blaster does not \
                         reassemble IP fragments"
                            .into(),
                    ));
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        let from = (src, t.source_port());
        let to = (dst, t.destination_port());
        let payload = t.payload();
        if self.server.is_none() {
            self.server = match self.port {
                Some(port) if to.1 == port => Some(to),
                Some(port) if from.1 == port => Some(from),
                Some(_) => None,
                None if (t.syn() && !t.ack()) || !payload.is_empty() => Some(to),
                None => None,
            };
        }
        let Some(server) = self.server else {
            return Ok(());
        };
        if payload.is_empty() {
            return Ok(());
        }
        if to == server {
            self.client_segment(from, ts_ns, t.sequence_number(), payload)
        } else {
            if from == server && self.pending.as_ref().is_some_and(|p| p.client == to) {
                self.finish();
            }
            Ok(())
        }
    }

    fn client_segment(
        &mut self,
        client: Endpoint,
        ts_ns: u64,
        seq: u32,
        payload: &[u8],
    ) -> Result<(), ReplayError> {
        let end = seq.wrapping_add(payload.len() as u32);
        if let Some(p) = self.pending.as_mut().filter(|p| p.client == client) {
            // Sequence arithmetic modulo 2^32: what ends at or before the next byte
            // expected was seen already.
            let ahead = end.wrapping_sub(p.next_seq) as i32;
            if ahead <= 0 {
                return Ok(());
            }
            let skip = payload.len().saturating_sub(ahead as usize);
            p.bytes.extend_from_slice(&payload[skip..]);
            p.next_seq = end;
            if p.bytes.len() > self.longest_max {
                return Err(
                    self.error(format!("a request of more than {} bytes", self.longest_max))
                );
            }
            return Ok(());
        }
        self.finish();
        self.pending = Some(Pending {
            client,
            ts_ns,
            next_seq: end,
            bytes: payload.to_vec(),
        });
        Ok(())
    }

    /// Whether a fragment of a UDP datagram (`net`, from `src` to `dst`) may belong to
    /// a request: its first fragment carries the ports, judged as a whole datagram
    /// would be; a later one belongs to a request unless its first fragment went
    /// elsewhere (same addresses and identification, IPv4 or IPv6) or it goes to
    /// another address than the server's.
    fn fragment_may_be_a_request(&mut self, net: &NetSlice, src: IpAddr, dst: IpAddr) -> bool {
        let server_ip = self.server.map(|(ip, _)| ip);
        let Some((identification, offset, payload)) = fragment_of(net) else {
            return server_ip.is_none_or(|ip| ip == dst);
        };
        let key = (src, dst, identification);
        if offset == 0 && payload.len() >= 4 {
            let to = (dst, u16::from_be_bytes([payload[2], payload[3]]));
            let request = match (self.server, self.port) {
                (Some(server), _) => server == to,
                (None, Some(port)) => to.1 == port,
                (None, None) => true,
            };
            if !request {
                if self.skipped_fragmented.len() == SKIPPED_FRAGMENTED_MAX {
                    self.skipped_fragmented.pop_front();
                }
                self.skipped_fragmented.push_back(key);
            }
            return request;
        }
        !self.skipped_fragmented.contains(&key) && server_ip.is_none_or(|ip| ip == dst)
    }

    /// A UDP datagram from `from` to `to`: a request when `to` is the server.
    fn datagram(
        &mut self,
        from: Endpoint,
        to: Endpoint,
        ts_ns: u64,
        payload: &[u8],
    ) -> Result<(), ReplayError> {
        if self.server.is_none() {
            self.server = match self.port {
                Some(port) if to.1 == port => Some(to),
                Some(port) if from.1 == port => Some(from),
                Some(_) => None,
                None => Some(to),
            };
        }
        if self.server != Some(to) {
            return Ok(());
        }
        if payload.len() > self.longest_max {
            return Err(self.error(format!("a request of more than {} bytes", self.longest_max)));
        }
        self.emit(ts_ns, payload.to_vec());
        Ok(())
    }

    /// The request being assembled is complete: it becomes the ready one.
    fn finish(&mut self) {
        if let Some(p) = self.pending.take() {
            self.emit(p.ts_ns, p.bytes);
        }
    }

    /// A whole request, captured at `ts_ns`, becomes the ready one.
    fn emit(&mut self, ts_ns: u64, bytes: Vec<u8>) {
        let first = *self.first_ts.get_or_insert(ts_ns);
        // Captures from several queues may step back a little: never before the
        // previous request.
        let at = ts_ns.saturating_sub(first).max(self.last_ns);
        self.last_ns = at;
        debug_assert!(self.ready.is_none(), "one request handed out at a time");
        self.ready = Some((at, bytes));
    }
}

impl Recording for PcapRecording {
    fn position(&self) -> (&'static str, u64) {
        ("packet", self.state.packets)
    }

    fn next(&mut self, out: &mut Vec<u8>) -> Result<Option<Nanos>, ReplayError> {
        loop {
            if let Some((at, bytes)) = self.state.ready.take() {
                out.extend_from_slice(&bytes);
                return Ok(Some(at));
            }
            if self.done {
                return Ok(None);
            }
            match self.reader.next() {
                Ok((offset, block)) => {
                    let r = self.state.block(block);
                    self.reader.consume(offset);
                    r?;
                }
                Err(PcapError::Eof) => {
                    self.done = true;
                    self.state.finish();
                    if self.state.first_ts.is_none() && self.state.other_seen > 0 {
                        let message = match self.state.carrier {
                            Carrier::Tcp => {
                                "the capture holds UDP datagrams and no TCP request: \
                                 replay it with --proto udp"
                            }
                            Carrier::Udp => {
                                "the capture holds TCP segments and no UDP datagram: \
                                 replay it without --proto udp"
                            }
                        };
                        return Err(ReplayError {
                            line: 0,
                            what: "packet",
                            message: message.into(),
                        });
                    }
                }
                Err(PcapError::Incomplete(_)) => {
                    if let Err(e) = self.reader.refill() {
                        return Err(self.state.error(format!("cannot read the capture: {e:?}")));
                    }
                }
                Err(PcapError::UnexpectedEof) => {
                    return Err(self
                        .state
                        .error("the capture ends inside a packet: it is truncated".into()));
                }
                Err(e) => {
                    return Err(self
                        .state
                        .error(format!("not a valid capture block ({e:?})")));
                }
            }
        }
    }
}

/// A fragment's datagram identification, its offset (in 8-byte units) and its bytes
/// after the IP headers: IPv4's header fields, or IPv6's fragment header.
fn fragment_of<'a>(net: &NetSlice<'a>) -> Option<(u32, u16, &'a [u8])> {
    match net {
        NetSlice::Ipv4(v4) => {
            let h = v4.header();
            let offset = h.fragments_offset().value();
            Some((u32::from(h.identification()), offset, v4.payload().payload))
        }
        NetSlice::Ipv6(v6) => v6.extensions().clone().into_iter().find_map(|e| match e {
            etherparse::Ipv6ExtensionSlice::Fragment(f) => Some((
                f.identification(),
                f.fragment_offset().value(),
                v6.payload().payload,
            )),
            _ => None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::summarize;
    use super::*;

    /// A legacy pcap (Ethernet, µs) of `packets`: (instant in µs, frame bytes).
    fn pcap(packets: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut out = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&65535u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        for (us, frame) in packets {
            out.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
            out.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
            out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            out.extend_from_slice(frame);
        }
        out
    }

    fn udp(from: u16, to: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([127, 0, 0, 1], [127, 0, 0, 1], 64)
            .udp(from, to)
            .write(&mut f, payload)
            .unwrap();
        f
    }

    fn read(bytes: Vec<u8>, carrier: Carrier, port: Option<u16>) -> Vec<(Nanos, Vec<u8>)> {
        let mut r = PcapRecording::new(std::io::Cursor::new(bytes), carrier, port).unwrap();
        let mut got = Vec::new();
        loop {
            let mut out = Vec::new();
            match r.next(&mut out).unwrap() {
                Some(at) => got.push((at, out)),
                None => return got,
            }
        }
    }

    /// The one-line error that reading `cap` over `carrier` ends with.
    fn refusal(cap: Vec<u8>, carrier: Carrier) -> String {
        let mut r = PcapRecording::new(std::io::Cursor::new(cap), carrier, None).unwrap();
        summarize(&mut r, 1 << 20).unwrap_err().to_string()
    }

    /// Each datagram to the server is a request at its instant less the first's;
    /// the server's answers and other conversations are not requests.
    #[test]
    fn udp_datagrams_to_the_server_are_the_requests() {
        let cap = pcap(&[
            (1_000_000, udp(5000, 53, b"a")),
            (1_000_100, udp(53, 5000, b"a")),
            (1_010_000, udp(5000, 53, b"bb")),
            (1_015_000, udp(7000, 8000, b"other")),
            (1_020_000, udp(6000, 53, b"")),
        ]);
        let got = read(cap.clone(), Carrier::Udp, None);
        assert_eq!(
            got,
            vec![
                (0, b"a".to_vec()),
                (10_000_000, b"bb".to_vec()),
                (20_000_000, Vec::new())
            ]
        );
        // `--replay-port` names the server, even when its answer comes first.
        let cap = pcap(&[
            (1_000_000, udp(53, 5000, b"x")),
            (1_000_500, udp(5000, 53, b"q")),
        ]);
        assert_eq!(read(cap, Carrier::Udp, Some(53)), vec![(0, b"q".to_vec())]);
    }

    /// The server's fragmented reply (first fragment with the ports, then a later
    /// one of the same datagram) is no request: skipped, where a fragment of a request
    /// is refused (below); a later fragment never seen begun to the server's address
    /// is refused too.
    #[test]
    fn a_fragmented_reply_is_skipped() {
        let mut first = udp(53, 5000, b"reply-part-one");
        first[14 + 6] |= 0x20; // IPv4 "more fragments", offset 0
        let mut later = udp(53, 5000, b"reply-part-two");
        later[14 + 7] = 2; // offset 16 bytes, the last fragment
        let cap = pcap(&[
            (1, udp(5000, 53, b"a")),
            (2, first),
            (3, later.clone()),
            (4, udp(5000, 53, b"b")),
        ]);
        let got = read(cap, Carrier::Udp, Some(53));
        assert_eq!(got, vec![(0, b"a".to_vec()), (3_000, b"b".to_vec())]);
        let cap = pcap(&[(1, udp(5000, 53, b"a")), (2, later)]);
        let e = refusal(cap, Carrier::Udp);
        assert!(e.starts_with("packet 2: a fragment"), "{e}");
    }

    const LOCALHOST6: [u8; 16] = std::net::Ipv6Addr::LOCALHOST.octets();

    /// An Ethernet frame with an IPv6 fragment of a UDP datagram between two ports of
    /// ::1: identification `id`, `offset` in 8-byte units; the first fragment (offset
    /// 0) starts with the UDP header, a later one holds `data` alone.
    fn udp6_fragment(from: u16, to: u16, id: u32, offset: u16, data: &[u8]) -> Vec<u8> {
        let mut payload = Vec::new();
        if offset == 0 {
            payload.extend_from_slice(&from.to_be_bytes());
            payload.extend_from_slice(&to.to_be_bytes());
            // The UDP length is the whole datagram's: 64 bytes more follow in later
            // fragments (never checked: a fragment is refused or skipped unread).
            payload.extend_from_slice(&(8 + data.len() as u16 + 64).to_be_bytes());
            payload.extend_from_slice(&[0, 0]);
        }
        payload.extend_from_slice(data);
        let more = u16::from(offset == 0);
        let mut f = vec![2; 6];
        f.extend_from_slice(&[1; 6]);
        f.extend_from_slice(&[0x86, 0xdd]);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        f.extend_from_slice(&[44, 64]); // next: a fragment header; hop limit
        f.extend_from_slice(&LOCALHOST6);
        f.extend_from_slice(&LOCALHOST6);
        f.extend_from_slice(&[17, 0]); // next: UDP
        f.extend_from_slice(&(offset << 3 | more).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&payload);
        f
    }

    fn udp6(from: u16, to: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv6(LOCALHOST6, LOCALHOST6, 64)
            .udp(from, to)
            .write(&mut f, payload)
            .unwrap();
        f
    }

    /// Over IPv6 too a fragment is judged by its datagram: the server's fragmented
    /// reply to a client on the same address is skipped whole, and a fragment of
    /// another datagram to that address is refused.
    #[test]
    fn an_ipv6_fragmented_reply_is_skipped_by_its_identification() {
        let cap = pcap(&[
            (1, udp6(5000, 53, b"a")),
            (2, udp6_fragment(53, 5000, 7, 0, b"reply-part-one")),
            (3, udp6_fragment(53, 5000, 7, 3, b"reply-part-two")),
            (4, udp6(5000, 53, b"b")),
        ]);
        let got = read(cap, Carrier::Udp, Some(53));
        assert_eq!(got, vec![(0, b"a".to_vec()), (3_000, b"b".to_vec())]);
        let cap = pcap(&[
            (1, udp6(5000, 53, b"a")),
            (2, udp6_fragment(53, 5000, 7, 0, b"reply-part-one")),
            (3, udp6_fragment(53, 5000, 8, 3, b"other-datagram")),
        ]);
        let e = refusal(cap, Carrier::Udp);
        assert!(e.starts_with("packet 3: a fragment"), "{e}");
        // The first fragment of a request is refused as over IPv4.
        let cap = pcap(&[(1, udp6_fragment(5000, 53, 9, 0, b"request-part"))]);
        let e = refusal(cap, Carrier::Udp);
        assert!(e.starts_with("packet 1: a fragment"), "{e}");
    }

    #[test]
    fn a_udp_fragment_and_a_capture_of_the_other_carrier_are_refused() {
        let mut frag = udp(5000, 53, b"part");
        frag[14 + 6] |= 0x20; // IPv4 "more fragments"
        let cap = pcap(&[(1, udp(5000, 53, b"a")), (2, frag)]);
        let e = refusal(cap, Carrier::Udp);
        assert!(e.starts_with("packet 2: a fragment"), "{e}");
        let cap = pcap(&[(1, udp(5000, 53, b"a"))]);
        let e = refusal(cap, Carrier::Tcp);
        assert!(e.contains("replay it with --proto udp"), "{e}");
    }
}
