//! Output paths, written without ever replacing what the path names.
//!
//! [`destination`] says where a path leads once its symbolic links are followed:
//! - a descriptor of this process (`-` and `/dev/stdout` are 1, `/dev/stderr` 2,
//!   `/dev/fd/N` and `/proc/self/fd/N` are N): written to directly;
//! - a character device (`/dev/null`, a terminal) or a FIFO: opened and written in
//!   place, never created or renamed over;
//! - a regular file, or nothing yet: written to a temporary beside it and renamed over
//!   it when the work is done, so a reader never sees half a file. A symbolic link is
//!   followed first, so the link survives and its target gets the content.
//!
//! Anything else (a directory, a block device, a socket) is refused with one line.
//!
//! [`OutputFile::create`] opens an output before the work (an unwritable path fails
//! before anything runs), is written as the work goes, and [`OutputFile::commit`] puts
//! it in place; dropped uncommitted, its temporary is removed. [`Pending`] is the same
//! for outputs written in one piece at the end (the JSON, the HTML page). No temporary
//! survives an exit: each is registered in a fixed table that [`remove_temporaries`]
//! sweeps from the signal handler before a second Ctrl-C, SIGTERM or SIGHUP exits.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot write: {source}")]
pub struct OutputError {
    pub path: String,
    pub source: io::Error,
}

/// Where an output path leads, its links followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A descriptor of this process.
    Descriptor(RawFd),
    /// A character device or a FIFO: written in place.
    Through(PathBuf),
    /// A regular file or nothing yet (the path, links followed): written beside and
    /// renamed over.
    File(PathBuf),
}

/// The descriptor a path names by itself, before any look at the file system.
fn descriptor_alias(p: &Path) -> Option<RawFd> {
    let s = p.to_str()?;
    match s {
        "-" | "/dev/stdout" => return Some(1),
        "/dev/stderr" => return Some(2),
        "/dev/stdin" => return Some(0),
        _ => {}
    }
    let n = s
        .strip_prefix("/dev/fd/")
        .or_else(|| s.strip_prefix("/proc/self/fd/"))?;
    n.parse().ok()
}

fn refused(what: &str) -> io::Error {
    io::Error::other(format!(
        "is a {what}; an output goes to a regular file, a character device, a FIFO or `-` (stdout)"
    ))
}

/// Where `path` leads: follows its links (at most
/// [`crate::limits::OUTPUT_LINK_HOPS_MAX`]) and refuses what cannot be an output.
pub fn destination(path: &Path) -> io::Result<Destination> {
    let mut p = path.to_path_buf();
    for _ in 0..=crate::limits::OUTPUT_LINK_HOPS_MAX {
        if let Some(fd) = descriptor_alias(&p) {
            return Ok(Destination::Descriptor(fd));
        }
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Destination::File(p)),
            Err(e) => return Err(e),
        };
        let t = meta.file_type();
        if t.is_symlink() {
            let to = std::fs::read_link(&p)?;
            // A relative link is relative to the directory holding it.
            p = match p.parent() {
                Some(dir) if to.is_relative() => dir.join(to),
                _ => to,
            };
        } else if t.is_file() {
            return Ok(Destination::File(p));
        } else if t.is_char_device() || t.is_fifo() {
            return Ok(Destination::Through(p));
        } else if t.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            ));
        } else if t.is_block_device() {
            return Err(refused("block device"));
        } else if t.is_socket() {
            return Err(refused("socket"));
        } else {
            return Err(refused("special file"));
        }
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

/// Whether `path` leads to stdout (`-`, `/dev/stdout`, a link to it).
pub fn is_stdout(path: &Path) -> bool {
    matches!(destination(path), Ok(Destination::Descriptor(1)))
}

/// Whether `path` is a file that can be rewritten as a command goes (a sink's counts, a
/// search's steps): a stream (stdout, a device, a FIFO) would get every version.
pub fn is_rewritable(path: &Path) -> bool {
    matches!(destination(path), Ok(Destination::File(_)))
}

/// What two outputs must not share.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    Descriptor(RawFd),
    Node(u64, u64),
    Path(PathBuf),
}

/// The identity of `path`'s destination; `None` for a character device (`/dev/null`
/// takes any number of writers, as with two shell redirections) or a path that cannot
/// be resolved (its own open fails with its own message).
fn identity(path: &Path) -> Option<Identity> {
    match destination(path).ok()? {
        Destination::Descriptor(fd) => Some(Identity::Descriptor(fd)),
        Destination::Through(p) => {
            let m = std::fs::metadata(p).ok()?;
            (!m.file_type().is_char_device()).then(|| Identity::Node(m.dev(), m.ino()))
        }
        Destination::File(p) => match std::fs::metadata(&p) {
            Ok(m) => Some(Identity::Node(m.dev(), m.ino())),
            // Not there yet: the same directory and name.
            Err(_) => {
                let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
                let dir = std::fs::canonicalize(dir.unwrap_or(Path::new("."))).ok()?;
                Some(Identity::Path(dir.join(p.file_name()?)))
            }
        },
    }
}

