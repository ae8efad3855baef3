//! Quiet success: an invocation that succeeds prints nothing on stderr (containerd copies
//! a plugin's stderr into the node's journal) unless it repaired something another program
//! took. Normal lifecycle events (a network's objects released, GC's removals) are noted
//! here instead: appended to the file `ACADEMY_DEBUG_LOG` names, when it is set; nowhere
//! otherwise. Never stdout, which is the runtime's.

use std::io::Write;

/// Appends one line to the debug log, if there is one. Best effort.
pub fn debug(line: impl std::fmt::Display) {
    let Some(path) = std::env::var_os("ACADEMY_DEBUG_LOG") else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = writeln!(f, "academy[{}]: {line}", std::process::id());
    }
}
