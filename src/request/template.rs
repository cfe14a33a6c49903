//! Request templates: a payload with placeholders, parsed once at start and rendered
//! per request into a pre-sized buffer without allocating.
//!
//! | placeholder | renders as |
//! |---|---|
//! | `{seq}` | the request's global sequence number (decimal) |
//! | `{conn}` | the connection's global index (decimal) |
//! | `{worker}` | the worker's index (decimal) |
//! | `{rand:N}` | N random characters from `a-z0-9`, from the seeded generator (printable, so text protocols stay valid) |
//! | `{time_ns}` | the request's intended send instant, ns since the Unix epoch (decimal) |
//! | `{zipf:N:S}` | a key from 1 to N (decimal), Zipf-distributed with exponent S: key k drawn with probability proportional to k^-S |
//! | `{uniform:N}` | a key from 1 to N (decimal), each equally likely |
//! | `{line:FILE}` | line (seq mod L) of FILE's L lines (a feeder) |
//! | `{csv:FILE:COLUMN}` | column COLUMN (named in the header row) of row (seq mod R) of the CSV file FILE's R rows; two placeholders of one file take the same row |
//!
//! Keys are drawn from the request's own generator (seeded from the run's seed and the
//! request's global sequence number) and the placeholder's place in the template, so a
//! rerun, or the same sequence number on another shard, draws the same key.
//!
//! `{{` and `}}` stand for literal braces; any other `{...}` is an error, so a typo is
//! caught at start rather than sent a million times.

use std::ops::Range;

/// Longest `{rand:N}`.
pub const RAND_BYTES_MAX: usize = 4096;
/// Widest decimal rendering of a u64.
const U64_DIGITS: usize = 20;

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Literal(Range<usize>),
    Seq,
    Conn,
    Worker,
    Rand(usize),
    TimeNs,
    /// The template's `nth` key placeholder.
    Key {
        dist: KeyDist,
        nth: u32,
    },
    /// `{line:FILE}` / `{csv:FILE:COLUMN}`: its cells once [`Template::resolve_feeds`]
    /// read the file.
    Feed {
        path: std::path::PathBuf,
        column: Option<String>,
        cells: Option<std::sync::Arc<Feed>>,
    },
}

/// A feeder's cells, one per row, in one buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Feed {
    bytes: Vec<u8>,
    /// Row i is `bytes[ends[i - 1]..ends[i]]` (from 0 for the first).
    ends: Vec<u32>,
    longest: usize,
}

impl Feed {
    fn push(&mut self, cell: &[u8]) {
        self.bytes.extend_from_slice(cell);
        self.ends.push(self.bytes.len() as u32);
        self.longest = self.longest.max(cell.len());
    }

