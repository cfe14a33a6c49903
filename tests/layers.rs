//! The layer order of `src/lib.rs`, enforced: its `//!` doc states the order the
//! top-level modules import each other in ("Imports point one way ... leaf helpers ->
//! cli -> ... -> cmd"), and this test reads that sentence, finds every `crate::X` path
//! (and `super::` path climbing to the crate root) in the code of every file under
//! src/, and fails on each one that points up the order, naming the file, the line and
//! the rule. A top-level module the sentence does not place fails it too, so the
//! stated order cannot drift from the tree (as `tests/layout.rs` does for
//! docs/layout.md).
//!
//! Modules of one layer may use each other (`tools/layers.py` finds cycles). Test
//! code is left out (`tests.rs`, `*_tests.rs`, `testkit.rs`, `#[cfg(test)]` items): a
//! unit test may drive its module from above. Comments, strings and character
//! literals are blanked before the search, so a doc link such as
//! [`crate::engine::run_loop`] is not an import.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The top-level modules `src/lib.rs` declares.
fn modules(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

/// Each top-level module's rank in the order stated by lib.rs's `//!` paragraph that
/// begins "Imports point one way": layers separated by `->`, each naming its modules
/// in backticks. Panics when the paragraph is missing or a module is unplaced.
fn ranks(lib: &str, modules: &[String]) -> BTreeMap<String, usize> {
    let doc: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!").map(str::trim))
        .collect();
    let start = doc
        .iter()
        .position(|l| l.starts_with("Imports point one way"))
        .expect("src/lib.rs's //! doc states the layer order (\"Imports point one way ...\")");
    let paragraph = doc[start..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let mut ranks = BTreeMap::new();
    for (rank, layer) in paragraph.split("->").enumerate() {
        for name in layer.split('`').skip(1).step_by(2) {
            if modules.iter().any(|m| m == name) {
                let before = ranks.insert(name.to_string(), rank);
                assert!(
                    before.is_none(),
                    "`{name}` is placed twice in src/lib.rs's order"
                );
            }
        }
    }
    let unplaced: Vec<&String> = modules.iter().filter(|m| !ranks.contains_key(*m)).collect();
    assert!(
        unplaced.is_empty(),
        "src/lib.rs's layer order does not place {unplaced:?}: name each top-level module \
         in the layer it belongs to (\"Imports point one way ...\")"
    );
    ranks
}

/// `text` with comments, string literals and character literals replaced by spaces
/// (newlines kept, so offsets and line numbers stay).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(end) = raw_string_end(b, i) {
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{7f}', '{'), not a lifetime ('a).
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter()
                    .skip(2)
                    .position(|&c| c == b'\'')
                    .map(|n| i + n + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(i + ch + 2)
            };
            if let Some(end) = end {
                blank(&mut out, i, end);
                i = end;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 (only ASCII is written)")
}

/// The end of a raw string (`r"..."`, `br#"..."#`) starting at `i`, if one does.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let mut j = i + usize::from(b[i] == b'b');
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let n = b[j + 1..].windows(close.len()).position(|w| w == close)?;
    Some(j + 1 + n + close.len())
}

/// `code` (from [`code_only`]) with every `#[cfg(test)]` item blanked.
fn without_tests(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(n) = code[from..].find("#[cfg(test)]") {
        let start = from + n;
        let b = code.as_bytes();
        let (mut i, mut depth, mut end) = (start + "#[cfg(test)]".len(), 0i32, b.len());
        while i < b.len() {
            match b[i] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        for c in &mut out[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(out).expect("ASCII blanks")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The identifiers a path names right after `at` (`name`, or each item of a
/// `{a, b::c}` group).
fn names_at(code: &str, at: usize) -> Vec<String> {
    let rest = code[at..].trim_start();
    let ident = |s: &str| {
        let s = s.trim_start();
        let n = s.bytes().take_while(|&c| is_ident(c)).count();
        s[..n].to_string()
    };
    if let Some(group) = rest.strip_prefix('{') {
        let (mut depth, mut items, mut item_start) = (0, Vec::new(), 0);
        for (k, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&group[item_start..k]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[item_start..k]);
                    item_start = k + 1;
                }
                _ => {}
            }
        }
        items
            .into_iter()
            .map(ident)
            .filter(|n| !n.is_empty())
            .collect()
    } else {
        vec![ident(rest)]
    }
}

/// The top-level modules `code` reaches, with the line of each path: `crate::X`, and
/// `super::` chains that climb from `module` (the file's module path) to the root.
fn imports(code: &str, module: &[String]) -> Vec<(usize, String, String)> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        for name in names_at(code, at + "crate::".len()) {
            let path = format!("crate::{name}");
            out.push((line_of(at), name, path));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if at > 0 && (is_ident(b[at - 1]) || code[..at].ends_with("super::")) {
            continue;
        }
        let mut end = at;
        let mut ups = 0;
        while code[end..].starts_with("super::") {
            ups += 1;
            end += "super::".len();
        }
        if ups >= module.len() {
            for name in names_at(code, end) {
                let path = format!("{}{name}", "super::".repeat(ups));
                out.push((line_of(at), name, path));
            }
        }
    }
    out
}

/// Every `.rs` file under `dir` but test-only ones, as (path relative to src/, text).
fn sources(dir: &Path, src: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).expect("read src/") {
        let p = e.expect("dir entry").path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            sources(&p, src, out);
        } else if name.ends_with(".rs")
            && !matches!(name.as_str(), "tests.rs" | "testkit.rs")
            && !name.ends_with("_tests.rs")
        {
            let rel = p
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((
                rel,
                std::fs::read_to_string(&p).expect("read a source file"),
            ));
        }
    }
}

