//! docs/layout.md is generated from the tree: every `src/**/*.rs`, sorted, with the
//! first sentence of its `//!` doc. The test fails when a file in src/ is missing from
//! it, when it lists a file that no longer exists, or when a file's line is stale, and
//! prints the command that regenerates it:
//!
//! ```text
//! BLASTER_WRITE_LAYOUT=1 cargo test --profile assert --test layout
//! ```
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const REGENERATE: &str = "BLASTER_WRITE_LAYOUT=1 cargo test --profile assert --test layout";

const HEADER: &str = "\
# Layout

The source tree, file by file: every `src/**/*.rs` with the first sentence of its `//!`
doc. Generated, do not edit by hand: change the file's `//!` doc and run
`BLASTER_WRITE_LAYOUT=1 cargo test --profile assert --test layout` (`tests/layout.rs`
fails when this list and the tree disagree).

Imports point one way, each layer using only the layers before it: leaf helpers
(`units`, `limits`, `bounded`, `outcome`, `diagnosis`, `console`, `clock`,
`wallclock`, `threads`, `ports`) -> the command line (`cli`) -> `proto`, `request`,
`schedule`, `transport` (TLS) -> `engine` (the per-worker recorder, `engine/recorder.rs`, lives here
because the worker loops write it; `metrics` re-exports it) -> `metrics` -> `sink` ->
`run_plan` -> `report` -> `slo` -> the commands (`cmd/`: one module per subcommand,
`cmd/mod.rs` dispatches). `tests/layers.rs` reads this order from `src/lib.rs` and fails
on an import that points up it.

| file | what it is |
|---|---|
";

const FOOTER: &str = "
Outside src/: `tests/` (end-to-end tests running the real binary; `tests/common/` their
helpers), `fuzz/` (cargo-fuzz targets), `bench/` (side-by-side benchmarks), `scripts/`
(`preflight.sh`, `tune.sh`, `k8s-run.sh`, `test.sh`), `deploy/` (Kubernetes, Ansible,
Grafana, Prometheus), `sysctl/` (the tuning profile). See [testing.md](testing.md).
";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, as paths relative to the crate root, sorted.
fn sources(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read src/") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root()).expect("under the crate root");
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out
}

/// The first sentence of a file's leading `//!` paragraph, on one line, with `|`
/// escaped for the table.
fn summary(text: &str) -> String {
    let mut para = String::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("//!") else {
            break;
        };
        let rest = rest.trim();
        if rest.is_empty() {
            break;
        }
        if !para.is_empty() {
            para.push(' ');
        }
        para.push_str(rest);
    }
    if para.is_empty() {
        return "(no `//!` doc)".to_string();
    }
    // A sentence ends at ". " before a capital letter, a backquote or a link, or at the end.
    let bytes = para.as_bytes();
    let end = (0..bytes.len().saturating_sub(2))
        .find(|&i| {
            bytes[i] == b'.'
                && bytes[i + 1] == b' '
                && (bytes[i + 2].is_ascii_uppercase() || matches!(bytes[i + 2], b'`' | b'['))
        })
        .map_or(para.len(), |i| i + 1);
    para[..end].replace('|', "\\|")
}

fn render(files: &BTreeSet<String>) -> String {
    let mut s = HEADER.to_string();
    for f in files {
        let text = std::fs::read_to_string(root().join(f)).expect("read source");
        s.push_str(&format!("| `{f}` | {} |\n", summary(&text)));
    }
    s.push_str(FOOTER);
    s
}

/// The files docs/layout.md lists: the first cell of each table row.
fn listed(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `src/"))
        .filter_map(|l| l.split_once('`'))
        .map(|(path, _)| format!("src/{path}"))
        .collect()
}

#[test]
fn layout_md_lists_every_source_file_and_only_those() {
    let files = sources(&root().join("src"));
    let expected = render(&files);
    let path = root().join("docs/layout.md");
    if std::env::var_os("BLASTER_WRITE_LAYOUT").is_some() {
        std::fs::write(&path, &expected).expect("write docs/layout.md");
        return;
    }
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let have = listed(&doc);
    let missing: Vec<_> = files.difference(&have).collect();
    let gone: Vec<_> = have.difference(&files).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "docs/layout.md is out of date: missing {missing:?}, lists files that do not \
         exist {gone:?}; regenerate it with: {REGENERATE}"
    );
    let stale: Vec<_> = doc
        .lines()
        .zip(expected.lines())
        .filter(|(a, b)| a != b)
        .take(3)
        .collect();
    assert!(
        doc == expected,
        "docs/layout.md differs from the tree's `//!` docs (first lines that differ, \
         have vs want: {stale:?}); regenerate it with: {REGENERATE}"
    );
}

#[test]
fn a_summary_is_the_first_sentence_of_the_module_doc() {
    let text = "//! One thing. Then more\n//! on a second line.\n//!\n//! Later.\nuse x;\n";
    assert_eq!(summary(text), "One thing.");
    assert_eq!(
        summary("//! a | b, e.g. this\n//! and that\n"),
        "a \\| b, e.g. this and that"
    );
    assert_eq!(summary("use x;\n"), "(no `//!` doc)");
    let doc = "| `src/a.rs` | x |\n| `src/b/c.rs` | y |\n| file | what |\n";
    let want: BTreeSet<String> = ["src/a.rs", "src/b/c.rs"].map(String::from).into();
    assert_eq!(listed(doc), want);
}
