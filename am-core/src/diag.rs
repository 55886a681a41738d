//! Diagnostics on stderr that several ranks print at once.
//!
//! Ranks of a job share the launcher's stderr. `eprintln!` writes a line in pieces, one
//! system call per piece, so lines of different ranks can interleave mid-line. [`emit`] writes
//! a whole report with one call instead.

use std::io::Write;

/// Write `text` to stderr with one `write` call (whole lines; a pipe keeps writes of up to
/// `PIPE_BUF`, 4 KiB on Linux, in one piece). A report is cut into pieces of whole lines that
/// fit, when it is longer.
pub fn emit(text: &str) {
    const PIECE: usize = 4096;
    let mut err = std::io::stderr().lock();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(PIECE);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end < rest.len() {
            // Cut after the last newline that fits (a line longer than a piece is cut where it
            // must be).
            if let Some(i) = rest[..end].rfind('\n') {
                end = i + 1;
            }
        }
        let _ = err.write_all(&rest.as_bytes()[..end]);
        rest = &rest[end..];
    }
}

/// `eprintln!` that writes its line with one `write` call (see [`emit`](crate::diag::emit)),
/// so that lines of ranks printing at once do not interleave mid-line.
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => {
        $crate::diag::emit(&::std::format!("{}\n", ::std::format_args!($($arg)*)))
    };
}
