//! Netlink attributes read in place (type, length, value, each padded to 4 bytes), for
//! every message academy decodes by hand: rtnetlink's links (route/link.rs), nf_tables'
//! objects and notifications (nftables/), ctnetlink's entries (conntrack.rs).

/// The attributes in `bytes` as (type without flags, value); stops at a malformed one.
pub fn attributes(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        let value = &rest[4..len];
        rest = &rest[((len + 3) & !3).min(rest.len())..];
        Some((kind, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_stop_at_a_malformed_length() {
        let bytes = [8u8, 0, 1, 0, 1, 2, 3, 4, 200, 0, 2, 0];
        let all: Vec<_> = attributes(&bytes).collect();
        assert_eq!(all, vec![(1u16, &[1u8, 2, 3, 4][..])]);
    }
}