/// Refuses two outputs (`(flag, path)`) that lead to the same file or descriptor: one
/// would replace or interleave the other. The message names both flags.
pub fn check_distinct(outputs: &[(&str, &Path)]) -> Result<(), String> {
    let ids: Vec<_> = outputs.iter().map(|(_, p)| identity(p)).collect();
    for (i, a) in ids.iter().enumerate() {
        let Some(a) = a else { continue };
        if let Some(j) = (i + 1..ids.len()).find(|&j| ids[j].as_ref() == Some(a)) {
            let (fa, pa) = outputs[i];
            let fb = outputs[j].0;
            return Err(match a {
                Identity::Descriptor(1) => {
                    format!("only one output may be `-` (stdout), got --{fa} and --{fb}")
                }
                _ => format!(
                    "--{fa} and --{fb} both write {}: give each its own file",
                    pa.display()
                ),
            });
        }
    }
    Ok(())
}

/// The temporaries alive now, as C strings a signal handler can unlink without
/// allocating or locking. A slot holds a pointer from `CString::into_raw` or null.
static TEMPORARIES: [AtomicPtr<libc::c_char>; crate::limits::OUTPUT_TEMPORARIES_MAX] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; crate::limits::OUTPUT_TEMPORARIES_MAX];
/// Set by [`remove_temporaries`]: the process is exiting; no temporary may stay.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Removes every output temporary now. Called from a signal handler just before the
/// process exits, so it only uses atomics and unlink(2), both async-signal-safe; the
/// names are leaked, the process is about to end.
pub fn remove_temporaries() {
    EXITING.store(true, Ordering::SeqCst);
    for slot in &TEMPORARIES {
        let p = slot.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: `p` came from `CString::into_raw` in `Temporary::create` and was
            // taken out of the table by this swap, so nobody frees it meanwhile.
            unsafe { libc::unlink(p) };
        }
    }
}

/// A temporary file beside an output's target, registered for [`remove_temporaries`];
/// removed when dropped unless [`Temporary::persist`] renamed it over the target.
struct Temporary {
    tmp: PathBuf,
    target: PathBuf,
    slot: Option<usize>,
}

impl Temporary {
    fn create(target: &Path) -> io::Result<(Temporary, File)> {
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::other("names no file"))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        // Unique per claim: a command may rewrite a file it has also claimed for its
        // end (a search's steps), and each claim owns its own temporary.
        static CLAIMS: AtomicU64 = AtomicU64::new(0);
        let n = CLAIMS.fetch_add(1, Ordering::Relaxed);
        tmp_name.push(format!(".{}.{n}.tmp", std::process::id()));
        let tmp = target.with_file_name(tmp_name);
        let c = CString::new(tmp.as_os_str().as_bytes()).map_err(io::Error::other)?;
        // Registered before it exists, so a signal from now on finds it.
        let raw = c.into_raw();
        let Some(slot) = TEMPORARIES.iter().position(|s| {
            s.compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        }) else {
            // SAFETY: `raw` came from `into_raw` above and was stored nowhere.
            drop(unsafe { CString::from_raw(raw) });
            return Err(io::Error::other("too many outputs open at once"));
        };
        let mut t = Temporary {
            tmp,
            target: target.to_path_buf(),
            slot: Some(slot),
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&t.tmp);
        let file = match file {
            Ok(f) => f,
            Err(e) => {
                t.tmp = PathBuf::new(); // nothing to remove
                return Err(e);
            }
        };
        // A signal that swept the table while the file was being created: remove it
        // here, since the sweep may have come before it existed.
        if EXITING.load(Ordering::SeqCst) {
            return Err(io::Error::other("exiting"));
        }
        Ok((t, file))
    }

    fn deregister(&mut self) {
        if let Some(slot) = self.slot.take() {
            let p = TEMPORARIES[slot].swap(std::ptr::null_mut(), Ordering::SeqCst);
            if !p.is_null() {
                // SAFETY: stored by `create` from `into_raw`, taken back by the swap.
                drop(unsafe { CString::from_raw(p) });
            }
        }
    }

    /// Renames the temporary over the target.
    fn persist(mut self) -> io::Result<()> {
        let r = std::fs::rename(&self.tmp, &self.target);
        if r.is_ok() {
            self.tmp = PathBuf::new();
        }
        r
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        // After the file is gone, so a signal in between finds it still listed.
        self.deregister();
    }
}

/// An output opened before the work: `-` is stdout; see the module documentation.
pub struct OutputFile {
    path: PathBuf,
    out: Out,
}

