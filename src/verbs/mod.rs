//! The CNI verbs, one file each: what each one does, as a list of steps whose order is
//! the point. The mechanisms they call live below (firewall/, wire/, addressing/, removal).

pub mod add;
pub mod check;
pub mod del;
pub mod gc;
pub mod status;

/// What a verb that succeeded still has open as it returns (its sockets, the netns, the
/// store with the reservations it linked): the process exits right after it prints,
/// and the kernel closes every descriptor then, flocks included, so src/main.rs exits
/// with them still held instead of closing each (a syscall apiece, 7 an ADD). Only a
/// success's: a verb that fails has undone its work and closed what it opened, and
/// what it kept here closes only at the exit, after the output is written.
#[derive(Default)]
pub struct LeftOpen(Vec<Box<dyn std::any::Any>>);

impl LeftOpen {
    pub fn keep(&mut self, open: impl std::any::Any) {
        self.0.push(Box::new(open));
    }
}
