//! What a run shows on stderr while it measures. On a terminal: an indicatif bar with
//! the elapsed and remaining time, the achieved against the intended rate, and the
//! last second's latency p99 and errors. Elsewhere (a pipe, a file, CI's log): the
//! plain once-a-second live line ([`text::live_line`], the one `--progress` has always
//! printed). With `--quiet`: nothing.
//!
//! Everything here is fed by the collector thread with the interval it has just
//! merged (and woken at most every 200 ms to move the clock on): the workers neither
//! know nor pay for it. The bar is registered with [`crate::console`] while it is up,
//! so any other stderr or stdout line goes above it instead of through it, and it is
//! cleared when the display ends -- normally, on Ctrl-C (the collector still drains
//! every worker's last snapshot first) or on an early return (`Drop`) -- so the final
//! report lands on a clean screen.

use super::Percentiles;
use super::frames::FrameInterval;
use super::text;
use crate::run_plan::Progress;
use crate::units::{fmt_ns, fmt_rate};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// What one measured run shows, decided before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    Off,
    /// The plain live line, once a second.
    Lines,
    /// The bar; `label` leads it (a search or baseline step says which it is).
    Bar {
        label: String,
    },
}

impl Live {
    /// A timed run (`blaster run --target`): the bar on a terminal, else the lines.
    pub fn for_run(p: Progress) -> Live {
        Live::resolve(p, String::new(), Live::Lines)
    }

    /// One step of a search or a baseline: the bar on a terminal, else nothing per
    /// second (the step's own line, printed when it ends, is the log) unless
    /// `--progress` asks for the lines.
    pub fn for_step(p: Progress, label: String) -> Live {
        Live::resolve(p, label, Live::Off)
    }

    fn resolve(p: Progress, label: String, not_a_terminal: Live) -> Live {
        match p {
            Progress::Quiet => Live::Off,
            Progress::Lines => Live::Lines,
            Progress::Auto if bar_can_draw() => Live::Bar { label },
            Progress::Auto => not_a_terminal,
        }
    }
}

/// Whether a bar drawn on stderr would be seen: a terminal that is not `TERM=dumb`.
fn bar_can_draw() -> bool {
    std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// One completed second, as the live display needs it.
pub struct Second<'a> {
    /// 0-based.
    pub index: u64,
    pub achieved_rps: f64,
    /// What the schedule intended for this second (a shape's own rate); 0 in closed
    /// loop, infinite for `--rate max`.
    pub intended_rps: f64,
    pub latency: &'a Percentiles,
    pub errors: u64,
    pub lag_p99_ns: u64,
    /// `--workload frames`: the second's frame figures, shown instead of the rate and
    /// latency (frames are never answered, so there is no latency to show).
    pub frames: Option<FrameInterval>,
}

/// The live display of one run, from its start to its end.
pub struct Display {
    kind: Kind,
    duration_ns: u64,
    /// The dispatch lag p99 past which the bar shows it (the validity gate's).
    lag_gate_ns: u64,
    /// The schedule's time zero.
    start: Instant,
}

enum Kind {
    Off,
    Lines,
    Bar(ProgressBar),
}

/// Redraws per second at most: the figures change once a second, the clock a little
/// more often.
const BAR_REFRESH_HZ: u8 = 4;

impl Display {
    /// Starts the display of a run of `duration_ns` whose time zero is `start`;
    /// `lag_gate_ns` is the dispatch lag p99 that makes the run invalid.
    pub fn start(live: Live, duration_ns: u64, lag_gate_ns: u64, start: Instant) -> Display {
        let kind = match live {
            Live::Off => Kind::Off,
            Live::Lines => Kind::Lines,
            Live::Bar { label } => {
                let bar = ProgressBar::with_draw_target(
                    Some(duration_ns / 1_000_000),
                    ProgressDrawTarget::term_like_with_hz(
                        Box::new(EchoRoom(console::Term::stderr())),
                        BAR_REFRESH_HZ,
                    ),
                );
                let template = if label.is_empty() {
                    "{prefix} [{bar:30}] {msg}".to_string()
                } else {
                    format!("{label} {{prefix}} [{{bar:20}}] {{msg}}")
                };
                if let Ok(style) = ProgressStyle::with_template(&template) {
                    bar.set_style(style.progress_chars("█▉▊▋▌▍▎▏ "));
                }
                bar.set_message("waiting for the first second");
                crate::console::set_bar(Some(bar.clone()));
                Kind::Bar(bar)
            }
        };
        let d = Display {
            kind,
            duration_ns,
            lag_gate_ns,
            start,
        };
        d.tick();
        d
    }

