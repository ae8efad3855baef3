//! Random bytes from getrandom(2), the one place academy asks the kernel for them (a
//! container's MAC, a temporary file's name). std has no public way, and nix does not
//! wrap the call.

/// Fills `bytes` from the kernel's pool; false when it could not (a seccomp filter, a
/// kernel without the call), and the caller falls back to what still varies. A small
/// request never blocks once the pool is initialised and is never cut short.
pub fn fill(bytes: &mut [u8]) -> bool {
    // SAFETY: the kernel writes at most bytes.len() bytes into `bytes`, a live buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    n == bytes.len() as isize
}
