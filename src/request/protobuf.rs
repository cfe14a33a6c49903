//! `--grpc-proto FILE --grpc-json JSON`: a gRPC request message written as JSON (the
//! proto3 JSON mapping) against the method's input type in a `.proto` file, encoded
//! once at plan time into the protobuf bytes `--grpc-message` would carry. The file is
//! compiled by `protox` (its imports looked up beside it, Google's well-known types
//! built in) and the JSON read by `prost-reflect`: nothing of this runs per request.

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use protox::file::{
    ChainFileResolver, File, FileResolver, GoogleFileResolver, IncludeFileResolver,
};
use std::path::Path;

/// The `.proto` file given, served from the bytes already read; its imports come from
/// the resolvers chained after it.
struct Given {
    name: String,
    source: String,
}

impl FileResolver for Given {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == self.name {
            File::from_source(name, &self.source)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

/// The first line of an error's words (protox's diagnostics span several).
fn first_line(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or_default().trim().to_string()
}

/// Compiles `source` (the contents of `path`) into a descriptor pool.
fn compile(path: &Path, source: &[u8]) -> Result<DescriptorPool, String> {
    let source = std::str::from_utf8(source).map_err(|_| "is not UTF-8 text".to_string())?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("has no file name")?
        .to_string();
    let mut chain = ChainFileResolver::new();
    chain.add(Given {
        name: name.clone(),
        source: source.to_string(),
    });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        chain.add(IncludeFileResolver::new(dir.to_path_buf()));
    } else {
        chain.add(IncludeFileResolver::new(".".into()));
    }
    chain.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(chain);
    compiler.open_file(&name).map_err(|e| first_line(&e))?;
    Ok(compiler.descriptor_pool())
}

/// What [`message_from_json`] could not do: the `.proto` file (it does not compile,
/// or lacks the method) or the JSON (not the method's input message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("{0}")]
    Proto(String),
    #[error("{0}")]
    Json(String),
}

/// The protobuf bytes of `json` as the input message of `method`
/// (`package.Service/Method`) in the `.proto` file `path` whose contents are
/// `source`. The error is one line, without the flag's name.
pub fn message_from_json(
    path: &Path,
    source: &[u8],
    method: &str,
    json: &str,
) -> Result<Vec<u8>, ProtoError> {
    encode_json(&method_input(path, source, method)?, json)
}

/// The input message of `method` in the `.proto` file `path` (contents `source`).
fn method_input(
    path: &Path,
    source: &[u8],
    method: &str,
) -> Result<prost_reflect::MessageDescriptor, ProtoError> {
    let pool =
        compile(path, source).map_err(|m| ProtoError::Proto(format!("{}: {m}", path.display())))?;
    input_of(&pool, path, method).map_err(ProtoError::Proto)
}

/// `json` as a message of type `input`, in protobuf bytes.
fn encode_json(
    input: &prost_reflect::MessageDescriptor,
    json: &str,
) -> Result<Vec<u8>, ProtoError> {
    Ok(decode_json(input, json)?.encode_to_vec())
}

/// `json` as a message of type `input`.
fn decode_json(
    input: &prost_reflect::MessageDescriptor,
    json: &str,
) -> Result<DynamicMessage, ProtoError> {
    let mut de = serde_json::Deserializer::from_str(json);
    DynamicMessage::deserialize(input.clone(), &mut de)
        .and_then(|msg| de.end().map(|()| msg))
        .map_err(|e| ProtoError::Json(format!("not a {} in JSON: {e}", input.full_name())))
}

/// A request message whose string fields carry `{rand:N}` placeholders: its bytes,
/// and the ranges of them drawn afresh for each request (letters and digits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageTemplate {
    pub bytes: Vec<u8>,
    pub rand: Vec<std::ops::Range<usize>>,
}

/// [`message_from_json`] for JSON whose strings may hold `{rand:N}` placeholders: the
/// message is encoded twice, each placeholder written once as N `A`s and once as N
/// `B`s; the bytes where the two encodings differ are the placeholders' (a placeholder
/// keeps its length, so every length in the message stays as encoded). Another
/// placeholder (`{seq}`, a key, a feeder) would change lengths inside the message and
/// is refused.
pub fn message_template_from_json(
    path: &Path,
    source: &[u8],
    method: &str,
    json: &str,
) -> Result<MessageTemplate, ProtoError> {
    let input = method_input(path, source, method)?;
    let (a, b, drawn) = rand_fillings(json)?;
    let message = decode_json(&input, &a)?;
    let bytes = message.encode_to_vec();
    if drawn == 0 {
        return Ok(MessageTemplate {
            bytes,
            rand: Vec::new(),
        });
    }
    // The entries of a map are encoded in no fixed order, so with two or more the two
    // encodings could not be compared byte for byte.
    if let Some(field) = unordered_map_in(&message) {
        return Err(ProtoError::Json(format!(
            "{{rand:N}} cannot be drawn in this {} message: its map field {field} holds \
             more than one entry, encoded in no fixed order; put the value in metadata, \
             e.g. -H 'x-key: {{rand:8}}'",
            input.full_name()
        )));
    }
    let other = encode_json(&input, &b)?;
    let rand = differing_runs(&bytes, &other)
        .filter(|runs| {
            runs.iter().map(|r| r.len()).sum::<usize>() == drawn
                && runs.iter().all(|r| {
                    bytes[r.clone()].iter().all(|&x| x == b'A')
                        && other[r.clone()].iter().all(|&x| x == b'B')
                })
        })
        .ok_or_else(|| {
            ProtoError::Json("a {rand:N} placeholder must stand inside a string field".into())
        })?;
    Ok(MessageTemplate { bytes, rand })
}

