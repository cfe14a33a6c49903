//! Issue 13: the Kubernetes Indexed Job validates offline. No cluster is reachable
//! here: scripts/k8s-run.sh renders the Job, `kubernetes-validate` (PyPI) checks it
//! against the Kubernetes schemas, and tests/deploy/k8s_check.py checks the shape the
//! docs promise and runs the pod's wrapper script with a stand-in blaster.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Whether `tool` runs; when not, a greppable SKIP line (a failure under CI, where
/// scripts/test.sh installs it).
fn have(tool: &str, args: &[&str]) -> bool {
    let ok = Command::new(tool)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is missing under CI: scripts/test.sh installs it"
        );
        common::skip(
            "deploy_k8s",
            &format!("{tool} not installed (pip install kubernetes-validate pyyaml)"),
        );
    }
    ok
}

fn render(dir: &Path, shards: &str, extra: &[&str]) -> std::path::PathBuf {
    let mut run = vec![
        "--target",
        "10.0.0.5:9000",
        "--rate",
        "300000",
        "--connections",
        "3000",
        "--duration",
        "60s",
        "--payload",
        "GET \"x\" \\ | & $HOME",
    ];
    run.extend_from_slice(extra);
    render_run(dir, shards, &run)
}

/// The Job `scripts/k8s-run.sh --render-only` renders for `shards` pods running
/// `blaster run RUN...`, written into `dir`.
fn render_run(dir: &Path, shards: &str, run: &[&str]) -> std::path::PathBuf {
    let mut args = vec![
        "--render-only",
        "--shards",
        shards,
        "--image",
        "registry.example/blaster:test",
        "--",
    ];
    args.extend_from_slice(run);
    let out = Command::new(format!("{ROOT}/scripts/k8s-run.sh"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join(format!("job-{shards}.yaml"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

fn validate(path: &Path, version: &str) -> (bool, String) {
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "-k", version])
        .arg(path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.contains("passed"), text)
}

#[test]
fn the_indexed_job_validates_and_its_wrapper_runs() {
    if !have("kubernetes-validate", &["--version"]) || !have("python3", &["-c", "import yaml"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A stand-in blaster: writes its arguments, one per line, as the "JSON" and exits 3.
    let fake = dir.path().join("bin");
    std::fs::create_dir(&fake).unwrap();
    let stub = fake.join("blaster");
    std::fs::write(
        &stub,
        "#!/bin/sh\nout=\nprev=\nfor a in \"$@\"; do [ \"$prev\" = --json ] && out=$a; prev=$a; done\n\
         printf '%s\\n' \"$@\" > \"$out\"\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    for shards in ["1", "3", "64"] {
        let job = render(dir.path(), shards, &[]);
        // 1.33: backoffLimitPerIndex is GA there; and the validator's newest schemas.
        for version in ["1.33.0", "1.37.0"] {
            let (ok, text) = validate(&job, version);
            assert!(ok, "N={shards} k8s {version}: {text}");
        }
        let out = Command::new("python3")
            .arg(format!("{ROOT}/tests/deploy/k8s_check.py"))
            .arg(&job)
            .arg(shards)
            .arg(&fake)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "N={shards}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A frames fleet (issue 36): the same Job, each pod's blaster given its shard of
    // the rooms (`--shard I/N`, one --start-at) and the whole run's frames flags.
    let frames = render_run(
        dir.path(),
        "3",
        &[
            "--target",
            "10.0.0.5:9000",
            "--workload",
            "frames",
            "--connections",
            "3000",
            "--room-size",
            "10",
            "--tick",
            "33ms",
            "--duration",
            "60s",
        ],
    );
    for version in ["1.33.0", "1.37.0"] {
        let (ok, text) = validate(&frames, version);
        assert!(ok, "frames k8s {version}: {text}");
    }
    let out = Command::new("python3")
        .arg(format!("{ROOT}/tests/deploy/k8s_check.py"))
        .arg(&frames)
        .arg("3")
        .arg(&fake)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "frames: {text}");
    let job = std::fs::read_to_string(&frames).unwrap();
    assert!(
        job.contains(r#""--workload", "frames""#) && job.contains(r#""--room-size", "10""#),
        "{job}"
    );
    // The validator can say no: a misspelt field and a wrong type are refused.
    let job = std::fs::read_to_string(render(dir.path(), "3", &[])).unwrap();
    for (from, to) in [
        (
            "completionMode: Indexed",
            "completionMode: Indexed\n  completion: 3",
        ),
        ("parallelism: 3", "parallelism: three"),
    ] {
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, job.replacen(from, to, 1)).unwrap();
        let (ok, text) = validate(&bad, "1.33.0");
        assert!(!ok, "{to:?} passed: {text}");
    }
}

#[test]
fn the_wrapper_refuses_per_pod_flags_and_bad_counts() {
    let run = |args: &[&str]| {
        Command::new(format!("{ROOT}/scripts/k8s-run.sh"))
            .args(args)
            .output()
            .unwrap()
    };
    for (args, needle) in [
        (
            &[
                "--render-only",
                "--shards",
                "0",
                "--image",
                "i",
                "--",
                "--rate",
                "1",
            ][..],
            "--shards: must be between 1 and 10000",
        ),
        (
            &[
                "--render-only",
                "--shards",
                "2",
                "--image",
                "i",
                "--",
                "--shard",
                "0/2",
            ][..],
            "--shard is set per pod by this script",
        ),
        (
            &["--render-only", "--shards", "2", "--", "--rate", "1"][..],
            "--image: required",
        ),
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
