//! `ipam.resolvConf`: a resolv.conf whose nameservers, domain, search list and options
//! go into the result's `dns`, read the way host-local reads it.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::cni::{Error, Result};

/// Reads the file at ADD (as host-local does: an edit applies to the next container).
pub fn read(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::io(
            format!("cannot read ipam.resolvConf {}", path.display()),
            &e,
        )
    })?;
    Ok(parse(&text))
}

/// host-local's parser: `nameserver` and `domain` take the first word after them,
/// `search` and `options` every word; later `domain` lines win, lists accumulate;
/// comments (`#`, `;`) and other lines are skipped.
pub fn parse(text: &str) -> Value {
    let (mut nameservers, mut search, mut options) = (Vec::new(), Vec::new(), Vec::new());
    let mut domain = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with(['#', ';']) {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let [key, first, ..] = words[..] else {
            continue;
        };
        match key {
            "nameserver" => nameservers.push(first),
            "domain" => domain = Some(first),
            "search" => search.extend_from_slice(&words[1..]),
            "options" => options.extend_from_slice(&words[1..]),
            _ => {}
        }
    }
    let mut dns = Map::new();
    if !nameservers.is_empty() {
        dns.insert("nameservers".into(), json!(nameservers));
    }
    if let Some(d) = domain {
        dns.insert("domain".into(), json!(d));
    }
    if !search.is_empty() {
        dns.insert("search".into(), json!(search));
    }
    if !options.is_empty() {
        dns.insert("options".into(), json!(options));
    }
    Value::Object(dns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_host_local_reads() {
        let dns = parse(
            "# generated\n; also a comment\nnameserver 10.0.0.53\nnameserver fd00::53 extra\n\
             domain a.example\ndomain b.example\nsearch x.example y.example\nsearch z.example\n\
             options ndots:2 edns0\nsortlist 10.0.0.0\nnameserver\n",
        );
        assert_eq!(
            dns,
            json!({
                "nameservers": ["10.0.0.53", "fd00::53"],
                "domain": "b.example",
                "search": ["x.example", "y.example", "z.example"],
                "options": ["ndots:2", "edns0"],
            })
        );
        assert_eq!(parse("# nothing\n\n"), json!({}));
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        let e = read(Path::new("/nonexistent/academy-resolv.conf")).unwrap_err();
        assert_eq!(e.code, 5);
        assert!(e.msg.contains("resolvConf"), "{}", e.msg);
    }
}
