//! Turns the outcome of a run into an exit code; nothing else.
use blaster::app::main_with_args;

fn main() {
    let code = match main_with_args(std::env::args().collect()) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("blaster: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
