//! The CNI verbs, one file each: what each one does, as a list of steps whose order is
//! the point. The mechanisms they call live below (firewall/, wire/, addressing/, removal).

pub mod add;
pub mod check;
pub mod del;
pub mod gc;
pub mod status;
