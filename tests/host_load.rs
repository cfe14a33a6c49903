//! The generator proves it is not the bottleneck (issue 6): a hog on the generator's
//! core shows up as a core-load warning, and a rate-limited link in network namespaces
//! of the test's own is reported as NIC-saturated.
#![allow(clippy::too_many_lines)] // a test scenario reads top to bottom: see Cargo.toml [lints]
mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_hog_on_the_generator_core_raises_the_core_load_warning() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let (_d, path) = tmp_json();
    let args = [
        "run",
        "--target",
        &sink.addr,
        "--cores",
        "0",
        "--rate",
        "5000",
        "--duration",
        "3s",
        "--json",
        path.to_str().unwrap(),
    ];
    let _hog = Hog::on_core(0);
    let out = run(&args, Duration::from_secs(30));
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
    assert!(f(&v, "host.max_other_load") > 0.25, "{}", v["host"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("generator core shared"), "{text}");
}

/// A rate beyond what one core can send keeps the worker busy the whole run: the
/// report warns that the generator is near saturation (the busiest generator core, or
/// its workers' own busy measure, above the watermark). Nothing else shares the core,
/// so this is the generator's own load, not the "core shared" warning above.
#[test]
fn a_rate_beyond_one_core_raises_the_near_saturation_warning() {
    let _g = load_lock();
    let sink = Sink::start(&[]);
    let (_d, path) = tmp_json();
    let out = run(
        &[
            "run",
            "--target",
            &sink.addr,
            "--cores",
            "0",
            "--rate",
            "2000000",
            "--connections",
            "64",
            "--pipeline",
            "16",
            "--duration",
            "2s",
            "--json",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let v = read_json(&path);
    let c = codes(&v["diagnosis"]);
    assert!(
        c.iter().any(|c| c == "generator_near_saturation"),
        "{c:?} (core load {})",
        v["host"]
    );
}

/// Runs `ip ARGS...`; false when it fails (no permission for namespaces here).
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Two network namespaces joined by a veth pair, deleted on drop.
struct Netns {
    generator: String,
    tgt: String,
}

impl Netns {
    /// `generator` (10.77.N.1) and `tgt` (10.77.N.2); the generator's side is limited to
    /// `rate` by tbf. `None` (with the reason printed) where namespaces cannot be made.
    fn create(rate: &str) -> Option<Netns> {
        let id = std::process::id() % 200 + 20;
        let n = Netns {
            generator: format!("blg{id}"),
            tgt: format!("blt{id}"),
        };
        let (g, t) = (n.generator.as_str(), n.tgt.as_str());
        let (ga, ta) = (format!("10.77.{id}.1/24"), format!("10.77.{id}.2/24"));
        let ok = ip(&["netns", "add", g])
            && ip(&["netns", "add", t])
            && ip(&[
                "link", "add", "veth-g", "netns", g, "type", "veth", "peer", "name", "veth-t",
                "netns", t,
            ])
            && ip(&["-n", g, "addr", "add", &ga, "dev", "veth-g"])
            && ip(&["-n", t, "addr", "add", &ta, "dev", "veth-t"])
            && ip(&["-n", g, "link", "set", "veth-g", "up"])
            && ip(&["-n", t, "link", "set", "veth-t", "up"])
            && ip(&["-n", g, "link", "set", "lo", "up"])
            && ip(&["-n", t, "link", "set", "lo", "up"])
            && Command::new("ip")
                .args([
                    "netns", "exec", g, "tc", "qdisc", "add", "dev", "veth-g", "root",
                ])
                .args(["tbf", "rate", rate, "burst", "32kbit", "latency", "50ms"])
                .status()
                .is_ok_and(|s| s.success());
        if !ok {
            skip(
                "a_rate_limited_link_is_reported_as_nic_saturated",
                "cannot create network namespaces with a tbf-limited veth here",
            );
            return None;
        }
        Some(n)
    }

    fn target_ip(&self) -> String {
        format!("10.77.{}.2", &self.generator[3..])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.generator]);
        ip(&["netns", "del", &self.tgt]);
    }
}

#[test]
fn a_rate_limited_link_is_reported_as_nic_saturated() {
    let _g = load_lock();
    let Some(ns) = Netns::create("200mbit") else {
        return;
    };
    on_a_quiet_host(
        "a_rate_limited_link_is_reported_as_nic_saturated",
        &RATE_ON_CORES_0_1,
        || {
            let dir = tempfile::tempdir().unwrap();
            let (sink_json, run_json) = (dir.path().join("sink.json"), dir.path().join("run.json"));
            let listen = format!("{}:9000", ns.target_ip());
            let mut sink = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &ns.tgt,
                    bin(),
                    "sink",
                    "--udp",
                    "--mode",
                    "count",
                ])
                .args(["--listen", &listen, "--cores", sink_core(), "--json"])
                .arg(&sink_json)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(500));
            // About 840 Mbit/s offered into a 200 Mbit/s link.
            let run_json_s = run_json.to_str().unwrap();
            let child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &ns.generator,
                    bin(),
                    "run",
                    "--proto",
                    "udp",
                    "--no-response",
                ])
                .args([
                    "--target",
                    &listen,
                    "--rate",
                    "100000",
                    "--payload-size",
                    "1000",
                ])
                .args([
                    "--cores",
                    "0",
                    "--duration",
                    "3s",
                    "--link-speed",
                    "200mbit",
                ])
                .args(["--json", run_json_s])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let out = wait_bounded(child, Duration::from_secs(30));
            Command::new("kill")
                .args(["-INT", &sink.id().to_string()])
                .status()
                .unwrap();
            let _ = sink.wait();
            assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
            let v = read_json(&run_json);
            assert_eq!(v["host"]["iface"], "veth-g", "{}", v["host"]);
            assert_eq!(f(&v, "host.link_speed_bps"), 200e6);
            // The link's share the generator reached: offering 4x the link needs its
            // core (at 100,000 datagrams/s), so a stolen vCPU can leave it short. The
            // diagnosis is due above the report's own `link_saturated_at` (0.9); a CI
            // run under 25% steal passed the old 0.85 bar with no diagnosis, rightly.
            let util = f(&v, "host.link_utilization_max");
            assert!(util < 1.15, "utilisation {util}: {}", v["host"]);
            if util <= f(&v, "host.link_saturated_at") {
                return Err(Miss::in_run(
                    &v,
                    format!("utilisation {util}: {}", v["host"]),
                ));
            }
            assert!(
                common::codes(&v["diagnosis"]).contains(&"nic_saturated".to_string()),
                "{}",
                v["diagnosis"]
            );
            // Offered above the link: the sink received less than was sent.
            let s = read_json(&sink_json);
            let sent = f(&v, "udp.sent");
            let received = f(&s, "received");
            assert!(received < sent * 0.5, "sent {sent}, received {received}");
            Ok(())
        },
    );
}