    /// The cell of request `seq`: row `seq` mod rows.
    #[inline]
    fn cell(&self, seq: u64) -> &[u8] {
        let i = (seq % self.ends.len() as u64) as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// FILE's lines (`{line:FILE}`), a final newline and `\r` endings dropped.
    pub fn lines(bytes: &[u8]) -> Result<Feed, String> {
        let mut f = Feed::empty();
        let text = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        if !text.is_empty() {
            for line in text.split(|&b| b == b'\n') {
                f.push(line.strip_suffix(b"\r").unwrap_or(line));
            }
        }
        f.nonempty("lines")
    }

    /// Column `column` (named in the header row) of the CSV `bytes` (`{csv:...}`).
    pub fn csv_column(bytes: &[u8], column: &str) -> Result<Feed, String> {
        let mut r = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(bytes);
        let headers = r.byte_headers().map_err(|e| e.to_string())?.clone();
        let Some(col) = headers.iter().position(|h| h == column.as_bytes()) else {
            let names: Vec<String> = headers
                .iter()
                .map(|h| String::from_utf8_lossy(h).into_owned())
                .collect();
            return Err(format!(
                "has no column {column:?} in its header ({})",
                names.join(", ")
            ));
        };
        let mut f = Feed::empty();
        for rec in r.byte_records() {
            let rec = rec.map_err(|e| e.to_string())?;
            f.push(rec.get(col).unwrap_or_default());
        }
        f.nonempty("rows below its header")
    }

    fn empty() -> Feed {
        Feed {
            bytes: Vec::new(),
            ends: Vec::new(),
            longest: 0,
        }
    }

    fn nonempty(self, what: &str) -> Result<Feed, String> {
        if self.ends.is_empty() {
            Err(format!("has no {what}"))
        } else if self.bytes.len() > u32::MAX as usize {
            Err("is larger than 4 GiB".into())
        } else {
            Ok(self)
        }
    }
}

/// The feeder files `src` names (`{line:FILE}`, `{csv:FILE:COLUMN}`), for reading
/// before the templates are built.
pub fn feed_paths(src: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find('{') {
        rest = &rest[i + 1..];
        let Some(close) = rest.find('}') else { break };
        if let Some((path, _)) = feed_spec(&rest[..close]) {
            out.push(path.into());
        }
        rest = &rest[close..];
    }
    out
}

/// `line:FILE` -> (FILE, None); `csv:FILE:COLUMN` -> (FILE, Some(COLUMN)).
fn feed_spec(name: &str) -> Option<(&str, Option<&str>)> {
    if let Some(path) = name.strip_prefix("line:") {
        return Some((path, None));
    }
    let (path, column) = name.strip_prefix("csv:")?.rsplit_once(':')?;
    Some((path, Some(column)))
}

/// The first placeholder written in `text` (`{seq}`, `{rand:8}`, ...), for the places
/// that take text once rather than as a template, and refuse what they would not
/// expand.
pub fn placeholder_in(text: &str) -> Option<&str> {
    const WHOLE: [&str; 4] = ["seq", "conn", "worker", "time_ns"];
    const PREFIX: [&str; 5] = ["rand:", "zipf:", "uniform:", "line:", "csv:"];
    let mut at = 0;
    while let Some(open) = text[at..].find('{').map(|i| at + i) {
        let inner = &text[open + 1..];
        if let Some(close) = inner.find('}') {
            let name = &inner[..close];
            if WHOLE.contains(&name) || PREFIX.iter().any(|p| name.starts_with(p)) {
                return Some(&text[open..open + close + 2]);
            }
        }
        at = open + 1;
    }
    None
}

/// How a key placeholder draws its keys (1 to N).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyDist {
    /// `{zipf:N:S}`.
    Zipf {
        n: u64,
        s: f64,
        dist: rand_distr::Zipf<f64>,
    },
    /// `{uniform:N}`.
    Uniform { n: u64 },
}

/// Largest key count of `{zipf:N:S}` and `{uniform:N}`.
pub const KEYS_MAX: u64 = 1 << 40;

impl KeyDist {
    /// Parses the inside of `{zipf:N:S}` or `{uniform:N}` (`None`: neither).
    fn parse(name: &str) -> Option<Result<KeyDist, String>> {
        let count = |n: &str, what: &str| -> Result<u64, String> {
            match n.parse::<u64>() {
                Ok(n) if (1..=KEYS_MAX).contains(&n) => Ok(n),
                _ => Err(format!(
                    "{{{what}}}: the key count must be between 1 and {KEYS_MAX}, got {n:?}"
                )),
            }
        };
        if let Some(rest) = name.strip_prefix("uniform:") {
            return Some(count(rest, name).map(|n| KeyDist::Uniform { n }));
        }
        let rest = name.strip_prefix("zipf:")?;
        Some((|| {
            let (n, s) = rest.split_once(':').ok_or_else(|| {
                format!("{{{name}}}: expected {{zipf:N:S}}, e.g. {{zipf:1000:1.1}}")
            })?;
            let n = count(n, name)?;
            let s: f64 = match s.parse() {
                Ok(s) if s > 0.0 && f64::is_finite(s) => s,
                _ => {
                    return Err(format!(
                        "{{{name}}}: the exponent must be above 0, got {s:?}"
                    ));
                }
            };
            let dist =
                rand_distr::Zipf::new(n as f64, s).map_err(|e| format!("{{{name}}}: {e}"))?;
            Ok(KeyDist::Zipf { n, s, dist })
        })())
    }

