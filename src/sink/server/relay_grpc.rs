//! Broadcast mode over gRPC (`blaster sink --mode broadcast --http2`): each member is a
//! bidirectional streaming call of an h2c connection, its room the request metadata
//! `room` (decimal), and every gRPC message a member sends is relayed as it is to the
//! other members of its room, on their own calls. What `--frame-proto grpc` speaks
//! (src/proto/frame_proto/grpc.rs), on the io_uring sink's rings.
//!
//! Per connection ([`GrpcPeer`], made at its first bytes): the client preface, then
//! frames read whole from the connection's buffer chain (a frame above the 16 KiB
//! MAX_FRAME_SIZE is refused: the connection closes, `frames_invalid`). The sink
//! answers the preface with its SETTINGS (1 MiB stream windows, a 16 MiB connection
//! window), acknowledges SETTINGS and PINGs, and gives back what DATA used once half
//! a window is (WINDOW_UPDATE). A HEADERS opening a call is decoded (HPACK, the
//! connection's own table), the call joins the room its `room` metadata names (as
//! member = its index on the connection, at most `--members-per-connection` calls)
//! and is answered with response headers at once (the join); a call without that
//! metadata, or whose room is full, is answered trailers-only with INVALID_ARGUMENT
//! or RESOURCE_EXHAUSTED. DATA carries whole gRPC messages (a message cut across DATA
//! frames is refused as invalid, which blaster never sends for frames up to 16 KiB);
//! each is a frame received, and each copy a DATA frame on a room mate's call within
//! that call's and its connection's send windows (the client's): a copy that the
//! windows or the send queue cannot take is dropped and counted (`relay_dropped`).
//! RST_STREAM, GOAWAY, PRIORITY and unknown frames are read and ignored: a member
//! leaves its room when its connection closes.

use super::Worker;
use super::relay::Relay;
use crate::proto::h2::decoder::Decoder;
use crate::proto::h2::frame::{self, ACK, END_HEADERS, END_STREAM, Kind, PADDED};
use crate::proto::h2::{FRAME_HEADER_BYTES, FRAME_SIZE_MIN, PREFACE, WINDOW_DEFAULT};
use crate::sink::rooms::RoomSlot;

/// Each call's receive window, and the connection's, as the sink advertises them.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 24;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
/// The gRPC message prefix.
const PREFIX: usize = 5;
/// The metadata that names a call's room.
const ROOM_KEY: &[u8] = b"room";

/// One connection's HTTP/2 side.
pub(super) struct GrpcPeer {
    preface_seen: bool,
    decoder: Decoder,
    /// Its calls: stream id and room slot, in the order they opened (the member
    /// index in the room table is the position here).
    calls: Vec<(u32, RoomSlot)>,
    /// Send windows the client gave: per call (as `calls`), and the connection's.
    send: Vec<i64>,
    send_connection: i64,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE (a new call's send window).
    initial_window: i64,
    /// Bytes of DATA received since the last WINDOW_UPDATE: per call, connection.
    used: Vec<u32>,
    used_connection: u32,
}

impl GrpcPeer {
    fn new() -> GrpcPeer {
        GrpcPeer {
            preface_seen: false,
            decoder: Decoder::new(crate::proto::h2::HEADER_TABLE_DEFAULT as usize),
            calls: Vec::new(),
            send: Vec::new(),
            send_connection: WINDOW_DEFAULT as i64,
            initial_window: WINDOW_DEFAULT as i64,
            used: Vec::new(),
            used_connection: 0,
        }
    }

    fn call(&self, stream: u32) -> Option<usize> {
        self.calls.iter().position(|&(id, _)| id == stream)
    }
}

/// The header blocks the sink answers with, encoded once.
pub(super) struct Blocks {
    ok: Vec<u8>,
    no_room: Vec<u8>,
    full: Vec<u8>,
}

impl Blocks {
    pub(super) fn new() -> Blocks {
        let block = |fields: &[(&str, &str)]| {
            let mut b = Vec::new();
            crate::proto::h2::hpack::encode_fields(&mut b, fields);
            b
        };
        let head = [(":status", "200"), ("content-type", "application/grpc")];
        let trailers = |code: &str, message: &str| {
            block(&[
                head[0],
                head[1],
                ("grpc-status", code),
                ("grpc-message", message),
            ])
        };
        Blocks {
            ok: block(&head),
            no_room: trailers("3", "no room metadata (a decimal room number)"),
            full: trailers("8", "room full"),
        }
    }
}

/// What a frame did to the connection.
enum Read {
    /// Go on with the next frame.
    Next,
    /// The bytes are not HTTP/2 as the sink takes it: close.
    Invalid,
}

impl Worker {
    fn grpc_relay(&mut self) -> &mut Relay {
        self.relay.as_mut().expect("broadcast mode has a relay")
    }

