//! CNI spec versions academy speaks, and how to compare them.

/// Every version academy can print a result in. 0.1.0 and 0.2.0 are not here: their
/// result shape (ip4/ip6) predates interfaces, and no runtime still sends them.
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The version used for errors when the config's own could not be read.
pub const LATEST: &str = "1.1.0";

/// (major, minor, patch) of a "x.y.z" string; None when it is not one.
pub fn parse(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    let triple = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(triple)
}

pub fn is_supported(v: &str) -> bool {
    SUPPORTED.contains(&v)
}

/// True when `v` is at least `min` (both valid versions).
pub fn at_least(v: &str, min: &str) -> bool {
    match (parse(v), parse(min)) {
        (Some(a), Some(b)) => a >= b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_compares() {
        assert_eq!(parse("1.1.0"), Some((1, 1, 0)));
        assert_eq!(parse("1.1"), None);
        assert_eq!(parse("1.1.0.0"), None);
        assert_eq!(parse("a.b.c"), None);
        assert!(at_least("1.0.0", "0.4.0"));
        assert!(at_least("0.4.0", "0.4.0"));
        assert!(!at_least("0.3.1", "0.4.0"));
        assert!(!at_least("0.10.0", "1.0.0"));
        assert!(at_least("0.10.0", "0.4.0"));
    }

    #[test]
    fn supported_list_is_ordered_and_valid() {
        for v in SUPPORTED {
            assert!(parse(v).is_some());
        }
        assert!(SUPPORTED.windows(2).all(|w| parse(w[0]) < parse(w[1])));
    }
}
