//! Core alignment, checked: where every thread of the generator last ran.
//!
//! Workers pin themselves to their `--cores` core and confine their io-wq helpers there
//! (`engine::ring::Ring::confine_io_workers`); the main thread (collector, live line,
//! report) and helper threads run on `--control-core`. Whether that held is read back
//! from the kernel: `/proc/self/task/TID/stat` field 39 is the CPU the thread last ran
//! on, `/proc/self/task/TID/comm` its name. A [`Sampler`] on the control core reads
//! every thread each [`SAMPLE_PERIOD`] while the run goes, so workers that have already
//! exited by the end are still reported (with their last CPU seen), and the report
//! lists them all and warns about any outside `--cores` and the control core.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the sampler reads the threads: a worker's last CPU is at most this old.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// Name prefix of the built-in sink's threads: the loopback baseline runs the sink in
/// this process on its own cores, so they are the target's threads, not the generator's.
const SINK_PREFIX: &str = "blaster-sink";
/// Name prefix of io-wq workers; the kernel names them after their task's tid.
const IOWQ_PREFIX: &str = "iou-wrk-";
/// Name prefix of the worker threads (`blaster-w0`, ...), which measure their own CPU.
pub const WORKER_PREFIX: &str = "blaster-w";

/// The name (field 2, inside the parentheses) and the CPU time in clock ticks
/// (utime + stime, fields 14 and 15: the unit of /proc/stat) of a
/// `/proc/PID/task/TID/stat` line.
pub fn parse_stat_name_ticks(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?;
    let mut rest = stat[close + 1..].split_whitespace().skip(14 - 3);
    let utime: u64 = rest.next()?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some((name, utime + stime))
}

/// One thread and the CPU it last ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadCpu {
    pub name: String,
    pub tid: u32,
    pub cpu: usize,
}

/// The `processor` field (39) of a `/proc/PID/task/TID/stat` line: the CPU the thread
/// last ran on. The name (field 2) is in parentheses and may itself hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat_cpu(stat: &str) -> Option<usize> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is the first; field 39 is the 37th.
    rest.split_whitespace().nth(39 - 3)?.parse().ok()
}

/// Reads every thread under `task_dir` (`/proc/self/task` in production, a fixture
/// in tests); threads that exit while being read are skipped.
pub fn read_threads(task_dir: &Path) -> Vec<ThreadCpu> {
    let Ok(entries) = std::fs::read_dir(task_dir) else {
        return Vec::new();
    };
    let mut out: Vec<ThreadCpu> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some(ThreadCpu {
                name: name.trim_end_matches('\n').to_string(),
                tid,
                cpu: parse_stat_cpu(&stat)?,
            })
        })
        .collect();
    out.sort_by_key(|t| t.tid);
    out
}

/// The threads of `threads` that ran outside `cores` and `control`: the generator's
/// threads only (the in-process sink's threads and their io-wq workers are the
/// target's).
pub fn outside<'a>(
    threads: &'a [ThreadCpu],
    cores: &[usize],
    control: usize,
) -> Vec<&'a ThreadCpu> {
    let sink_tids: Vec<String> = threads
        .iter()
        .filter(|t| t.name.starts_with(SINK_PREFIX))
        .map(|t| t.tid.to_string())
        .collect();
    threads
        .iter()
        .filter(|t| !t.name.starts_with(SINK_PREFIX))
        .filter(|t| {
            t.name
                .strip_prefix(IOWQ_PREFIX)
                .is_none_or(|owner| !sink_tids.iter().any(|s| s == owner))
        })
        .filter(|t| t.cpu != control && !cores.contains(&t.cpu))
        .collect()
}

/// Pins the calling thread to `core` (best effort: a core this process may not use
/// leaves the affinity as it was, and the thread report shows where it ran).
pub fn pin_current(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

/// Reads the process's threads every [`SAMPLE_PERIOD`] from a thread of its own on
/// the control core, keeping each thread's latest observation.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<BTreeMap<u32, ThreadCpu>>>,
    task_dir: PathBuf,
}

