//! `--mix FILE`: a weighted request mix, one entry per line:
//!
//! ```text
//! # name   weight  framer      request
//! get      80      resp        *2\r\n$3\r\nGET\r\n$8\r\nkey:{rand:4}\r\n
//! set      20      resp        *3\r\n$3\r\nSET\r\n$8\r\nkey:{rand:4}\r\n$1\r\nv\r\n
//! home     50      http1       GET /index.html
//! ```
//!
//! Fields are separated by blanks; the request is the rest of the line, with the escapes
//! of `--payload` (`\r \n \t \0 \\ \xHH`) and the placeholders of templates. With the
//! `http1` framer the request is `METHOD /path`, rendered with `-H` headers and Host.
//! Blank lines and lines starting with `#` are ignored.

use super::Entry;
use super::template::Template;
use crate::proto::Framing;

/// Most entries in one mix (each has its own histogram).
pub const ENTRIES_MAX: usize = 64;

/// Parses a mix file's text. Errors name the line.
pub fn parse(
    text: &str,
    unescape: impl Fn(&str) -> Result<Vec<u8>, String>,
    http: impl Fn(&str) -> Result<Template, String>,
) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut rest = line;
        let mut field = || {
            let t = rest.trim_start();
            let end = t.find(char::is_whitespace).unwrap_or(t.len());
            let (f, r) = t.split_at(end);
            rest = r;
            f
        };
        let (name, weight, framer) = (field(), field(), field());
        let request = rest.trim();
        if request.is_empty() {
            return Err(format!(
                "line {n}: expected 'name weight framer request', got {line:?}"
            ));
        }
        let weight: u32 = weight.parse().ok().filter(|&w| w > 0).ok_or_else(|| {
            format!("line {n}: weight must be a positive integer, got {weight:?}")
        })?;
        let framing: Framing = framer.parse().map_err(|e| format!("line {n}: {e}"))?;
        let template = if framing == Framing::Http1 {
            http(request).map_err(|e| format!("line {n}: {e}"))?
        } else {
            let bytes = unescape(request).map_err(|e| format!("line {n}: {e}"))?;
            Template::parse(&bytes).map_err(|e| format!("line {n}: {e}"))?
        };
        if entries.iter().any(|e: &Entry| e.name == name) {
            return Err(format!("line {n}: entry {name:?} appears twice"));
        }
        entries.push(Entry {
            name: name.to_string(),
            weight,
            template,
            framing,
        });
    }
    if entries.is_empty() {
        return Err("the mix has no entries".into());
    }
    if entries.len() > ENTRIES_MAX {
        return Err(format!(
            "the mix has {} entries; at most {ENTRIES_MAX}",
            entries.len()
        ));
    }
    // The weighted choice draws a u32 below the total: a larger total would saturate
    // and starve the entries after it.
    let total: u64 = entries.iter().map(|e| u64::from(e.weight)).sum();
    if total > u64::from(u32::MAX) {
        return Err(format!(
            "the weights add up to {total}; at most {}",
            u32::MAX
        ));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Entry>, String> {
        parse(
            text,
            |s| Ok(s.replace("\\r\\n", "\r\n").into_bytes()),
            |s| super::super::http::request(s, &[], None, "h"),
        )
    }

    #[test]
    fn parses_entries_with_framers() {
        let e =
            p("# comment\n\nget 80 delimiter:\\r\\n get k{rand:2}\\r\\n\nhome 20 http1 GET /\n")
                .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].name.as_str(), e[0].weight), ("get", 80));
        assert_eq!(e[1].framing, Framing::Http1);
        assert!(
            e[1].template
                .static_bytes()
                .starts_with(b"GET / HTTP/1.1\r\n")
        );
    }

    #[test]
    fn errors_name_the_line() {
        assert!(p("a 0 echo x").unwrap_err().starts_with("line 1: weight"));
        assert!(p("a 1 echo").unwrap_err().starts_with("line 1: expected"));
        assert!(p("\na 1 nope x").unwrap_err().starts_with("line 2:"));
        assert!(p("a 1 echo x\na 1 echo y").unwrap_err().contains("twice"));
        assert!(p("# nothing").unwrap_err().contains("no entries"));
        // 4e9 twice saturated the weighted choice's running sum: the second entry got
        // 7% of the requests instead of half.
        let e = p("a 4000000000 echo x\nb 4000000000 echo y").unwrap_err();
        assert!(e.contains("weights add up to 8000000000"), "{e}");
        assert_eq!(p("a 4294967294 echo x\nb 1 echo y").unwrap().len(), 2);
    }
}