    /// Moves the clock on (the bar's elapsed and remaining time).
    pub fn tick(&self) {
        if let Kind::Bar(bar) = &self.kind {
            let elapsed = self.elapsed_ns();
            bar.set_position(elapsed / 1_000_000);
            bar.set_prefix(clock_text(elapsed, self.duration_ns));
        }
    }

    /// Shows second `s`, just merged from every worker.
    pub fn second(&self, s: &Second) {
        match &self.kind {
            Kind::Off => {}
            Kind::Lines => crate::errln!("{}", line_text(s)),
            Kind::Bar(bar) => {
                bar.set_message(figures_text(s, self.lag_gate_ns));
                self.tick();
            }
        }
    }

    fn elapsed_ns(&self) -> u64 {
        let e = Instant::now().saturating_duration_since(self.start);
        u64::try_from(e.as_nanos())
            .unwrap_or(u64::MAX)
            .min(self.duration_ns)
    }
}

impl Drop for Display {
    /// Clears the bar (the line it was on is left empty, the cursor at its start).
    fn drop(&mut self) {
        if let Kind::Bar(bar) = &self.kind {
            crate::console::set_bar(None);
            bar.finish_and_clear();
        }
    }
}

/// `12s/60s, 48s left`: the run's clock in whole seconds (tenths below 10 s, so a
/// 2 s step still moves); elapsed rounds down and what is left rounds up, so the two
/// add up to the duration.
pub fn clock_text(elapsed_ns: u64, duration_ns: u64) -> String {
    let left = duration_ns.saturating_sub(elapsed_ns);
    // The unit shown: a second, or a tenth of one on a short run.
    let unit = if duration_ns < 10_000_000_000 {
        100_000_000
    } else {
        1_000_000_000
    };
    let show = |units: u64| {
        if unit == 1_000_000_000 {
            format!("{units}s")
        } else {
            format!("{}.{}s", units / 10, units % 10)
        }
    };
    format!(
        "{}/{}, {} left",
        show(elapsed_ns / unit),
        show(duration_ns.div_ceil(unit)),
        show(left.div_ceil(unit))
    )
}

/// The plain live line of second `s`: a frames run's or a request run's.
pub fn line_text(s: &Second) -> String {
    match &s.frames {
        Some(f) => text::frames_live_line(s.index, f, s.lag_p99_ns),
        None => text::live_line(
            s.index,
            s.achieved_rps,
            s.intended_rps,
            s.latency,
            s.errors,
            s.lag_p99_ns,
        ),
    }
}

/// The last second's figures on the bar: `rate 9.9k/s of 10.0k/s | p99 1.23 ms |
/// errors 0` (a frames run: `frames up 5000/s down 45.0k/s | deviation p99 8.31 ms |
/// retention 100.000% | late 0`); the dispatch lag p99 only when it is past the
/// validity gate (`lag_gate_ns`: then the generator is the one struggling, and the bar
/// says so before the report does).
pub fn figures_text(s: &Second, lag_gate_ns: u64) -> String {
    let mut t = match &s.frames {
        Some(f) => text::frames_figures(f),
        None => request_figures(s),
    };
    if s.lag_p99_ns > lag_gate_ns {
        t.push_str(&format!(" | lag p99 {}", fmt_ns(s.lag_p99_ns)));
    }
    t
}

/// A request run's figures on the bar.
fn request_figures(s: &Second) -> String {
    let intended = if !s.intended_rps.is_finite() {
        "of max".to_string() // `--rate max`: a UDP blast as fast as it sends
    } else if s.intended_rps > 0.0 {
        format!("of {}/s", fmt_rate(s.intended_rps))
    } else {
        "(closed loop)".to_string() // --concurrency: no timetable, no intended rate
    };
    format!(
        "rate {}/s {intended} | p99 {} | errors {}",
        fmt_rate(s.achieved_rps),
        fmt_ns(s.latency.p99),
        s.errors
    )
}

