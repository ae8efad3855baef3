//! Built-in IPAM (being written).
