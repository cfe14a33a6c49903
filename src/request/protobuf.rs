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
    let pool =
        compile(path, source).map_err(|m| ProtoError::Proto(format!("{}: {m}", path.display())))?;
    let input = input_of(&pool, path, method).map_err(ProtoError::Proto)?;
    let mut de = serde_json::Deserializer::from_str(json);
    let msg = DynamicMessage::deserialize(input.clone(), &mut de)
        .and_then(|msg| de.end().map(|()| msg))
        .map_err(|e| ProtoError::Json(format!("not a {} in JSON: {e}", input.full_name())))?;
    Ok(msg.encode_to_vec())
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
                        google.protobuf.Timestamp at = 4; }
        message Reply { string text = 1; }
        service Greeter { rpc Say (Hello) returns (Reply); }
    "#;

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
            "proto: service demo.Greeter has no method Shout (it has: Say)"
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
