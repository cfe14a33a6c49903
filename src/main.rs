//! Turns the outcome of a run into an exit code; nothing else.
use blaster::app::{Outcome, exit, main_with_args};

fn main() {
    let code = match main_with_args(std::env::args().collect()) {
        Ok(Outcome::Ok) => exit::OK,
        Ok(Outcome::Invalid) => exit::INVALID,
        Err(e) => {
            eprintln!("blaster: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