    /// The placeholder as written (`{zipf:1000:1.1}`).
    pub fn name(&self) -> String {
        match self {
            KeyDist::Zipf { n, s, .. } => format!("{{zipf:{n}:{s}}}"),
            KeyDist::Uniform { n } => format!("{{uniform:{n}}}"),
        }
    }

    /// How many keys it draws from.
    pub fn keys(&self) -> u64 {
        match self {
            KeyDist::Zipf { n, .. } | KeyDist::Uniform { n } => *n,
        }
    }

    /// The share of draws key `k` gets by the law (`norm`: [`KeyDist::norm`]).
    pub fn expected_share(&self, k: u64, norm: f64) -> f64 {
        match self {
            KeyDist::Zipf { s, .. } => (k as f64).powf(-s) / norm,
            KeyDist::Uniform { n } => 1.0 / *n as f64,
        }
    }

    /// The Zipf law's normalisation, the sum of k^-S over the keys (1 for uniform).
    pub fn norm(&self) -> f64 {
        match self {
            KeyDist::Zipf { n, s, .. } => (1..=*n).map(|k| (k as f64).powf(-s)).sum(),
            KeyDist::Uniform { .. } => 1.0,
        }
    }

    /// The key the `nth` key placeholder draws for a request whose generator started
    /// at `base` (its seed: a function of the run's seed and the sequence number).
    #[inline]
    pub fn draw(&self, base: u64, nth: u32) -> u64 {
        let seed =
            crate::schedule::mix64(base ^ (u64::from(nth) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        match self {
            KeyDist::Zipf { n, dist, .. } => {
                use rand::SeedableRng;
                use rand_distr::Distribution;
                let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
                (dist.sample(&mut r) as u64).clamp(1, *n)
            }
            KeyDist::Uniform { n } => fastrand::Rng::with_seed(seed).u64(1..=*n),
        }
    }
}

/// Values a request is rendered with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ctx {
    pub seq: u64,
    pub conn: u64,
    pub worker: u64,
    pub time_ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// Literal bytes, with `{{`/`}}` already unescaped; segments point into it.
    text: Vec<u8>,
    segments: Vec<Segment>,
}

impl Template {
    /// Parses placeholders in `src`.
    pub fn parse(src: &[u8]) -> Result<Template, String> {
        let mut text = Vec::with_capacity(src.len());
        let mut segments = Vec::new();
        let mut lit_start = 0;
        let mut keys = 0u32;
        let mut i = 0;
        let flush = |text: &Vec<u8>, start: usize, segments: &mut Vec<Segment>| {
            if text.len() > start {
                segments.push(Segment::Literal(start..text.len()));
            }
        };
        while i < src.len() {
            match src[i] {
                b'{' if src.get(i + 1) == Some(&b'{') => {
                    text.push(b'{');
                    i += 2;
                }
                b'}' if src.get(i + 1) == Some(&b'}') => {
                    text.push(b'}');
                    i += 2;
                }
                b'{' => {
                    let close = src[i..]
                        .iter()
                        .position(|&b| b == b'}')
                        .ok_or_else(|| format!("unclosed placeholder at byte {i}"))?;
                    let name = std::str::from_utf8(&src[i + 1..i + close])
                        .map_err(|_| format!("placeholder at byte {i} is not text"))?;
                    let seg = match name {
                        "seq" => Segment::Seq,
                        "conn" => Segment::Conn,
                        "worker" => Segment::Worker,
                        "time_ns" => Segment::TimeNs,
                        _ if feed_spec(name).is_some_and(|(p, c)| {
                            !p.is_empty() && c.is_none_or(|c| !c.is_empty())
                        }) =>
                        {
                            let (path, column) = feed_spec(name).expect("checked");
                            Segment::Feed {
                                path: path.into(),
                                column: column.map(str::to_string),
                                cells: None,
                            }
                        }
                        _ if KeyDist::parse(name).is_some() => Segment::Key {
                            dist: KeyDist::parse(name).expect("checked")?,
                            nth: keys,
                        },
                        _ => match name.strip_prefix("rand:").map(str::parse::<usize>) {
                            Some(Ok(n)) if (1..=RAND_BYTES_MAX).contains(&n) => Segment::Rand(n),
                            _ => {
                                // Escaped and cut short: the name may hold a newline
                                // (from `\n` in a payload), and the error is one line.
                                let name = crate::proto::escape_prefix(name.as_bytes(), 40);
                                return Err(format!(
                                    "unknown placeholder {{{name}}}: expected {{seq}}, {{conn}}, \
                                     {{worker}}, {{rand:N}} (N in 1..={RAND_BYTES_MAX}), \
                                     {{time_ns}}, {{zipf:N:S}}, {{uniform:N}}, {{line:FILE}} or \
                                     {{csv:FILE:COLUMN}}; write {{{{ for a literal brace"
                                ));
                            }
                        },
                    };
                    flush(&text, lit_start, &mut segments);
                    lit_start = text.len();
                    keys += u32::from(matches!(seg, Segment::Key { .. }));
                    segments.push(seg);
                    i += close + 1;
                }
                b => {
                    text.push(b);
                    i += 1;
                }
            }
        }
        flush(&text, lit_start, &mut segments);
        Ok(Template { text, segments })
    }

