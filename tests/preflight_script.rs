//! scripts/preflight.sh against fixture files (PREFLIGHT_ROOT): each FAIL path.
use std::path::Path;
use std::process::Command;

fn fixture(port_range: &str, online: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let w = |p: &str, v: &str| {
        let f = d.path().join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, v).unwrap();
    };
    w("proc/sys/fs/nr_open", "1048576\n");
    w("proc/sys/net/ipv4/ip_local_port_range", port_range);
    w("sys/devices/system/cpu/online", online);
    d
}

fn preflight(root: &Path, args: &[&str]) -> (i32, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/preflight.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .env("PREFLIGHT_ROOT", root)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn passes_a_plan_that_fits() {
    let d = fixture("32768\t60999\n", "0-3\n");
    let (code, out) = preflight(d.path(), &["--connections", "100", "--cores", "0-3"]);
    assert_eq!(code, 0, "{out}");
    // Every check ran and passed (an empty output would not do).
    for check in ["PASS  fd.limit", "PASS  ports", "PASS  cores.online"] {
        assert!(out.contains(check), "{check} missing in {out}");
    }
    assert!(out.lines().all(|l| l.starts_with("PASS")), "{out}");
}

#[test]
fn too_few_ports_fails_with_the_fix() {
    let d = fixture("60000\t60099\n", "0-3\n");
    let (code, out) = preflight(d.path(), &["--connections", "1000"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL  ports") && out.contains("ip_local_port_range"),
        "{out}"
    );
}

#[test]
fn offline_core_fails() {
    let d = fixture("32768\t60999\n", "0-1\n");
    let (code, out) = preflight(d.path(), &["--cores", "0,3"]);
    assert_eq!(code, 1);
    assert!(out.contains("cores 3 are not online"), "{out}");
}

#[test]
fn fd_limit_beyond_hard_fails() {
    let d = fixture("1024\t65535\n", "0\n");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/preflight.sh");
    let cmd = format!("ulimit -Sn 100 && ulimit -Hn 200 && exec bash {script} --connections 1000");
    let out = Command::new("sh")
        .args(["-c", &cmd])
        .env("PREFLIGHT_ROOT", d.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  fd.limit") && text.contains("ulimit -Hn 1064"),
        "{text}"
    );
}