/// The module path of a file relative to src/ (`engine/tcp/mod.rs` -> engine::tcp).
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Every import under `src` that points up the order of `lib`, as lines to print.
fn upward_imports(src: &Path, lib: &str) -> Vec<String> {
    let modules = modules(lib);
    let ranks = ranks(lib, &modules);
    let mut files = Vec::new();
    sources(src, src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for (rel, text) in &files {
        let module = module_path(rel);
        let Some(me) = ranks.get(&module[0]) else {
            continue; // lib.rs and main.rs: the crate root and the binary
        };
        let code = without_tests(&code_only(text));
        for (line, name, path) in imports(&code, &module) {
            if let Some(&theirs) = ranks.get(&name)
                && theirs > *me
            {
                bad.push(format!(
                    "src/{rel}:{line}: `{path}`: {} (layer {me}) may not use {name} (layer {theirs})",
                    module[0]
                ));
            }
        }
    }
    bad
}

#[test]
fn imports_point_down_the_layer_order_of_lib_rs() {
    let src = root().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read src/lib.rs");
    let bad = upward_imports(&src, &lib);
    assert!(
        bad.is_empty(),
        "{} import(s) point up the layer order stated in src/lib.rs; move the helper down \
         to the lower layer instead (docs/layout.md):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_in_code_only() {
    let code = code_only(
        "use crate::{units::fmt_ns, limits};\n\
         // crate::report in a comment\n\
         /* crate::cmd */ let s = \"crate::slo\"; let c = '{';\n\
         fn f<'a>(x: &'a str) { crate::engine::run(); super::super::sink::X; }\n\
         let r = r#\"crate::cmd\"#;\n",
    );
    let found: Vec<(usize, String)> = imports(&code, &["metrics".into(), "host".into()])
        .into_iter()
        .map(|(l, n, _)| (l, n))
        .collect();
    let want = [(1, "units"), (1, "limits"), (4, "engine"), (4, "sink")];
    assert_eq!(found, want.map(|(l, n)| (l, n.to_string())));
    let tests = without_tests(&code_only(
        "use crate::units;\n#[cfg(test)]\nmod tests {\n    use crate::cmd;\n    fn f() { let c = '}'; }\n}\n#[cfg(test)]\nuse crate::slo;\nuse crate::clock;\n",
    ));
    let names: Vec<String> = imports(&tests, &["units".into()])
        .into_iter()
        .map(|(_, n, _)| n)
        .collect();
    assert_eq!(names, ["units", "clock"]);
}

#[test]
fn the_order_is_read_from_the_doc_and_places_every_module() {
    let lib = "//! Intro.\n//!\n//! Imports point one way: leaf (`a`, [`b`]) -> [`c`] (with `c::x`) -> `d`.\n\
               //! A helper belongs low.\n//!\n//! Not `d` -> `a`.\npub mod a;\nmod b;\npub mod c;\npub mod d;\n";
    let mods = modules(lib);
    assert_eq!(mods, ["a", "b", "c", "d"]);
    let r = ranks(lib, &mods);
    assert_eq!((r["a"], r["b"], r["c"], r["d"]), (0, 0, 1, 2));
    let unplaced = std::panic::catch_unwind(|| {
        ranks(
            &format!("{lib}pub mod e;\n"),
            &[mods.clone(), vec!["e".into()]].concat(),
        )
    });
    assert!(
        unplaced.is_err(),
        "a module missing from the order fails the test"
    );
}