    /// A template without placeholders.
    pub fn literal(bytes: &[u8]) -> Template {
        Template {
            text: bytes.to_vec(),
            segments: if bytes.is_empty() {
                Vec::new()
            } else {
                vec![Segment::Literal(0..bytes.len())]
            },
        }
    }

    /// This template followed by `bytes` as they are (a binary body: no placeholders).
    pub fn then_literal(mut self, bytes: &[u8]) -> Template {
        if !bytes.is_empty() {
            let start = self.text.len();
            self.text.extend_from_slice(bytes);
            self.segments.push(Segment::Literal(start..self.text.len()));
        }
        self
    }

    /// Appends `{rand:n}`: `n` random letters and digits per rendering.
    pub fn then_rand(mut self, n: usize) -> Template {
        self.segments.push(Segment::Rand(n));
        self
    }

    /// Whether every rendering is the same bytes.
    pub fn is_static(&self) -> bool {
        self.segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
    }

    /// Whether every rendering has the same length (no decimal placeholders).
    pub fn is_fixed_len(&self) -> bool {
        self.segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_) | Segment::Rand(_)))
    }

    /// The longest rendering, for sizing buffers.
    pub fn max_len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Literal(r) => r.len(),
                Segment::Rand(n) => *n,
                Segment::Feed { cells, .. } => cells.as_ref().map_or(0, |f| f.longest),
                _ => U64_DIGITS,
            })
            .sum()
    }

    /// What follows the first `sep` of every rendering, when that is the same bytes in
    /// all of them: `sep` lies in a literal part and only literal parts follow it (an
    /// HTTP/1.1 request's body after `\r\n\r\n`, whatever placeholders its headers
    /// carry). `None` when a placeholder follows, or no literal part holds `sep`.
    pub fn static_after(&self, sep: &[u8]) -> Option<&[u8]> {
        let i = self.segments.iter().position(|s| match s {
            Segment::Literal(r) => self.text[r.clone()].windows(sep.len()).any(|w| w == sep),
            _ => false,
        })?;
        if !self.segments[i + 1..]
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
        {
            return None;
        }
        let Segment::Literal(r) = &self.segments[i] else {
            unreachable!("found above")
        };
        let at = self.text[r.clone()]
            .windows(sep.len())
            .position(|w| w == sep)
            .expect("found above");
        Some(&self.text[r.start + at + sep.len()..])
    }

    /// The rendering of a static template (its literal bytes).
    pub fn static_bytes(&self) -> &[u8] {
        &self.text
    }

    /// Reads every feeder file through `read` (`{line:FILE}`, `{csv:FILE:COLUMN}`);
    /// before it a template with feeders cannot render. The error names the file.
    pub fn resolve_feeds(
        &mut self,
        read: &mut dyn FnMut(&std::path::Path) -> Result<Vec<u8>, String>,
    ) -> Result<(), String> {
        for seg in &mut self.segments {
            if let Segment::Feed {
                path,
                column,
                cells,
            } = seg
            {
                let bytes =
                    read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let feed = match column {
                    None => Feed::lines(&bytes),
                    Some(c) => Feed::csv_column(&bytes, c),
                }
                .map_err(|e| format!("{} {e}", path.display()))?;
                *cells = Some(std::sync::Arc::new(feed));
            }
        }
        Ok(())
    }

    /// The key placeholders (`{zipf:N:S}`, `{uniform:N}`), in order.
    pub fn key_dists(&self) -> impl Iterator<Item = &KeyDist> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Key { dist, .. } => Some(dist),
            _ => None,
        })
    }

    /// Renders into `out` (at least [`Template::max_len`] long); returns the length.
    #[inline]
    pub fn render(&self, ctx: &Ctx, rng: &mut fastrand::Rng, out: &mut [u8]) -> usize {
        const ALNUM: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        // Keys come from the generator's seed as given, whatever `{rand:N}` draws.
        let base = rng.get_seed();
        let mut n = 0;
        for seg in &self.segments {
            match seg {
                Segment::Literal(r) => {
                    out[n..n + r.len()].copy_from_slice(&self.text[r.clone()]);
                    n += r.len();
                }
                Segment::Seq => n += write_u64(ctx.seq, &mut out[n..]),
                Segment::Conn => n += write_u64(ctx.conn, &mut out[n..]),
                Segment::Worker => n += write_u64(ctx.worker, &mut out[n..]),
                Segment::TimeNs => n += write_u64(ctx.time_ns, &mut out[n..]),
                Segment::Key { dist, nth } => n += write_u64(dist.draw(base, *nth), &mut out[n..]),
                Segment::Feed { cells, .. } => {
                    let cell = cells
                        .as_ref()
                        .expect("the plan read every feeder")
                        .cell(ctx.seq);
                    out[n..n + cell.len()].copy_from_slice(cell);
                    n += cell.len();
                }
                Segment::Rand(len) => {
                    for b in &mut out[n..n + len] {
                        *b = ALNUM[rng.usize(..ALNUM.len())];
                    }
                    n += len;
                }
            }
        }
        n
    }
}