    /// gRPC broadcast: reads every whole HTTP/2 frame of `index`'s chain. False when
    /// the connection was closed.
    pub(super) fn grpc_recv(&mut self, index: usize) -> bool {
        if self.grpc_relay().grpc[index].is_none() {
            self.grpc_relay().grpc[index] = Some(Box::new(GrpcPeer::new()));
        }
        loop {
            let relay = self.relay.as_mut().expect("broadcast mode has a relay");
            let peer = relay.peers[index];
            let avail = peer.rx_len as usize;
            let chain = self.conns[index].chain;
            let off = peer.rx_off as usize;
            let g = relay.grpc[index].as_mut().expect("made above");
            if !g.preface_seen {
                if avail < PREFACE.len() {
                    return true;
                }
                self.bufs
                    .copy_out(&chain, off, &mut relay.scratch[..PREFACE.len()]);
                if &relay.scratch[..PREFACE.len()] != PREFACE {
                    return self.relay_refuse(index, true);
                }
                g.preface_seen = true;
                self.relay_consume(index, PREFACE.len());
                self.grpc_greet(index);
                continue;
            }
            if avail < FRAME_HEADER_BYTES {
                return true;
            }
            self.bufs
                .copy_out(&chain, off, &mut relay.scratch[..FRAME_HEADER_BYTES]);
            let h = &relay.scratch[..FRAME_HEADER_BYTES];
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            if len > FRAME_SIZE_MIN as usize {
                return self.relay_refuse(index, true);
            }
            let end = FRAME_HEADER_BYTES + len;
            if avail < end {
                return true;
            }
            self.bufs.copy_out(&chain, off, &mut relay.scratch[..end]);
            match self.grpc_frame(index, end) {
                Read::Next => {}
                Read::Invalid => return self.relay_refuse(index, true),
            }
            self.relay_consume(index, end);
        }
    }

    /// The sink's SETTINGS and the connection window's raise, after the preface.
    fn grpc_greet(&mut self, index: usize) {
        let mut out = [0u8; 64];
        let n = frame::write_settings(&mut out, &[(SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW)])
            .expect("64 bytes hold the SETTINGS");
        let m = frame::write_window_update(&mut out[n..], 0, CONNECTION_WINDOW - WINDOW_DEFAULT)
            .expect("and the WINDOW_UPDATE");
        self.grpc_queue(index, &[&out[..n + m]]);
    }

    /// Queues `parts` on `index`'s send queue (dropped and counted when full).
    fn grpc_queue(&mut self, index: usize, parts: &[&[u8]]) -> bool {
        let relay = self.grpc_relay();
        if relay.queues.push(index, parts) {
            relay.list(index);
            true
        } else {
            relay.stats.relay_dropped += 1;
            false
        }
    }