/// The full name of a map field set in `msg`, or in a message it holds, with two or
/// more entries (whose order the encoding does not fix), if any.
fn unordered_map_in(msg: &DynamicMessage) -> Option<String> {
    use prost_reflect::Value;
    fn in_value(v: &Value) -> Option<String> {
        match v {
            Value::Message(m) => unordered_map_in(m),
            Value::List(items) => items.iter().find_map(in_value),
            Value::Map(entries) => entries.values().find_map(in_value),
            _ => None,
        }
    }
    msg.fields().find_map(|(field, value)| match value {
        prost_reflect::Value::Map(entries) if entries.len() > 1 => {
            Some(field.full_name().to_string())
        }
        _ => in_value(value),
    })
}

/// `json` with each `{rand:N}` as N `A`s, and as N `B`s, and the sum of the Ns; a bad
/// count or another placeholder is an error.
fn rand_fillings(json: &str) -> Result<(String, String, usize), ProtoError> {
    use crate::request::template::{RAND_BYTES_MAX, placeholder_in};
    let (mut a, mut b) = (
        String::with_capacity(json.len()),
        String::with_capacity(json.len()),
    );
    let mut rest = json;
    let mut drawn = 0;
    while let Some(p) = placeholder_in(rest) {
        let at = rest.find(p).expect("placeholder_in returns a slice of it");
        let n = p
            .strip_prefix("{rand:")
            .and_then(|t| t.strip_suffix('}'))
            .ok_or_else(|| {
                ProtoError::Json(format!(
                    "{p} would change lengths inside the message (its protobuf is encoded \
                     once, at start): only {{rand:N}} is drawn per request here; put other \
                     per-request values in metadata, e.g. -H 'x-key: {p}'"
                ))
            })?
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=RAND_BYTES_MAX).contains(n))
            .ok_or_else(|| {
                ProtoError::Json(format!("{p}: N must be between 1 and {RAND_BYTES_MAX}"))
            })?;
        a.push_str(&rest[..at]);
        b.push_str(&rest[..at]);
        a.extend(std::iter::repeat_n('A', n));
        b.extend(std::iter::repeat_n('B', n));
        drawn += n;
        rest = &rest[at + p.len()..];
    }
    a.push_str(rest);
    b.push_str(rest);
    Ok((a, b, drawn))
}

/// The runs of positions where `a` and `b` (of one length) differ; `None` when their
/// lengths differ.
fn differing_runs(a: &[u8], b: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    if a.len() != b.len() {
        return None;
    }
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            match runs.last_mut() {
                Some(r) if r.end == i => r.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
    }
    Some(runs)
}