impl Sampler {
    /// Starts sampling `/proc/self/task` on `control`. If the thread cannot be
    /// started, [`Sampler::finish`] still reports the threads alive at the end.
    pub fn start(control: usize) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let task_dir = PathBuf::from("/proc/self/task");
        let handle = {
            let stop = stop.clone();
            let dir = task_dir.clone();
            std::thread::Builder::new()
                .name("blaster-threads".into())
                .spawn(move || {
                    pin_current(control);
                    let mut seen = BTreeMap::new();
                    while !stop.load(Ordering::Relaxed) {
                        for t in read_threads(&dir) {
                            seen.insert(t.tid, t);
                        }
                        std::thread::sleep(SAMPLE_PERIOD);
                    }
                    seen
                })
                .ok()
        };
        Sampler {
            stop,
            handle,
            task_dir,
        }
    }

    /// Stops sampling and returns every thread seen, by tid, with its latest CPU
    /// (threads alive now are read once more).
    pub fn finish(mut self) -> Vec<ThreadCpu> {
        self.stop.store(true, Ordering::Relaxed);
        let mut seen = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        for t in read_threads(&self.task_dir) {
            seen.insert(t.tid, t);
        }
        seen.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line as kernel 6.x writes it (52 fields) for a thread named `blaster-w0`
    /// that last ran on CPU 3 (field 39; field 38, the exit signal, is -1).
    const STAT: &str = "4242 (blaster-w0) R 4240 4240 4100 34816 4240 4194368 1207 0 0 0 \
        311 25 0 0 20 0 5 0 123456 2147483648 2500 18446744073709551615 1 1 0 0 0 0 0 \
        4096 1260 0 0 0 -1 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn the_name_and_cpu_ticks_are_read_around_the_parentheses() {
        assert_eq!(parse_stat_name_ticks(STAT), Some(("blaster-w0", 311 + 25)));
        let odd = STAT.replace("(blaster-w0)", "(a b) (c))");
        assert_eq!(parse_stat_name_ticks(&odd), Some(("a b) (c)", 336)));
        assert_eq!(parse_stat_name_ticks("4242 (x) R 1 2"), None);
    }

    #[test]
    fn the_processor_field_is_read_after_the_name() {
        assert_eq!(parse_stat_cpu(STAT), Some(3));
        let odd = STAT.replace("(blaster-w0)", "(a b) (c))");
        assert_eq!(parse_stat_cpu(&odd), Some(3));
        assert_eq!(parse_stat_cpu("4242 (x) R 1 2"), None);
        assert_eq!(parse_stat_cpu("no name here"), None);
    }

    #[test]
    fn a_task_directory_is_read_into_threads() {
        let d = tempfile::tempdir().unwrap();
        for (tid, name, cpu) in [(11, "blaster", "1"), (12, "blaster-w0", "0")] {
            let t = d.path().join(tid.to_string());
            std::fs::create_dir(&t).unwrap();
            std::fs::write(t.join("comm"), format!("{name}\n")).unwrap();
            let stat = STAT.replace("(blaster-w0)", &format!("({name})"));
            let stat = stat.replace(" -1 3 0 ", &format!(" -1 {cpu} 0 "));
            std::fs::write(t.join("stat"), stat).unwrap();
        }
        // A task that exited between listing and reading is skipped.
        std::fs::create_dir(d.path().join("13")).unwrap();
        let got = read_threads(d.path());
        let want = [("blaster", 11, 1), ("blaster-w0", 12, 0)];
        assert_eq!(got.len(), 2);
        for (t, (name, tid, cpu)) in got.iter().zip(want) {
            assert_eq!((t.name.as_str(), t.tid, t.cpu), (name, tid, cpu));
        }
    }

    #[test]
    fn threads_off_the_plan_are_found_but_the_sinks_are_not() {
        let t = |name: &str, tid, cpu| ThreadCpu {
            name: name.into(),
            tid,
            cpu,
        };
        let threads = [
            t("blaster", 1, 3),
            t("blaster-w0", 2, 0),
            t("blaster-w1", 3, 5),
            t("iou-wrk-2", 4, 6),
            t("blaster-sink-2-0", 5, 2),
            t("iou-wrk-5", 6, 7),
        ];
        let out: Vec<u32> = outside(&threads, &[0, 1], 3)
            .iter()
            .map(|t| t.tid)
            .collect();
        assert_eq!(out, [3, 4]);
    }

    #[test]
    fn the_sampler_sees_this_thread() {
        let me = nix::unistd::gettid().as_raw() as u32;
        let s = Sampler::start(0);
        std::thread::sleep(SAMPLE_PERIOD);
        let got = s.finish();
        assert!(got.iter().any(|t| t.tid == me), "{got:?}");
        assert!(got.iter().any(|t| t.name == "blaster-threads"), "{got:?}");
    }
}
