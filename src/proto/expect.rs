//! `--expect`: assertions on HTTP/1.1 and HTTP/2 replies, so a reply that parses but is
//! not the answer asked for (a circuit breaker's fallback body served with 200) is an
//! error of kind `assertion`, not a success.
//!
//! Forms (several `--expect` flags: every one must hold; each may start with `!`,
//! which turns it round, and with `ENTRY=`, which holds only the replies to that
//! `--mix` entry to it: `search=regex:"hits":[1-9]`):
//!
//! | form              | holds when                                                  |
//! |-------------------|-------------------------------------------------------------|
//! | `status:CODES`    | the status is in CODES: codes and classes, `200,204`, `2xx` |
//! | `contains:TEXT`   | the body holds the bytes TEXT (escapes `\r \n \t \0 \\ \xHH`) |
//! | `regex:RE`        | a match of RE (`regex` crate syntax, over bytes) is in the body |
//!
//! Everything is compiled once, when the plan is built. Each worker holds its own copy
//! ([`Clone`] gives each regex its own cache pool, owned by the first thread that uses
//! it: the worker, whose cache is made at its start by [`Expectations::warm`]), so no
//! two workers share a lock and no reply takes one. `status:` and `contains:` never
//! allocate; a regex's lazy DFA adds the states it meets to its cache during the first
//! replies, within [`EXPECT_DFA_BYTES_MAX`] per worker, and then matches without
//! allocating.
//!
//! What a body assertion sees: the bytes after the final response's header block, as
//! they came on the wire (a chunked body with its chunk-size lines). The engine keeps a
//! response whole while body assertions exist, up to half the connection's receive
//! buffer; a response that outgrows it is streamed as without `--expect`, and its body
//! assertions are *unchecked*: the reply is not failed, but counted as unchecked
//! ([`Verdict::Unchecked`]), never silently passed. Status assertions always apply.

use super::ErrorStatus;
use crate::limits::{
    EXPECT_DFA_BYTES_MAX, EXPECT_MAX, EXPECT_REGEX_BYTES_MAX, EXPECT_TEXT_BYTES_MAX,
};
use memchr::memmem::Finder;
use std::fmt;

#[derive(Clone)]
enum Check {
    Status(ErrorStatus),
    Contains(Finder<'static>),
    Regex(regex::bytes::Regex),
}

/// One assertion: its check, whether it is turned round, the `--mix` entry it is
/// about (`None`: every request), and its text as given.
#[derive(Clone)]
pub struct Assertion {
    check: Check,
    negated: bool,
    entry: Option<u16>,
    text: String,
}

impl Assertion {
    /// The assertion as the user wrote it (the report names it so).
    pub fn text(&self) -> &str {
        &self.text
    }

    fn on_body(&self) -> bool {
        !matches!(self.check, Check::Status(_))
    }

    /// Whether the reply passes; `None` when the assertion needs the body and it is not
    /// at hand.
    #[inline]
    fn holds(&self, status: u16, body: Option<&[u8]>) -> Option<bool> {
        let found = match &self.check {
            Check::Status(set) => set.contains(status),
            Check::Contains(f) => f.find(body?).is_some(),
            Check::Regex(re) => re.is_match(body?),
        };
        Some(found != self.negated)
    }
}

impl fmt::Debug for Assertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Assertion({})", self.text)
    }
}

/// What one reply made of the assertions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every assertion held.
    Pass,
    /// The assertion at this index (the first that failed, in the order given) did not
    /// hold.
    Fail(u8),
    /// No assertion failed, but a body assertion could not be checked (the body was not
    /// kept whole).
    Unchecked,
}

/// Every `--expect` of a run, in the order given (empty: nothing asserted).
#[derive(Clone, Debug, Default)]
pub struct Expectations {
    list: Vec<Assertion>,
}