/// Writes `v` in decimal at the start of `out`; returns the number of digits.
#[inline]
fn write_u64(mut v: u64, out: &mut [u8]) -> usize {
    let mut tmp = [0u8; U64_DIGITS];
    let mut i = U64_DIGITS;
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let len = U64_DIGITS - i;
    out[..len].copy_from_slice(&tmp[i..]);
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(t: &Template, ctx: Ctx) -> String {
        let mut out = vec![0u8; t.max_len()];
        let mut rng = fastrand::Rng::with_seed(7);
        let n = t.render(&ctx, &mut rng, &mut out);
        String::from_utf8(out[..n].to_vec()).unwrap()
    }

    #[test]
    fn renders_every_placeholder() {
        let t = Template::parse(b"get key:{seq} c={conn} w={worker} t={time_ns}\r\n").unwrap();
        let ctx = Ctx {
            seq: 42,
            conn: 7,
            worker: 1,
            time_ns: 1_700_000_000_000_000_000,
        };
        assert_eq!(
            render(&t, ctx),
            "get key:42 c=7 w=1 t=1700000000000000000\r\n"
        );
        assert!(!t.is_static() && !t.is_fixed_len());
    }

    #[test]
    fn rand_is_seeded_printable_and_fixed_length() {
        let t = Template::parse(b"k{rand:8}").unwrap();
        assert!(t.is_fixed_len());
        let a = render(&t, Ctx::default());
        assert_eq!(a.len(), 9);
        assert!(a[1..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(a, render(&t, Ctx::default()), "same seed, same bytes");
    }

    #[test]
    fn braces_escape_and_errors_name_the_problem() {
        let t = Template::parse(b"{{\"a\":1}}").unwrap();
        assert!(t.is_static());
        assert_eq!(t.static_bytes(), b"{\"a\":1}");
        assert!(
            Template::parse(b"{nope}")
                .unwrap_err()
                .contains("unknown placeholder {nope}")
        );
        assert!(Template::parse(b"{seq").unwrap_err().contains("unclosed"));
        // Found by fuzz/fuzz_targets/mix.rs: a name holding a line break (a payload's
        // `\r\n` unescaped) broke the one-line error in two.
        let e = Template::parse(b"{seqg 1\r\n PING {seq}").unwrap_err();
        assert!(!e.contains(['\r', '\n']), "{e:?}");
        assert!(
            e.contains("unknown placeholder {seqg 1\\r\\n PING {seq}"),
            "{e:?}"
        );
        assert!(Template::parse(b"{rand:0}").is_err());
    }

    #[test]
    fn placeholders_are_found_in_text_taken_once() {
        assert_eq!(placeholder_in(r#"{"name": "u{seq}"}"#), Some("{seq}"));
        assert_eq!(
            placeholder_in(r#"{"k": "{rand:8}", "n": 1}"#),
            Some("{rand:8}")
        );
        assert_eq!(
            placeholder_in(r#"{"k": "{zipf:10:1.1}"}"#),
            Some("{zipf:10:1.1}")
        );
        assert_eq!(placeholder_in(r#"{"name": "world", "n": {"m": 7}}"#), None);
        assert_eq!(placeholder_in("{sequence}"), None);
    }

    #[test]
    fn max_len_bounds_every_rendering() {
        let t = Template::parse(b"{seq}{conn}{worker}{time_ns}{rand:3}x").unwrap();
        let ctx = Ctx {
            seq: u64::MAX,
            conn: u64::MAX,
            worker: u64::MAX,
            time_ns: u64::MAX,
        };
        assert_eq!(render(&t, ctx).len(), t.max_len());
        assert_eq!(write_u64(0, &mut [0u8; 20]), 1);
    }

    #[test]
    fn static_after_is_the_body_when_only_literals_follow_the_blank_line() {
        let t = Template::parse(b"POST /{seq} HTTP/1.1\r\nx: {rand:4}\r\n\r\n").unwrap();
        assert_eq!(
            t.then_literal(b"body").static_after(b"\r\n\r\n"),
            Some(&b"body"[..])
        );
        let t = Template::parse(b"POST / HTTP/1.1\r\n\r\nid={seq}").unwrap();
        assert_eq!(t.static_after(b"\r\n\r\n"), None);
        let t = Template::parse(b"POST / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(t.static_after(b"\r\n\r\n"), Some(&b""[..]));
        assert_eq!(
            Template::parse(b"{seq}").unwrap().static_after(b"\r\n\r\n"),
            None
        );
    }

    fn keys_of(t: &Template, seed: u64, seqs: std::ops::Range<u64>) -> Vec<u64> {
        let mut out = vec![0u8; t.max_len()];
        seqs.map(|seq| {
            let mut rng = crate::request::request_rng(seed, seq);
            let n = t.render(
                &Ctx {
                    seq,
                    ..Ctx::default()
                },
                &mut rng,
                &mut out,
            );
            std::str::from_utf8(&out[..n]).unwrap().parse().unwrap()
        })
        .collect()
    }

    #[test]
    fn zipf_keys_follow_the_law_and_repeat_with_the_seed() {
        let t = Template::parse(b"{zipf:1000:1.1}").unwrap();
        let keys = keys_of(&t, 7, 0..1_000_000);
        let mut count = vec![0u64; 1001];
        for &k in &keys {
            count[k as usize] += 1;
        }
        assert_eq!(count[0], 0, "keys are 1..=N");
        let d = t.key_dists().next().unwrap();
        let norm = d.norm();
        for k in [1, 2, 3, 10, 100] {
            let share = count[k] as f64 / 1e6;
            let want = d.expected_share(k as u64, norm);
            // 1M draws: a binomial share's sd is below 0.04 percentage points here.
            assert!(
                (share - want).abs() < 0.002 + want * 0.02,
                "key {k}: {share} vs {want}"
            );
        }
        assert_eq!(
            keys_of(&t, 7, 500..600),
            keys[500..600],
            "the same seed and seq"
        );
        assert_ne!(keys_of(&t, 8, 0..100), keys[..100], "another seed");
        // A {rand:N} before it draws from the same generator without moving the key.
        let mixed = Template::parse(b"{rand:3}-{zipf:1000:1.1}").unwrap();
        let mut out = vec![0u8; mixed.max_len()];
        let mut rng = crate::request::request_rng(7, 42);
        let n = mixed.render(
            &Ctx {
                seq: 42,
                ..Ctx::default()
            },
            &mut rng,
            &mut out,
        );
        let key: u64 = std::str::from_utf8(&out[4..n]).unwrap().parse().unwrap();
        assert_eq!(key, keys[42]);
    }

    #[test]
    fn uniform_keys_cover_the_range_evenly_and_bad_ones_are_named() {
        let t = Template::parse(b"k{uniform:10}").unwrap();
        let mut out = vec![0u8; t.max_len()];
        let mut count = [0u64; 11];
        for seq in 0..100_000 {
            let mut rng = crate::request::request_rng(1, seq);
            let n = t.render(
                &Ctx {
                    seq,
                    ..Ctx::default()
                },
                &mut rng,
                &mut out,
            );
            let k: usize = std::str::from_utf8(&out[1..n]).unwrap().parse().unwrap();
            count[k] += 1;
        }
        assert_eq!(count[0], 0);
        assert!(
            count[1..].iter().all(|&c| (9_500..=10_500).contains(&c)),
            "{count:?}"
        );
        for (src, want) in [
            (
                "{zipf:0:1.1}",
                "{zipf:0:1.1}: the key count must be between 1",
            ),
            (
                "{zipf:10:0}",
                "{zipf:10:0}: the exponent must be above 0, got \"0\"",
            ),
            ("{zipf:10:-1}", "the exponent must be above 0"),
            ("{zipf:10}", "expected {zipf:N:S}"),
            (
                "{uniform:0}",
                "{uniform:0}: the key count must be between 1",
            ),
            ("{uniform:x}", "the key count must be between 1"),
        ] {
            let e = Template::parse(src.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{src}: {e}");
        }
    }

    #[test]
    fn feeders_read_lines_and_csv_columns_and_name_what_is_wrong() {
        let f = Feed::lines(b"a\r\nbb\n\nc\n").unwrap();
        let cells: Vec<&[u8]> = (0..5).map(|s| f.cell(s)).collect();
        assert_eq!(cells, [&b"a"[..], b"bb", b"", b"c", b"a"]);
        assert_eq!(f.longest, 2);
        let c = Feed::csv_column(b"id,name\n1,\"x,y\"\n2,z\n", "name").unwrap();
        assert_eq!(
            (c.cell(0), c.cell(1), c.cell(2)),
            (&b"x,y"[..], &b"z"[..], &b"x,y"[..])
        );
        assert_eq!(Feed::lines(b"").unwrap_err(), "has no lines");
        assert_eq!(
            Feed::csv_column(b"id\n", "id").unwrap_err(),
            "has no rows below its header"
        );
        assert_eq!(
            Feed::csv_column(b"id,name\n1,a\n", "nme").unwrap_err(),
            "has no column \"nme\" in its header (id, name)"
        );
        assert_eq!(
            feed_paths("GET /{line:/a/b.txt}/{seq}/{csv:/c:d.csv:col}"),
            [std::path::PathBuf::from("/a/b.txt"), "/c:d.csv".into()]
        );
        let mut t = Template::parse(b"{line:/f}").unwrap();
        assert!(t.resolve_feeds(&mut |_| Ok(b"x\n".to_vec())).is_ok());
        assert_eq!(t.max_len(), 1);
        let mut t = Template::parse(b"{line:/f}").unwrap();
        let e = t.resolve_feeds(&mut |_| Err("gone".into())).unwrap_err();
        assert_eq!(e, "cannot read /f: gone");
    }
}
