//! Writing to the terminal without panicking. `println!` and `eprintln!` panic when
//! the write fails -- a closed pipe (`blaster ... | head -1`) or a closed descriptor
//! (`2>&-`) -- and lose the run's figures with it. Every user-facing line goes through
//! [`outln!`](crate::outln) and [`errln!`](crate::errln), which drop what cannot be
//! written, and [`guard_std_fds`] keeps a closed 0, 1 or 2 from being reused by the next
//! file the run opens (which would then receive the stderr lines).
//!
//! While a progress bar is on the terminal ([`set_bar`]), every line written here is
//! written with the bar lifted ([`indicatif::ProgressBar::suspend`]): it goes above
//! the bar, which is redrawn below it, instead of being cut into by the next redraw.

use std::io::Write;
use std::sync::Mutex;

/// The progress bar on the terminal now, if any (`report::progress`).
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Registers the bar on the terminal (`None`: it is gone), so that lines written
/// meanwhile go above it.
pub fn set_bar(bar: Option<indicatif::ProgressBar>) {
    *BAR.lock().unwrap_or_else(|e| e.into_inner()) = bar;
}

/// Runs `f` with the bar, if one is up, lifted off the terminal.
fn around_bar(f: impl FnOnce()) {
    let bar = BAR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match bar {
        Some(b) => b.suspend(f),
        None => f(),
    }
}

/// Writes `args` and a newline to stderr; a failed write is dropped.
pub fn err(args: std::fmt::Arguments<'_>) {
    around_bar(|| {
        let mut e = std::io::stderr().lock();
        let _ = e.write_fmt(args);
        let _ = e.write_all(b"\n");
    });
}

/// Writes `s` to stderr as is; a failed write is dropped.
pub fn err_str(s: &str) {
    around_bar(|| {
        let _ = std::io::stderr().lock().write_all(s.as_bytes());
    });
}

/// Writes `s` to stdout and flushes; a failed write (the reader went away) is dropped.
pub fn out_str(s: &str) {
    around_bar(|| {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(s.as_bytes());
        let _ = o.flush();
    });
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