impl Expectations {
    /// Parses each spec; `entries` are the `--mix` entries' names (empty without a mix),
    /// which `NAME=ASSERTION` may name. The error is one line without the flag name.
    pub fn parse<S: AsRef<str>>(specs: &[S], entries: &[&str]) -> Result<Expectations, String> {
        if specs.len() > EXPECT_MAX {
            return Err(format!(
                "at most {EXPECT_MAX} assertions, got {}",
                specs.len()
            ));
        }
        let list = specs
            .iter()
            .map(|s| scoped(s.as_ref(), entries))
            .collect::<Result<_, _>>()?;
        Ok(Expectations { list })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn assertions(&self) -> &[Assertion] {
        &self.list
    }

    /// Whether any assertion reads the body (the engine then keeps responses whole).
    pub fn needs_body(&self) -> bool {
        self.list.iter().any(Assertion::on_body)
    }

    /// Runs every regex once on this thread, so its cache is made (and its pool owned)
    /// here, before the first reply.
    pub fn warm(&self) {
        for a in &self.list {
            if let Check::Regex(re) = &a.check {
                let _ = re.is_match(b"");
            }
        }
    }

    /// The verdict on a reply to a request of mix entry `entry` (0 without a mix), with
    /// `status` and `body` (`None`: not at hand).
    #[inline]
    pub fn check(&self, entry: u16, status: u16, body: Option<&[u8]>) -> Verdict {
        let mut unchecked = false;
        for (i, a) in self.list.iter().enumerate() {
            if a.entry.is_some_and(|e| e != entry) {
                continue;
            }
            match a.holds(status, body) {
                Some(true) => {}
                Some(false) => return Verdict::Fail(i as u8),
                None => unchecked = true,
            }
        }
        if unchecked {
            Verdict::Unchecked
        } else {
            Verdict::Pass
        }
    }
}

const FORMS: &str = "expected status:CODES, contains:TEXT or regex:RE (each may start with !)";

/// `[ENTRY=]ASSERTION`: an `=` before the first `:` names the `--mix` entry (no form has
/// one there, so `contains:a=b` is about every request).
fn scoped(spec: &str, entries: &[&str]) -> Result<Assertion, String> {
    let head = spec.split(':').next().unwrap_or(spec);
    let Some((name, rest)) = head.split_once('=').map(|(n, _)| (n, &spec[n.len() + 1..])) else {
        return parse_one(spec, spec);
    };
    if entries.is_empty() {
        return Err(format!(
            "{spec:?}: an assertion about entry {name:?} needs --mix"
        ));
    }
    let Some(i) = entries.iter().position(|e| *e == name) else {
        return Err(format!(
            "{spec:?}: no --mix entry named {name:?} (entries: {})",
            entries.join(", ")
        ));
    };
    let mut a = parse_one(rest, spec)?;
    a.entry = Some(i as u16);
    Ok(a)
}

/// One assertion, `spec` without its entry; `text` is how the user wrote it.
fn parse_one(spec: &str, text: &str) -> Result<Assertion, String> {
    let (negated, rest) = match spec.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, spec),
    };
    let Some((form, value)) = rest.split_once(':') else {
        return Err(format!("{FORMS}, got {spec:?}"));
    };
    if value.is_empty() {
        return Err(format!("{spec:?}: {form}: needs a value after the colon"));
    }
    let check = match form {
        "status" => {
            let set: ErrorStatus = value.parse().map_err(|e| format!("{spec:?}: {e}"))?;
            if set == ErrorStatus::NONE {
                return Err(format!("{spec:?}: status:none can never hold"));
            }
            Check::Status(set)
        }
        "contains" => {
            let bytes = super::unescape(value).map_err(|e| format!("{spec:?}: {e}"))?;
            if bytes.len() > EXPECT_TEXT_BYTES_MAX {
                return Err(format!(
                    "{spec:?}: text longer than {EXPECT_TEXT_BYTES_MAX} bytes"
                ));
            }
            Check::Contains(Finder::new(&bytes).into_owned())
        }
        "regex" => {
            let re = regex::bytes::RegexBuilder::new(value)
                .size_limit(EXPECT_REGEX_BYTES_MAX)
                .dfa_size_limit(EXPECT_DFA_BYTES_MAX)
                .build()
                .map_err(|e| format!("{spec:?}: bad regex: {}", one_line(&e.to_string())))?;
            Check::Regex(re)
        }
        _ => return Err(format!("unknown form {form:?}: {FORMS}")),
    };
    Ok(Assertion {
        check,
        negated,
        entry: None,
        text: text.to_string(),
    })
}

