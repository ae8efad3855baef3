//! The one error type. Every failure that reaches the runtime is one of these, printed as
//! CNI error JSON on stdout; the code is chosen where the error is made, so the mapping
//! from cause to well-known code lives next to the cause.

use std::fmt;

/// Well-known codes (CNI spec, "Error" section) and academy's own (100 and up).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const INVALID_ENVIRONMENT: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const NOT_AVAILABLE: u32 = 50;

    /// The kernel refused a netlink request while wiring or unwiring.
    pub const KERNEL_REFUSED: u32 = 100;
    /// CNI_IFNAME is already taken inside the container's netns.
    pub const NAME_IN_USE: u32 = 101;
    /// CNI_NETNS could not be opened or entered.
    pub const NETNS_UNUSABLE: u32 = 102;
    /// A host name academy needs (the bridge, the host veth, an nf_tables set or chain
    /// of its table) belongs to something academy did not make for it.
    pub const HOST_NAME_TAKEN: u32 = 103;
    /// A host port asked for in portMappings is published by another attachment.
    pub const PORT_TAKEN: u32 = 105;
    /// No free address is left in the range.
    pub const ADDRESS_EXHAUSTED: u32 = 110;
    /// A requested address (testAddress, IP=, ips) is held by someone else or outside the range.
    pub const ADDRESS_UNAVAILABLE: u32 = 111;
    /// CHECK found the kernel state differs from what ADD reported.
    pub const CHECK_MISMATCH: u32 = 120;
    /// academy itself failed (a bug); libcni's ErrInternal.
    pub const INTERNAL: u32 = 999;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Adds the "what to do" part (or the low-level cause) shown after the message.
    pub fn details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    pub fn env(msg: impl Into<String>) -> Self {
        Error::new(code::INVALID_ENVIRONMENT, msg)
    }

    pub fn config(msg: impl Into<String>) -> Self {
        Error::new(code::INVALID_CONFIG, msg)
    }

    pub fn io(msg: impl Into<String>, err: &std::io::Error) -> Self {
        Error::new(code::IO_FAILURE, format!("{}: {err}", msg.into()))
    }

    /// Prefixes the message with what was being done, keeping code and details.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }

    pub fn to_json(&self, cni_version: &str) -> String {
        serde_json::json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
            "details": self.details,
        })
        .to_string()
    }
}

/// `text` cut after `max` characters (with "..."), for quoting something of unknown size
/// (a file's content, another program's output, a prevResult) in a message.
pub fn cut_short(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}
