//! The CNI protocol: errors and their codes, versions, the environment, results.

pub mod error;
pub mod version;

pub use error::{code, Error, Result};
