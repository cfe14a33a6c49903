//! The UDP header reader (src/proto/udp_header.rs): any datagram, as a peer may send it.
//! `read` accepts exactly the datagrams of at least 24 bytes that start with the magic,
//! and what it reads writes back to the same 24 bytes; any header written reads back
//! unchanged, whatever payload follows it.
#![no_main]
use blaster::proto::udp_header::{HEADER_LEN, MAGIC, UdpHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ours = data.len() >= HEADER_LEN && data[..4] == MAGIC;
    match UdpHeader::read(data) {
        Some(h) => {
            assert!(ours, "accepted a short or foreign datagram");
            let mut buf = [0u8; HEADER_LEN];
            h.write(&mut buf);
            assert_eq!(
                buf[..],
                data[..HEADER_LEN],
                "read then write changed the header"
            );
        }
        None => assert!(!ours, "rejected one of ours"),
    }

    // The other direction: fields from the input, written in front of the rest of it.
    if data.len() >= 20 {
        let u64_at = |i: usize| u64::from_be_bytes(data[i..i + 8].try_into().unwrap());
        let h = UdpHeader {
            flow: u32::from_be_bytes(data[..4].try_into().unwrap()),
            seq: u64_at(4),
            intended_ns: u64_at(12),
        };
        let mut datagram = vec![0u8; HEADER_LEN];
        datagram.extend_from_slice(&data[20..]);
        h.write(&mut datagram);
        assert_eq!(
            &datagram[HEADER_LEN..],
            &data[20..],
            "write touched the payload"
        );
        assert_eq!(UdpHeader::read(&datagram), Some(h), "write then read");
    }
});
