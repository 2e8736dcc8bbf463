//! Everything the commands print on stdout goes through here.

/// `print!` through [`write_out`](crate::output::write_out).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_out(format_args!($($arg)*)) };
}

/// `println!` through [`write_out`](crate::output::write_out).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Writes `text` to stdout. A closed stdout (`| head`) ends the command
/// quietly with status 0: whoever read it has what they wanted.
pub fn write_out(text: impl std::fmt::Display) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = write!(stdout, "{text}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
}
