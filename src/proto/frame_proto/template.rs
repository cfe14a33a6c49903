//! Room templates: a subject, topic, channel or WebSocket path naming a room, written
//! with one `{room}` (`room.{room}`, `/room/{room}`). Rendered straight into the send
//! buffer, no allocation: the prefix, the room in decimal, the suffix.

use super::{ROOM_DIGITS_MAX, write_decimal};

/// A template split around its `{room}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomTemplate {
    prefix: Box<[u8]>,
    suffix: Box<[u8]>,
}

/// Why a template was refused (the flag named, one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("{flag}: must contain {{room}}, got {got:?}")]
    NoRoom { flag: &'static str, got: String },
    #[error("{flag}: {{room}} may appear only once, got {got:?}")]
    TwoRooms { flag: &'static str, got: String },
    #[error(
        "{flag}: spaces, control characters and the MQTT wildcards + and # cannot be in a \
         subject, topic or path, got {got:?}"
    )]
    BadByte { flag: &'static str, got: String },
    #[error("{flag}: a WebSocket path starts with /, got {got:?}")]
    NotAPath { flag: &'static str, got: String },
    #[error("{flag}: at most {max} bytes, got {len}")]
    TooLong {
        flag: &'static str,
        max: usize,
        len: usize,
    },
}

const MARK: &str = "{room}";
/// Longest template: a subject or path is a line of the protocol; 200 bytes leave the
/// rest of a NATS `MSG` line or an HTTP request line well inside one framer line.
pub const TEMPLATE_BYTES_MAX: usize = 200;

impl RoomTemplate {
    /// A subject, topic or channel template given with `flag` (for the message).
    pub fn parse(flag: &'static str, s: &str) -> Result<RoomTemplate, TemplateError> {
        let got = || s.to_string();
        if s.len() > TEMPLATE_BYTES_MAX {
            return Err(TemplateError::TooLong {
                flag,
                max: TEMPLATE_BYTES_MAX,
                len: s.len(),
            });
        }
        let Some(at) = s.find(MARK) else {
            return Err(TemplateError::NoRoom { flag, got: got() });
        };
        let (prefix, suffix) = (&s[..at], &s[at + MARK.len()..]);
        if suffix.contains(MARK) {
            return Err(TemplateError::TwoRooms { flag, got: got() });
        }
        // Whitespace would end a NATS subject or an HTTP request target; + and # are
        // MQTT wildcards, which a PUBLISH topic must not hold.
        if s.bytes()
            .any(|b| b <= b' ' || b == 0x7f || b == b'+' || b == b'#')
        {
            return Err(TemplateError::BadByte { flag, got: got() });
        }
        Ok(RoomTemplate {
            prefix: prefix.as_bytes().into(),
            suffix: suffix.as_bytes().into(),
        })
    }

    /// A WebSocket path template: as [`RoomTemplate::parse`], starting with `/`.
    pub fn parse_path(flag: &'static str, s: &str) -> Result<RoomTemplate, TemplateError> {
        if !s.starts_with('/') {
            return Err(TemplateError::NotAPath {
                flag,
                got: s.to_string(),
            });
        }
        RoomTemplate::parse(flag, s)
    }

    /// Bytes of the rendering for `room`.
    #[inline]
    pub fn len(&self, room: u32) -> usize {
        self.prefix.len() + super::decimal_len(u64::from(room)) + self.suffix.len()
    }

    /// The longest rendering (any room).
    pub fn len_max(&self) -> usize {
        self.prefix.len() + ROOM_DIGITS_MAX + self.suffix.len()
    }

    /// Writes the rendering for `room` at the start of `out`; returns its length.
    #[inline]
    pub fn render(&self, room: u32, out: &mut [u8]) -> usize {
        let p = self.prefix.len();
        out[..p].copy_from_slice(&self.prefix);
        let d = write_decimal(&mut out[p..], u64::from(room));
        out[p + d..p + d + self.suffix.len()].copy_from_slice(&self.suffix);
        p + d + self.suffix.len()
    }

    /// The rendering for `room`, for the join (control plane).
    pub fn to_vec(&self, room: u32) -> Vec<u8> {
        let mut v = vec![0u8; self.len(room)];
        self.render(room, &mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prefix_room_suffix() {
        let t = RoomTemplate::parse("--frame-topic", "game.{room}.state").unwrap();
        assert_eq!(t.to_vec(0), b"game.0.state");
        assert_eq!(t.to_vec(4_294_967_295), b"game.4294967295.state");
        assert_eq!(t.len(12), 13);
        assert_eq!(t.len_max(), 21);
        let t = RoomTemplate::parse("--frame-topic", "{room}").unwrap();
        assert_eq!(t.to_vec(17), b"17");
    }

    #[test]
    fn bad_templates_are_one_line_errors_naming_the_flag() {
        let cases = [
            ("room", "--frame-topic: must contain {room}, got \"room\""),
            (
                "{room}.{room}",
                "--frame-topic: {room} may appear only once, got \"{room}.{room}\"",
            ),
            (
                "a b.{room}",
                "--frame-topic: spaces, control characters and the MQTT wildcards + and # \
                 cannot be in a subject, topic or path, got \"a b.{room}\"",
            ),
            (
                "a/+/{room}",
                "--frame-topic: spaces, control characters and the MQTT wildcards + and # \
                 cannot be in a subject, topic or path, got \"a/+/{room}\"",
            ),
        ];
        for (s, want) in cases {
            let e = RoomTemplate::parse("--frame-topic", s)
                .unwrap_err()
                .to_string();
            assert_eq!(e, want);
            assert!(!e.contains('\n'));
        }
        let long = format!("{}{{room}}", "a".repeat(TEMPLATE_BYTES_MAX));
        assert_eq!(
            RoomTemplate::parse("--frame-topic", &long)
                .unwrap_err()
                .to_string(),
            "--frame-topic: at most 200 bytes, got 206"
        );
        assert_eq!(
            RoomTemplate::parse_path("--ws-path", "room/{room}")
                .unwrap_err()
                .to_string(),
            "--ws-path: a WebSocket path starts with /, got \"room/{room}\""
        );
        assert!(RoomTemplate::parse_path("--ws-path", "/room/{room}").is_ok());
    }
}