/// The input message of `method` in `pool`, or why there is none.
fn input_of(
    pool: &DescriptorPool,
    path: &Path,
    method: &str,
) -> Result<prost_reflect::MessageDescriptor, String> {
    let (service, name) = method
        .split_once('/')
        .ok_or_else(|| format!("expected SERVICE/METHOD, got {method:?}"))?;
    let Some(svc) = pool.get_service_by_name(service) else {
        let known: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        return Err(format!(
            "{} has no service {service} (it has: {})",
            path.display(),
            if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            }
        ));
    };
    let Some(m) = svc.methods().find(|m| m.name() == name) else {
        let known: Vec<String> = svc.methods().map(|m| m.name().to_string()).collect();
        return Err(format!(
            "service {service} has no method {name} (it has: {})",
            known.join(", ")
        ));
    };
    Ok(m.input())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTO: &str = r#"
        syntax = "proto3";
        package demo;
        import "google/protobuf/timestamp.proto";
        message Hello { string name = 1; int32 n = 2; repeated string tags = 3;
                        google.protobuf.Timestamp at = 4; bytes blob = 5; }
        message Reply { string text = 1; }
        message Keyed { string id = 1; Inner inner = 2; }
        message Inner { map<string, string> labels = 1; Keyed back = 2; }
        service Greeter { rpc Say (Hello) returns (Reply); rpc Key (Keyed) returns (Reply); }
    "#;

    /// [`message_template_from_json`] of `json` for `method` of [`PROTO`].
    fn template(method: &str, json: &str) -> Result<MessageTemplate, String> {
        message_template_from_json(
            Path::new("/nowhere/demo.proto"),
            PROTO.as_bytes(),
            method,
            json,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn rand_placeholders_are_the_bytes_the_two_fillings_change() {
        let say = |json: &str| template("demo.Greeter/Say", json);
        let t = say(r#"{"name": "u-{rand:4}-{rand:2}", "n": 7}"#).unwrap();
        // field 1, length 9: "u-" + 4 + "-" + 2; then field 2 = 7.
        assert_eq!(t.bytes, b"\n\x09u-AAAA-AA\x10\x07");
        assert_eq!(t.rand, vec![4..8, 9..11]);
        assert!(say(r#"{"name": "u"}"#).unwrap().rand.is_empty());
        let refused = |json: &str| say(json).unwrap_err();
        assert!(refused(r#"{"name": "u{seq}"}"#).starts_with("{seq} would change lengths"));
        assert!(refused(r#"{"name": "{rand:0}"}"#).contains("between 1 and"));
    }

    #[test]
    fn rand_is_refused_where_the_two_encodings_cannot_be_compared() {
        let keyed = |json: &str| template("demo.Greeter/Key", json);
        // A map of two entries three messages down (through a recursive type) is found.
        let two = r#"{"a": "x", "b": "y"}"#;
        let e = keyed(&format!(
            r#"{{"id": "{{rand:4}}", "inner": {{"back": {{"inner": {{"labels": {two}}}}}}}}}"#
        ))
        .unwrap_err();
        assert!(e.contains("map field demo.Inner.labels holds more"), "{e}");
        // Without a placeholder a map is fine; with one, a map unset or of one entry.
        assert!(keyed(&format!(r#"{{"inner": {{"labels": {two}}}}}"#)).is_ok());
        for inner in ["{}", r#"{"labels": {"a": "x"}}"#] {
            let json = format!(r#"{{"id": "k-{{rand:4}}", "inner": {inner}}}"#);
            let t = keyed(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(t.rand, vec![4..8], "{json}");
        }
        // In a bytes field the letters are base64: 4 of them are 3 bytes, not drawn.
        let e = template("demo.Greeter/Say", r#"{"blob": "{rand:4}"}"#).unwrap_err();
        assert!(e.contains("inside a string field"), "{e}");
    }

    #[test]
    fn differing_runs_merge_neighbours() {
        let one = |r: std::ops::Range<usize>| Some(Vec::from([r]));
        assert_eq!(differing_runs(b"abcd", b"aXYd"), one(1..3));
        assert_eq!(differing_runs(b"abcd", b"Xbcd"), one(0..1));
        assert_eq!(differing_runs(b"abc", b"ab"), None);
    }

    fn encode(method: &str, json: &str) -> Result<Vec<u8>, String> {
        message_from_json(
            Path::new("/nowhere/demo.proto"),
            PROTO.as_bytes(),
            method,
            json,
        )
        .map_err(|e| match e {
            ProtoError::Proto(m) => format!("proto: {m}"),
            ProtoError::Json(m) => format!("json: {m}"),
        })
    }

    #[test]
    fn json_becomes_the_methods_input_message_in_protobuf() {
        let b = encode(
            "demo.Greeter/Say",
            r#"{"name": "ab", "n": 5, "tags": ["x"]}"#,
        )
        .unwrap();
        // field 1 (string, "ab"), field 2 (varint 5), field 3 (string "x").
        assert_eq!(b, [0x0a, 2, b'a', b'b', 0x10, 5, 0x1a, 1, b'x']);
        let t = encode("demo.Greeter/Say", r#"{"at": "1970-01-01T00:00:01Z"}"#).unwrap();
        assert_eq!(t, [0x22, 2, 0x08, 1], "a well-known type imported");
        assert_eq!(encode("demo.Greeter/Say", "{}").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn each_mistake_is_named_in_one_line() {
        let e = encode("demo.Nope/Say", "{}").unwrap_err();
        assert_eq!(
            e,
            "proto: /nowhere/demo.proto has no service demo.Nope (it has: demo.Greeter)"
        );
        let e = encode("demo.Greeter/Shout", "{}").unwrap_err();
        assert_eq!(
            e,
            "proto: service demo.Greeter has no method Shout (it has: Say, Key)"
        );
        let e = encode("demo.Greeter/Say", r#"{"nme": "a"}"#).unwrap_err();
        assert!(e.starts_with("json: not a demo.Hello in JSON: "), "{e}");
        let e = encode("demo.Greeter/Say", r#"{"n": "many"}"#).unwrap_err();
        assert!(e.starts_with("json: not a demo.Hello in JSON: "), "{e}");
        let e = encode("demo.Greeter/Say", r#"{} {}"#).unwrap_err();
        assert!(e.starts_with("json: not a demo.Hello in JSON: "), "{e}");
        let e = message_from_json(Path::new("x.proto"), b"message {", "a.B/C", "{}")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.proto: ") && !e.contains('\n'), "{e}");
    }
}
