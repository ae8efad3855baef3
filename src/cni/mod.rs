//! The CNI protocol: errors and their codes, versions, the environment, results.

pub mod env;
pub mod error;
mod kernel;
pub mod result;
pub mod version;

pub use error::{code, Error, Result};
