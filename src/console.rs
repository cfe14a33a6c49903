//! Writing to the terminal without panicking. `println!` and `eprintln!` panic when
//! the write fails -- a closed pipe (`blaster ... | head -1`) or a closed descriptor
//! (`2>&-`) -- and lose the run's figures with it. Every user-facing line goes through
//! [`outln!`](crate::outln) and [`errln!`](crate::errln), which drop what cannot be
//! written, and [`guard_std_fds`] keeps a closed 0, 1 or 2 from being reused by the next
//! file the run opens (which would then receive the stderr lines).

use std::io::Write;

/// Writes `args` and a newline to stderr; a failed write is dropped.
pub fn err(args: std::fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args);
    let _ = e.write_all(b"\n");
}

/// Writes `s` to stderr as is; a failed write is dropped.
pub fn err_str(s: &str) {
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}

/// Writes `s` to stdout and flushes; a failed write (the reader went away) is dropped.
pub fn out_str(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

/// Opens /dev/null on whichever of descriptors 0, 1 and 2 are closed, so that later
/// opens (the JSON's temporary file, a socket) never land on them. Call first thing.
pub fn guard_std_fds() {
    use std::os::fd::{AsRawFd, IntoRawFd};
    // open() returns the lowest free descriptor: while that is 0..=2, keep it open.
    while let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        if f.as_raw_fd() > 2 {
            break;
        }
        let _ = f.into_raw_fd();
    }
}

/// `eprintln!` that never panics: see the module documentation.
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => {
        $crate::console::err(format_args!($($t)*))
    };
}
