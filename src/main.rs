//! Turns the outcome of a run into an exit code; nothing else.
use blaster::cmd::main_with_args;

fn main() {
    blaster::console::guard_std_fds();
    let code = match main_with_args(std::env::args().collect()) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            blaster::errln!("blaster: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
