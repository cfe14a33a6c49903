//! Real servers for the frame tests, each started on a free loopback port with its
//! configuration in a temporary directory and killed on drop: nats-server, mosquitto,
//! redis-server and a Python `websockets` broadcast server
//! (tests/fixtures/ws/broadcast.py). A server binary that is missing fails the test
//! and names the package (scripts/test.sh installs them).

use super::free_port;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process, killed on drop; its configuration directory removed after it.
pub struct Server {
    pub child: Child,
    _dir: Option<tempfile::TempDir>,
}
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn require(bin: &str, package: &str) -> String {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
        let p = format!("{dir}/{bin}");
        if Path::new(&p).exists() {
            return p;
        }
    }
    panic!("{bin} not found: install the Debian package {package} (scripts/test.sh does)");
}

pub fn wait_tcp(port: u16, server: &mut Server) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("server for port {port} exited: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "server on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn spawn(cmd: &mut Command, dir: Option<tempfile::TempDir>, port: u16) -> Server {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server");
    let mut s = Server { child, _dir: dir };
    wait_tcp(port, &mut s);
    s
}

/// nats-server with extra arguments (`--user u --pass p`: joins without them fail).
pub fn nats(extra: &[&str]) -> (Server, u16) {
    let bin = require("nats-server", "nats-server");
    let port = free_port();
    let s = spawn(
        Command::new(bin)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(extra),
        None,
        port,
    );
    (s, port)
}

/// mosquitto with extra configuration lines (`user root`: it reads its files from a
/// private temporary directory, which the `mosquitto` user could not).
pub fn mosquitto(extra: &str) -> (Server, u16) {
    let bin = require("mosquitto", "mosquitto");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("mosquitto.conf");
    let text = format!(
        "listener {port} 127.0.0.1\nuser root\npersistence false\nlog_dest none\n{}\n",
        extra
    );
    std::fs::write(&conf, text).unwrap();
    let s = spawn(Command::new(bin).arg("-c").arg(&conf), Some(dir), port);
    (s, port)
}

pub fn redis(extra: &[&str]) -> (Server, u16) {
    let bin = require("redis-server", "redis-server");
    let port = free_port();
    let s = spawn(
        Command::new(bin).args(extra).args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]),
        None,
        port,
    );
    (s, port)
}

/// A Python with the `websockets` module: Debian's python3-websockets installs it
/// for /usr/bin/python3, which a python3 earlier on PATH (pyenv) may not see.
pub fn python_with_websockets() -> String {
    python_with(
        "websockets",
        "install the Debian package python3-websockets",
    )
}

/// A Python with grpcio (`python3 -m pip install grpcio`; scripts/test.sh does).
pub fn python_with_grpcio() -> String {
    python_with(
        "grpc",
        "python3 -m pip install grpcio (scripts/test.sh does)",
    )
}

/// The first of /usr/bin/python3 and the python3 on PATH that imports `module`.
fn python_with(module: &str, install: &str) -> String {
    for py in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(py)
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return py.to_string();
        }
    }
    panic!("no python3 with the {module} module: {install}");
}

pub fn ws_server() -> (Server, u16) {
    ws_server_pinging(20.0)
}

/// The broadcast server pinging every client each `ping_s` seconds and closing one
/// that has not answered within as long.
pub fn ws_server_pinging(ping_s: f64) -> (Server, u16) {
    ws_server_with(&[&ping_s.to_string()])
}

/// The broadcast server serving wss (TLS) with the PEM files `cert` and `key`.
pub fn wss_server(cert: &str, key: &str) -> (Server, u16) {
    ws_server_with(&["20", cert, key])
}

/// The broadcast server with `args` after its port.
fn ws_server_with(args: &[&str]) -> (Server, u16) {
    let py = python_with_websockets();
    let port = free_port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ws/broadcast.py"
    );
    let s = spawn(
        Command::new(py)
            .arg(script)
            .arg(port.to_string())
            .args(args),
        None,
        port,
    );
    (s, port)
}

/// nginx with HTTP/2 on `listen` (h2c, or h2 over TLS when `tls` holds the
/// certificate and key), `keepalive_requests` per connection before its GOAWAY, and
/// `streams` concurrent streams at most per connection. `/` answers 200, `/fail` 503.
pub fn nginx_h2(keepalive_requests: u64, streams: u32, tls: Option<(&str, &str)>) -> (Server, u16) {
    nginx_listening(keepalive_requests, streams, tls, " http2")
}

/// [`nginx_h2`] with `listen_opts` after the port (`" http2"`, or `""` for HTTP/1.1).
pub fn nginx_listening(
    keepalive_requests: u64,
    streams: u32,
    tls: Option<(&str, &str)>,
    listen_opts: &str,
) -> (Server, u16) {
    let bin = require("nginx", "nginx-light");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (ssl, certs) = match tls {
        Some((cert, key)) => (
            " ssl",
            format!("ssl_certificate {cert}; ssl_certificate_key {key};"),
        ),
        None => ("", String::new()),
    };
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; \
         error_log {d}/error.log; events {{ worker_connections 1024; }} \
         http {{ access_log off; keepalive_requests {keepalive_requests}; \
         http2_max_concurrent_streams {streams}; \
         client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; \
         uwsgi_temp_path {d}; scgi_temp_path {d}; \
         server {{ listen 127.0.0.1:{port}{ssl}{listen_opts}; {certs} \
         location / {{ return 200 \"hello\"; }} location /fail {{ return 503; }} \
         location /fallback {{ return 200 \"fallback\"; }} \
         location = /big {{ alias {d}/big.txt; }} }} }}",
        d = dir.path().display()
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    std::fs::write(dir.path().join("big.txt"), "x".repeat(5000)).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["-c", conf_path.to_str().unwrap(), "-p"])
        .arg(dir.path());
    let s = spawn(&mut cmd, Some(dir), port);
    (s, port)
}

/// A self-signed certificate for localhost and 127.0.0.1 (`cert.pem`, `key.pem`).
pub fn self_signed(dir: &Path) -> (String, String) {
    let out = Command::new(require("openssl", "openssl"))
        .current_dir(dir)
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ])
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    (p("cert.pem"), p("key.pem"))
}