enum Out {
    Stdout(io::Stdout),
    Stderr(io::Stderr),
    /// A device, a FIFO or another descriptor, written in place.
    Through(BufWriter<File>),
    /// A regular file, written to its temporary.
    File(Temporary, BufWriter<File>),
    Committed,
}

impl OutputFile {
    /// Opens `path` for writing. Fails now, with the OS's reason, when the directory is
    /// missing or not writable, or the path is not something an output may go to. A
    /// FIFO is opened now, so this waits for its reader, as a shell redirection does.
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        let out = match destination(path)? {
            Destination::Descriptor(1) => Out::Stdout(io::stdout()),
            Destination::Descriptor(2) => Out::Stderr(io::stderr()),
            Destination::Descriptor(fd) => {
                // SAFETY: fcntl only reads `fd`; a closed one gives -1 (EBADF).
                let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
                if dup < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: `dup` is a descriptor this call just created and owns.
                Out::Through(BufWriter::new(unsafe { File::from_raw_fd(dup) }))
            }
            Destination::Through(p) => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOCTTY)
                    .open(p)?;
                Out::Through(BufWriter::new(f))
            }
            Destination::File(target) => {
                let (tmp, f) = Temporary::create(&target)?;
                Out::File(tmp, BufWriter::new(f))
            }
        };
        Ok(OutputFile {
            path: path.to_path_buf(),
            out,
        })
    }

    /// The path as the user gave it, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn writer(&mut self) -> &mut dyn Write {
        match &mut self.out {
            Out::Stdout(s) => s,
            Out::Stderr(s) => s,
            Out::Through(w) | Out::File(_, w) => w,
            Out::Committed => unreachable!("written after its commit"),
        }
    }

    /// Flushes what was written so far (to the temporary, for a file).
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer().flush()
    }

    /// Flushes and puts the output in place: a file's temporary is synced and renamed
    /// over the target; anything else is flushed.
    pub fn commit(mut self) -> io::Result<()> {
        self.flush()?;
        match std::mem::replace(&mut self.out, Out::Committed) {
            Out::File(tmp, w) => {
                let f = w.into_inner().map_err(|e| e.into_error())?;
                f.sync_all()?;
                drop(f);
                tmp.persist()
            }
            _ => Ok(()),
        }
    }
}

/// An output written in one piece after the work (the JSON, the HTML page), claimed
/// before it so an unwritable path fails first.
pub struct Pending(OutputFile);

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pending({})", self.0.path.display())
    }
}

impl Pending {
    /// Claims `dest` (see [`OutputFile::create`]).
    pub fn claim(dest: &Path) -> Result<Pending, OutputError> {
        OutputFile::create(dest)
            .map(Pending)
            .map_err(|source| OutputError {
                path: dest.display().to_string(),
                source,
            })
    }

    /// Writes `bytes` and puts the output in place. On stdout or stderr a reader that
    /// went away is not an error (see [`crate::console`]).
    pub fn commit(mut self, bytes: &[u8]) -> Result<(), OutputError> {
        let text = || String::from_utf8_lossy(bytes);
        match self.0.out {
            Out::Stdout(_) => crate::console::out_str(&text()),
            Out::Stderr(_) => crate::console::err_str(&text()),
            _ => {
                let path = self.0.path.display().to_string();
                let r = self.0.writer().write_all(bytes);
                return r
                    .and_then(|()| self.0.commit())
                    .map_err(|source| OutputError { path, source });
            }
        }
        Ok(())
    }

    /// Whether the output is a regular file (not a stream that would get every
    /// rewrite).
    pub fn is_file(&self) -> bool {
        matches!(self.0.out, Out::File(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn commit_replaces_the_destination_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.html");
        std::fs::write(&dest, "old").unwrap();
        let p = Pending::claim(&dest).unwrap();
        // Until the commit, the old file is what readers see.
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "old");
        p.commit(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new");
        assert_eq!(names(dir.path()), ["out.html"]);
    }

    #[test]
    fn refuses_unwritable_paths_and_cleans_up_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Pending::claim(dir.path()).is_err());
        let missing = dir.path().join("no/such/dir/out.html");
        let e = Pending::claim(&missing).unwrap_err().to_string();
        assert!(e.contains("cannot write"), "{e}");
        drop(Pending::claim(&dir.path().join("x.html")).unwrap());
        // Written to but not committed (a run cut short): removed all the same.
        let mut f = OutputFile::create(&dir.path().join("y.csv")).unwrap();
        write!(f.writer(), "x").unwrap();
        f.flush().unwrap();
        drop(f);
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }

    #[test]
    fn a_path_claimed_twice_can_be_written_by_both_claims() {
        // A search claims its JSON for the end and rewrites it after every step.
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("report.json");
        let end = Pending::claim(&dest).unwrap();
        Pending::claim(&dest).unwrap().commit(b"step").unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "step");
        end.commit(b"final").unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "final");
    }

    #[test]
    fn descriptors_are_named_without_touching_the_file_system() {
        for (p, fd) in [
            ("-", 1),
            ("/dev/stdout", 1),
            ("/dev/stderr", 2),
            ("/dev/fd/7", 7),
            ("/proc/self/fd/1", 1),
        ] {
            assert_eq!(
                destination(Path::new(p)).unwrap(),
                Destination::Descriptor(fd),
                "{p}"
            );
        }
        assert!(is_stdout(Path::new("/dev/stdout")));
        assert!(!is_stdout(Path::new("/dev/stderr")));
    }

    #[test]
    fn links_are_followed_to_their_target() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("real.json"), "old").unwrap();
        std::os::unix::fs::symlink("real.json", d.join("link.json")).unwrap();
        std::os::unix::fs::symlink(d.join("link.json"), d.join("link2.json")).unwrap();
        // A dangling link: the file is created where it points.
        std::os::unix::fs::symlink("new.json", d.join("dangling.json")).unwrap();
        std::os::unix::fs::symlink("/dev/stdout", d.join("out")).unwrap();
        std::os::unix::fs::symlink("loop", d.join("loop")).unwrap();
        assert_eq!(
            destination(&d.join("link2.json")).unwrap(),
            Destination::File(d.join("real.json"))
        );
        assert_eq!(
            destination(&d.join("dangling.json")).unwrap(),
            Destination::File(d.join("new.json"))
        );
        assert!(is_stdout(&d.join("out")));
        let e = destination(&d.join("loop")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        Pending::claim(&d.join("link2.json"))
            .unwrap()
            .commit(b"new")
            .unwrap();
        assert!(d.join("link.json").is_symlink() && d.join("link2.json").is_symlink());
        assert_eq!(std::fs::read_to_string(d.join("real.json")).unwrap(), "new");
        Pending::claim(&d.join("dangling.json"))
            .unwrap()
            .commit(b"x")
            .unwrap();
        assert!(d.join("dangling.json").is_symlink());
        assert_eq!(std::fs::read_to_string(d.join("new.json")).unwrap(), "x");
    }

    #[test]
    fn a_fifo_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        assert_eq!(
            destination(&fifo).unwrap(),
            Destination::Through(fifo.clone())
        );
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        Pending::claim(&fifo).unwrap().commit(b"through").unwrap();
        assert_eq!(reader.join().unwrap(), "through");
        let t = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(t.is_fifo());
        assert_eq!(names(dir.path()), ["pipe"]);
    }

    #[test]
    fn sockets_and_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = Pending::claim(&sock).unwrap_err().to_string();
        assert!(e.contains("is a socket"), "{e}");
        let e = Pending::claim(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
    }

    #[test]
    fn two_outputs_may_not_share_a_file_or_stdout() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let x = d.join("x");
        std::fs::write(d.join("real"), "").unwrap();
        std::os::unix::fs::symlink("real", d.join("link")).unwrap();
        let y = d.join("y");
        assert!(check_distinct(&[("json", &x), ("csv", &y)]).is_ok());
        let e = check_distinct(&[("json", &x), ("csv", &d.join("./x"))]).unwrap_err();
        assert!(e.contains("--json and --csv both write"), "{e}");
        let e =
            check_distinct(&[("json", &d.join("real")), ("html", &d.join("link"))]).unwrap_err();
        assert!(e.contains("--json and --html"), "{e}");
        let e = check_distinct(&[
            ("json", Path::new("-")),
            ("csv", &y),
            ("hdr-log", Path::new("/dev/stdout")),
        ])
        .unwrap_err();
        assert!(e.contains("only one output may be `-`"), "{e}");
        assert!(e.contains("--json and --hdr-log"), "{e}");
    }

    #[test]
    fn a_sweep_removes_every_temporary() {
        // Run in a child process: the sweep marks this process as exiting.
        if std::env::var_os("BLASTER_SWEEP_CHILD").is_none() {
            let exe = std::env::current_exe().unwrap();
            let out = std::process::Command::new(exe)
                .args([
                    "--exact",
                    "report::output::tests::a_sweep_removes_every_temporary",
                ])
                .env("BLASTER_SWEEP_CHILD", "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let a = Pending::claim(&dir.path().join("a.json")).unwrap();
        let mut b = OutputFile::create(&dir.path().join("b.csv")).unwrap();
        write!(b.writer(), "row").unwrap();
        b.flush().unwrap();
        assert_eq!(names(dir.path()).len(), 2);
        remove_temporaries();
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        // Their owners dropping them afterwards is harmless.
        drop((a, b));
        assert!(Pending::claim(&dir.path().join("c.json")).is_err());
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }
}