/// Columns the bar leaves free at the right edge of the terminal.
///
/// indicatif pads the bar's line with spaces to the terminal's full width, which
/// leaves the cursor past the last column: the terminal's echo of Ctrl-C (`^C`)
/// then wraps onto a line of its own, and the clear at the end wipes that line
/// instead of the bar's, leaving the bar on the screen above the report. With the
/// echo's two columns and one more kept free, `^C` lands on the bar's own line and
/// goes with it.
const ECHO_ROOM_COLUMNS: u16 = 3;

/// stderr's terminal, [`ECHO_ROOM_COLUMNS`] narrower than it is.
#[derive(Debug)]
struct EchoRoom(console::Term);

impl indicatif::TermLike for EchoRoom {
    fn width(&self) -> u16 {
        self.0.size().1.saturating_sub(ECHO_ROOM_COLUMNS).max(1)
    }
    fn height(&self) -> u16 {
        self.0.size().0
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Time between wake-ups of a collector that waits for snapshots: the bar's clock
/// moves at least this often.
pub const TICK: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_shows_elapsed_total_and_left() {
        assert_eq!(
            clock_text(12_400_000_000, 60_000_000_000),
            "12s/60s, 48s left"
        );
        assert_eq!(
            clock_text(1_250_000_000, 2_000_000_000),
            "1.2s/2.0s, 0.8s left"
        );
        // Past the end (the drain): nothing left, never negative.
        assert_eq!(
            clock_text(61_000_000_000, 60_000_000_000),
            "61s/60s, 0s left"
        );
    }

    #[test]
    fn figures_show_rates_p99_and_errors() {
        let lat = Percentiles {
            p99: 1_230_000,
            ..Percentiles::default()
        };
        let mut s = Second {
            index: 3,
            achieved_rps: 9_900.0,
            intended_rps: 10_000.0,
            latency: &lat,
            errors: 2,
            lag_p99_ns: 40_000,
            frames: None,
        };
        assert_eq!(
            figures_text(&s, 1_000_000),
            "rate 9900/s of 10.0k/s | p99 1.23 ms | errors 2"
        );
        s.lag_p99_ns = 3_000_000;
        s.intended_rps = 0.0;
        assert_eq!(
            figures_text(&s, 1_000_000),
            "rate 9900/s (closed loop) | p99 1.23 ms | errors 2 | lag p99 3.00 ms"
        );
        s.intended_rps = f64::INFINITY;
        assert!(figures_text(&s, 5_000_000).starts_with("rate 9900/s of max | p99"));
    }

    /// A frames second shows frames up and down, the deviation p99, the retention and
    /// the late frames, never the request latency (0 ns in a frames run).
    #[test]
    fn a_frames_second_shows_frames_not_latency() {
        let lat = Percentiles::default();
        let f = FrameInterval {
            up_fps: 5_000.0,
            down_fps: 44_550.0,
            deviation_p99_ns: 8_310_000,
            late: 7,
            received: 44_550,
            lost: 450,
            retention: 0.99,
            ..FrameInterval::default()
        };
        let s = Second {
            index: 0,
            achieved_rps: 5_000.0,
            intended_rps: 5_000.0,
            latency: &lat,
            errors: 0,
            lag_p99_ns: 3_000_000,
            frames: Some(f),
        };
        assert_eq!(
            figures_text(&s, 1_000_000),
            "frames up 5000/s down 44.5k/s | deviation p99 8.31 ms | retention 99.000% \
             | late 7 | lag p99 3.00 ms"
        );
        assert_eq!(
            line_text(&s),
            "[   1s] frames up     5000/s down    44.5k/s | deviation p99   8.31 ms | \
             retention 99.000% | late 7 | lost 450 | lag p99 3.00 ms"
        );
        assert!(!line_text(&s).contains("latency"));
    }

    #[test]
    fn quiet_is_off_and_progress_is_lines_everywhere() {
        assert_eq!(Live::for_run(Progress::Quiet), Live::Off);
        assert_eq!(Live::for_step(Progress::Quiet, "x".into()), Live::Off);
        assert_eq!(Live::for_run(Progress::Lines), Live::Lines);
        assert_eq!(Live::for_step(Progress::Lines, "x".into()), Live::Lines);
    }
}
