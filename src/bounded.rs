//! Reading a file the user names, with a bound: at most `limit + 1` bytes are ever
//! read, so a path that turns out to be `/dev/zero`, a FIFO that never ends or a
//! multi-gigabyte file costs `limit` bytes of memory and a one-line error, not the
//! machine's memory. Every file input (`--payload-file`, `--body-file`, `--mix`,
//! `--rate file:`, `plan --from` and `--from-frames`, the reports `merge`, `compare`
//! and `report` read) goes through here, each with its limit from [`crate::limits`].
//!
//! The errors say what went wrong, not which file: the caller names the file (and the
//! flag) in its own one-line message.

use std::io::Read;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The file holds more than the limit (or a device or FIFO kept giving bytes).
    #[error("larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("not UTF-8 text")]
    NotUtf8,
}

/// The bytes of `path`, at most `limit` of them; a longer file is [`ReadError::TooLarge`].
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::File::open(path)?;
    // A regular file says its size: refuse a large one before reading any of it (a
    // sparse file of terabytes would otherwise be read up to the limit first).
    let size = match file.metadata() {
        Ok(m) if m.is_file() => Some(m.len()),
        _ => None,
    };
    if size.is_some_and(|n| n > limit) {
        return Err(ReadError::TooLarge { limit });
    }
    read_sized(file, limit, size.unwrap_or(0))
}

/// The text of `path` (UTF-8), at most `limit` bytes.
pub fn read_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit)?).map_err(|_| ReadError::NotUtf8)
}

/// At most `limit` bytes from `r`: reads `limit + 1` at most, and one byte past the
/// limit is [`ReadError::TooLarge`].
pub fn read_from(r: impl Read, limit: u64) -> Result<Vec<u8>, ReadError> {
    read_sized(r, limit, 0)
}

/// [`read_from`], expecting about `expected` bytes. The buffer grows by doubling but
/// never past `limit` (as `read_to_end` would, to twice the limit, when the stream
/// reaches it), so memory stays within the limit whatever the stream does.
fn read_sized(r: impl Read, limit: u64, expected: u64) -> Result<Vec<u8>, ReadError> {
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut r = r.take(limit.saturating_add(1));
    let mut buf: Vec<u8> = Vec::with_capacity(usize::try_from(expected.min(limit)).unwrap_or(0));
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => return Ok(buf),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if buf.len() + n > cap {
            return Err(ReadError::TooLarge { limit });
        }
        if buf.capacity() - buf.len() < n {
            let want = (buf.len() * 2).max(buf.len() + n).min(cap);
            buf.reserve_exact(want - buf.len());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_a_file_up_to_the_limit_and_refuses_one_byte_more() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read(&p, 5).unwrap(), b"12345");
        assert_eq!(read_to_string(&p, 100).unwrap(), "12345");
        assert!(matches!(read(&p, 4), Err(ReadError::TooLarge { limit: 4 })));
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_to_string(&p, 10), Err(ReadError::NotUtf8)));
        let e = read(&dir.path().join("missing"), 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("No such file"), "{e}");
    }

    #[test]
    fn a_huge_sparse_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sparse");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(1 << 40).unwrap();
        let t = std::time::Instant::now();
        let e = read(&p, 1 << 20).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { limit } if limit == 1 << 20));
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }

    /// A FIFO at `p` (mkfifo(3)).
    pub(crate) fn make_fifo(p: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn an_endless_stream_is_read_only_to_the_limit_plus_one() {
        // A reader that never ends: counts what is taken from it.
        struct Endless(u64);
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                buf.fill(0);
                self.0 += buf.len() as u64;
                Ok(buf.len())
            }
        }
        let mut src = Endless(0);
        let e = read_from(&mut src, 1000).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { limit: 1000 }));
        assert_eq!(src.0, 1001);
        // A FIFO fed by a thread: the same, through a path.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        make_fifo(&fifo);
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut w = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                let zeros = [0u8; 4096];
                // Until the reader closes its end (EPIPE).
                while w.write_all(&zeros).is_ok() {}
            })
        };
        assert!(matches!(
            read(&fifo, 1 << 16),
            Err(ReadError::TooLarge { .. })
        ));
        writer.join().unwrap();
    }
}