    /// The frame in `scratch[..end]` arrived on `index`.
    fn grpc_frame(&mut self, index: usize, end: usize) -> Read {
        let relay = self.grpc_relay();
        let h: [u8; FRAME_HEADER_BYTES] = relay.scratch[..FRAME_HEADER_BYTES]
            .try_into()
            .expect("a header");
        let (kind, flags) = (Kind::from_byte(h[3]), h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & crate::proto::h2::WINDOW_MAX;
        let mut start = FRAME_HEADER_BYTES;
        let mut stop = end;
        if matches!(kind, Kind::Data | Kind::Headers) && flags & PADDED != 0 {
            let Some(&pad) = relay.scratch.get(start).filter(|_| end > start) else {
                return Read::Invalid;
            };
            start += 1;
            match stop.checked_sub(pad as usize).filter(|&e| e >= start) {
                Some(e) => stop = e,
                None => return Read::Invalid,
            }
        }
        match kind {
            Kind::Settings if flags & ACK == 0 => self.grpc_settings(index, start, stop),
            Kind::Ping if flags & ACK == 0 && stop - start == 8 => {
                let mut out = [0u8; 17];
                let opaque: [u8; 8] = relay.scratch[start..stop].try_into().expect("8 bytes");
                frame::write_ping(&mut out, opaque, true).expect("17 bytes");
                self.grpc_queue(index, &[&out]);
                Read::Next
            }
            Kind::WindowUpdate if stop - start == 4 => {
                let inc =
                    frame::u32_payload(&relay.scratch[start..stop]) & crate::proto::h2::WINDOW_MAX;
                let g = relay.grpc[index].as_mut().expect("a gRPC peer");
                if stream == 0 {
                    g.send_connection += i64::from(inc);
                } else if let Some(c) = g.call(stream) {
                    g.send[c] += i64::from(inc);
                }
                Read::Next
            }
            Kind::Headers => {
                if flags & END_HEADERS == 0 {
                    // Request headers in CONTINUATION frames: not what a member sends.
                    return Read::Invalid;
                }
                // The priority fields, when flagged, precede the block.
                let block_start = if flags & 0x20 != 0 { start + 5 } else { start };
                if block_start > stop {
                    return Read::Invalid;
                }
                self.grpc_call(index, stream, block_start, stop, flags & END_STREAM != 0)
            }
            Kind::Data => self.grpc_data(index, stream, end - FRAME_HEADER_BYTES, start, stop),
            Kind::Continuation | Kind::PushPromise => Read::Invalid,
            _ => Read::Next,
        }
    }

    /// The client's SETTINGS at `scratch[start..stop]`: a new INITIAL_WINDOW_SIZE
    /// moves every call's send window by the difference; acknowledged.
    fn grpc_settings(&mut self, index: usize, start: usize, stop: usize) -> Read {
        let relay = self.grpc_relay();
        if !(stop - start).is_multiple_of(6) {
            return Read::Invalid;
        }
        let g = relay.grpc[index].as_mut().expect("a gRPC peer");
        for (id, value) in frame::settings(&relay.scratch[start..stop]) {
            if id == SETTINGS_INITIAL_WINDOW_SIZE {
                let delta = i64::from(value) - g.initial_window;
                g.initial_window = i64::from(value);
                for w in &mut g.send {
                    *w += delta;
                }
            }
        }
        let mut out = [0u8; FRAME_HEADER_BYTES];
        frame::write_settings_ack(&mut out).expect("9 bytes");
        self.grpc_queue(index, &[&out]);
        Read::Next
    }

    /// A HEADERS opening call `stream` (its block at `scratch[start..stop]`): joins
    /// the room its metadata names and answers with response headers, or ends the
    /// call trailers-only.
    fn grpc_call(
        &mut self,
        index: usize,
        stream: u32,
        start: usize,
        stop: usize,
        end_stream: bool,
    ) -> Read {
        let relay = self.grpc_relay();
        let g = relay.grpc[index].as_mut().expect("a gRPC peer");
        let mut room: Option<u32> = None;
        let decoded = g
            .decoder
            .decode(&relay.scratch[start..stop], |name, value| {
                if name == ROOM_KEY {
                    room = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                }
            });
        if decoded.is_err() {
            return Read::Invalid;
        }
        if g.call(stream).is_some() || end_stream {
            return Read::Next; // trailers of a call, or a call closed at once
        }
        let per = relay.cfg.rooms_per_connection;
        let n = relay.peer_nrooms[index] as usize;
        let slot = match room {
            None => None,
            Some(_) if n == per => None,
            Some(id) => relay.rooms.join(id, n as u16, index as u32).ok(),
        };
        let block = match (room, slot) {
            (None, _) => relay.grpc_blocks.no_room.clone(),
            (Some(_), None) => {
                relay.stats.joins_refused += 1;
                relay.grpc_blocks.full.clone()
            }
            (Some(id), Some(slot)) => {
                relay.peer_rooms[index * per + n] = (id, slot);
                relay.peer_nrooms[index] += 1;
                relay.stats.joins += 1;
                let g = relay.grpc[index].as_mut().expect("a gRPC peer");
                g.calls.push((stream, slot));
                g.send.push(g.initial_window);
                g.used.push(0);
                relay.grpc_blocks.ok.clone()
            }
        };
        let ends = slot.is_none();
        let mut out = vec![0u8; frame::headers_len(block.len(), FRAME_SIZE_MIN)];
        frame::write_headers(&mut out, stream, &block, ends, FRAME_SIZE_MIN)
            .expect("sized by headers_len");
        self.grpc_queue(index, &[&out]);
        Read::Next
    }

    /// DATA of `length` (padding included) on `stream`, its data at
    /// `scratch[start..stop]`: each whole gRPC message relayed to the call's room
    /// mates; the windows given back once half is used.
    fn grpc_data(
        &mut self,
        index: usize,
        stream: u32,
        length: usize,
        start: usize,
        stop: usize,
    ) -> Read {
        let relay = self.grpc_relay();
        let g = relay.grpc[index].as_mut().expect("a gRPC peer");
        let Some(call) = g.call(stream) else {
            return Read::Next; // a call refused at its headers: its data goes nowhere
        };
        let room = g.calls[call].1;
        // Receive windows: given back once half is used.
        g.used_connection += length as u32;
        g.used[call] += length as u32;
        let mut updates = [0u8; 2 * 13];
        let mut u = 0;
        if g.used_connection >= CONNECTION_WINDOW / 2 {
            u += frame::write_window_update(&mut updates[u..], 0, g.used_connection)
                .expect("13 bytes");
            g.used_connection = 0;
        }
        if g.used[call] >= STREAM_WINDOW / 2 {
            u += frame::write_window_update(&mut updates[u..], stream, g.used[call])
                .expect("13 bytes");
            g.used[call] = 0;
        }
        if u > 0 {
            self.grpc_queue(index, &[&updates[..u]]);
        }
        let mut at = start;
        while at < stop {
            let relay = self.grpc_relay();
            if stop - at < PREFIX {
                return Read::Invalid;
            }
            let p = &relay.scratch[at..at + PREFIX];
            let len = u32::from_be_bytes([p[1], p[2], p[3], p[4]]) as usize;
            if p[0] != 0 || at + PREFIX + len > stop {
                return Read::Invalid; // compressed, or cut across DATA frames
            }
            self.grpc_relay_message(index, call, room, at, PREFIX + len);
            at += PREFIX + len;
        }
        Read::Next
    }

    /// The message at `scratch[at..at + n]` (prefix included) from `index`'s call
    /// `call` in room slot `room`: a DATA frame on each room mate's call.
    fn grpc_relay_message(
        &mut self,
        index: usize,
        call: usize,
        room: RoomSlot,
        at: usize,
        n: usize,
    ) {
        let relay = self.grpc_relay();
        relay.stats.frames_received += 1;
        let echo = relay.cfg.echo_to_sender;
        for i in 0..relay.rooms.members(room).len() {
            let m = relay.rooms.members(room)[i];
            let (peer, member) = (m.peer as usize, m.member as usize);
            if peer == index && member == call && !echo {
                continue;
            }
            let Some(dest) = relay.grpc[peer].as_mut() else {
                continue;
            };
            let need = n as i64;
            if dest.send[member] < need || dest.send_connection < need {
                relay.stats.relay_dropped += 1;
                continue;
            }
            let stream = dest.calls[member].0;
            let l = (n as u32).to_be_bytes();
            let s = stream.to_be_bytes();
            let header = [
                l[1],
                l[2],
                l[3],
                Kind::Data.byte(),
                0,
                s[0],
                s[1],
                s[2],
                s[3],
            ];
            if relay
                .queues
                .push(peer, &[&header, &relay.scratch[at..at + n]])
            {
                let dest = relay.grpc[peer].as_mut().expect("checked above");
                dest.send[member] -= need;
                dest.send_connection -= need;
                relay.stats.relayed += 1;
                relay.list(peer);
            } else {
                relay.stats.relay_dropped += 1;
            }
        }
    }
}