/// The regex crate's multi-line error (pattern, caret, message) as one line: its last
/// line is the message.
fn one_line(e: &str) -> String {
    let last = e.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(e);
    last.trim().trim_start_matches("error: ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(spec: &str) -> Expectations {
        Expectations::parse(&[spec], &[]).unwrap()
    }

    #[test]
    fn every_form_parses_and_checks() {
        let ok = Some(&b"{\"ok\":true}"[..]);
        let fallback = Some(&b"{\"fallback\":true}"[..]);
        assert_eq!(one("status:200").check(0, 200, ok), Verdict::Pass);
        assert_eq!(one("status:200").check(0, 201, ok), Verdict::Fail(0));
        assert_eq!(one("status:2xx,304").check(0, 304, None), Verdict::Pass);
        assert_eq!(one("status:2xx").check(0, 404, None), Verdict::Fail(0));
        assert_eq!(one("!status:5xx").check(0, 503, None), Verdict::Fail(0));
        assert_eq!(one("contains:\"ok\"").check(0, 200, ok), Verdict::Pass);
        assert_eq!(
            one("contains:\"ok\"").check(0, 200, fallback),
            Verdict::Fail(0)
        );
        assert_eq!(
            one("!contains:fallback").check(0, 200, fallback),
            Verdict::Fail(0)
        );
        assert_eq!(one("!contains:fallback").check(0, 200, ok), Verdict::Pass);
        assert_eq!(one(r"contains:\x7b").check(0, 200, ok), Verdict::Pass);
        assert_eq!(
            one(r#"regex:^\{"ok":true\}$"#).check(0, 200, ok),
            Verdict::Pass
        );
        assert_eq!(
            one(r#"regex:^\{"ok""#).check(0, 200, fallback),
            Verdict::Fail(0)
        );
        assert_eq!(
            one("!regex:fall+back").check(0, 200, fallback),
            Verdict::Fail(0)
        );
        // Bytes that are not UTF-8 are a body like any other.
        assert_eq!(
            one("regex:a.c").check(0, 200, Some(b"\xffa\xfec")),
            Verdict::Fail(0)
        );
        assert_eq!(
            one("regex:(?-u)a.c").check(0, 200, Some(b"\xffa\xfec")),
            Verdict::Pass
        );
    }

    #[test]
    fn the_first_failing_assertion_is_named_and_a_missing_body_is_unchecked() {
        let e = Expectations::parse(&["status:200", "contains:ok", "regex:true"], &[]).unwrap();
        assert_eq!(e.len(), 3);
        assert!(e.needs_body());
        assert!(!one("status:2xx").needs_body());
        assert_eq!(e.check(0, 200, Some(b"ok true")), Verdict::Pass);
        assert_eq!(e.check(0, 200, Some(b"ok false")), Verdict::Fail(2));
        assert_eq!(e.check(0, 500, Some(b"nothing")), Verdict::Fail(0));
        assert_eq!(e.check(0, 200, Some(b"nothing")), Verdict::Fail(1));
        // Without the body the status still decides a failure, never a pass.
        assert_eq!(e.check(0, 200, None), Verdict::Unchecked);
        assert_eq!(e.check(0, 404, None), Verdict::Fail(0));
        assert_eq!(e.assertions()[1].text(), "contains:ok");
        assert_eq!(Expectations::default().check(0, 500, None), Verdict::Pass);
    }

    #[test]
    fn bad_assertions_are_one_line_errors() {
        for (bad, says) in [
            ("status", "expected status:CODES"),
            ("body:~x", "unknown form \"body\""),
            ("status:", "needs a value"),
            ("status:600", "unknown status"),
            ("status:none", "can never hold"),
            ("regex:(", "bad regex"),
            ("regex:a{99999999}", "bad regex"),
            (r"contains:\xZZ", "contains:"),
            ("!", "expected status:CODES"),
        ] {
            let e = Expectations::parse(&[bad], &[]).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{bad:?}: {e}");
        }
        let nine = vec!["status:200"; EXPECT_MAX + 1];
        assert!(
            Expectations::parse(&nine, &[])
                .unwrap_err()
                .contains("at most 8")
        );
        let long = format!("contains:{}", "x".repeat(EXPECT_TEXT_BYTES_MAX + 1));
        assert!(
            Expectations::parse(&[long], &[])
                .unwrap_err()
                .contains("longer than")
        );
    }

    #[test]
    fn an_assertion_may_be_about_one_mix_entry() {
        let entries = ["home", "search"];
        let e = Expectations::parse(
            &[
                "status:2xx",
                "search=regex:hits",
                "home=!contains:fallback",
                "contains:a=b",
            ],
            &entries,
        )
        .unwrap();
        assert_eq!(e.assertions()[1].text(), "search=regex:hits");
        assert_eq!(e.assertions()[3].text(), "contains:a=b");
        // Entry 0 (home) is not held to search's regex, nor search to home's.
        assert_eq!(e.check(0, 200, Some(b"a=b")), Verdict::Pass);
        assert_eq!(e.check(1, 200, Some(b"a=b")), Verdict::Fail(1));
        assert_eq!(e.check(1, 200, Some(b"hits a=b fallback")), Verdict::Pass);
        assert_eq!(
            e.check(0, 200, Some(b"hits a=b fallback")),
            Verdict::Fail(2)
        );
        assert_eq!(e.check(0, 500, Some(b"a=b")), Verdict::Fail(0));
        for (bad, says) in [
            (
                "blog=status:200",
                "no --mix entry named \"blog\" (entries: home, search)",
            ),
            ("home=", "expected status:CODES"),
            ("home=body:x", "unknown form"),
        ] {
            let err = Expectations::parse(&[bad], &entries).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        let err = Expectations::parse(&["home=status:200"], &[]).unwrap_err();
        assert!(err.contains("needs --mix"), "{err}");
    }

    #[test]
    fn a_clone_checks_alike() {
        let e = Expectations::parse(&["regex:^ok", "!contains:no"], &[]).unwrap();
        let c = e.clone();
        c.warm();
        for body in [&b"ok"[..], b"ok no", b"nope"] {
            assert_eq!(e.check(0, 200, Some(body)), c.check(0, 200, Some(body)));
        }
    }
}
