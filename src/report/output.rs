//! An output file claimed before the work and written atomically after it: [`Pending::claim`]
//! creates a temporary sibling at once, so an unwritable path fails before anything is
//! computed; [`Pending::commit`] writes and renames it over the destination, so a reader
//! never sees a half-written file; dropping it uncommitted removes the temporary.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot write: {source}")]
pub struct OutputError {
    pub path: String,
    pub source: std::io::Error,
}

#[derive(Debug)]
pub struct Pending {
    dest: PathBuf,
    tmp: PathBuf,
    file: Option<std::fs::File>,
}

impl Pending {
    /// Claims `dest`: refuses a directory and creates the temporary beside it.
    pub fn claim(dest: &Path) -> Result<Pending, OutputError> {
        let err = |source| OutputError {
            path: dest.display().to_string(),
            source,
        };
        if dest.is_dir() {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory",
            )));
        }
        let name = dest
            .file_name()
            .ok_or_else(|| err(std::io::Error::other("names no file")))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        // Unique per claim: a command may rewrite a file it has also claimed for its end
        // (a search's steps), and each claim owns its own temporary.
        static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tmp_name.push(format!(".{}.{n}.tmp", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(err)?;
        Ok(Pending {
            dest: dest.to_path_buf(),
            tmp,
            file: Some(file),
        })
    }

    /// Writes `bytes` and renames the temporary over the destination.
    pub fn commit(mut self, bytes: &[u8]) -> Result<(), OutputError> {
        let err = |source| OutputError {
            path: self.dest.display().to_string(),
            source,
        };
        let mut file = self.file.take().expect("committed once");
        file.write_all(bytes).map_err(err)?;
        file.sync_all().map_err(err)?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest).map_err(err)?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn refuses_unwritable_paths_and_cleans_up_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Pending::claim(dir.path()).is_err());
        let missing = dir.path().join("no/such/dir/out.html");
        let e = Pending::claim(&missing).unwrap_err().to_string();
        assert!(e.contains("cannot write"), "{e}");
        drop(Pending::claim(&dir.path().join("x.html")).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
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
}
