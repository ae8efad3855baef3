//! Where a network's addresses come from, as its config says: the seed's flat form or an
//! `ipam` block (academy's own allocator for host-local, a delegated plugin otherwise).

use super::*;

/// The seed's form: one range from the top-level keys, always a default route.
pub(super) fn flat_form(f: &Fields) -> Result<(Builtin, Option<IpAddr>)> {
    let subnet_text = f.string("subnet")?.ok_or_else(|| {
        Error::config("subnet is missing").details("e.g. \"subnet\": \"10.98.0.0/24\"")
    })?;
    let subnet = ranges::parse_subnet(&subnet_text, "subnet")?;
    let gateway = f
        .ip("gateway")?
        .unwrap_or_else(|| ranges::first_host(subnet));
    let pool = Pool::new(
        subnet,
        Some(gateway),
        f.ip("rangeStart")?,
        f.ip("rangeEnd")?,
    )?;
    check_host_address(subnet, gateway, "gateway")?;

    let test_address = match f.string("testAddress")? {
        None => None,
        Some(t) => {
            let parsed: IpNetwork = t.parse().map_err(|_| {
                Error::config(format!("testAddress {t:?} is not an address/prefix"))
            })?;
            if t.contains('/') && parsed.prefix() != subnet.prefix() {
                return Err(Error::config(format!(
                    "testAddress {t} has prefix /{} but subnet {subnet} is /{}",
                    parsed.prefix(),
                    subnet.prefix()
                )));
            }
            check_host_address(subnet, parsed.ip(), "testAddress")?;
            if parsed.ip() == gateway {
                return Err(Error::config(format!(
                    "testAddress {t} is the gateway address"
                )));
            }
            Some(parsed.ip())
        }
    };
    let default = IpNetwork::new(unspecified(subnet.ip()), 0).expect("prefix 0");
    Ok((
        Builtin {
            range_sets: vec![vec![pool]],
            routes: vec![RouteSpec::to(default)],
            data_dir: data_dir(f.string("dataDir")?, "dataDir", DEFAULT_DATA_DIR)?,
            resolv_conf: None,
        },
        test_address,
    ))
}

/// The reference form: `ipam` of type host-local (served by academy's allocator) or any
/// other IPAM plugin (delegated).
pub(super) fn ipam_block(
    map: &Map<String, Value>,
    requests: &Requests,
    cni_version: &str,
) -> Result<Ipam> {
    let Some(ipam) = map.get("ipam").filter(|v| !v.is_null()) else {
        return Ok(Ipam::None);
    };
    let Value::Object(ipam) = ipam else {
        return Err(Error::config(format!("ipam must be an object, got {ipam}")));
    };
    let f = Fields(ipam);
    let Some(kind) = f.string("type")?.filter(|t| !t.is_empty()) else {
        return layer2::empty_ipam(ipam);
    };
    if kind != "host-local" {
        if kind.contains('/') || kind == "." || kind == ".." {
            return Err(Error::config(format!(
                "ipam.type {kind:?} is not a plugin name"
            )));
        }
        return Ok(Ipam::Delegated(kind));
    }
    // host-local's order: runtimeConfig.ipRanges first, then the single top-level range,
    // then `ranges`.
    let mut sets = Vec::new();
    if let Some(r) = &requests.ip_ranges {
        sets.extend(ranges::parse_range_sets(r, "runtimeConfig.ipRanges", 0)?);
    }
    if f.get("subnet").is_some() {
        sets.push(vec![ranges::parse_range(
            &Value::Object(ipam.clone()),
            "ipam",
            sets.len(),
        )?]);
    }
    if let Some(r) = f.get("ranges") {
        let first = sets.len();
        sets.extend(ranges::parse_range_sets(r, "ipam.ranges", first)?);
    }
    if sets.is_empty() {
        return Err(Error::config("ipam has no subnet and no ranges")
            .details("add \"ranges\": [[{\"subnet\": \"10.98.0.0/24\"}]]"));
    }
    ranges::check_overlaps(&sets)?;

    let routes = match f.get("routes") {
        Some(list) => routes::parse_routes(list, cni_version)?,
        None => Vec::new(),
    };
    let resolv_conf = match f.string("resolvConf")?.filter(|p| !p.is_empty()) {
        None => None,
        Some(p) if p.starts_with('/') => Some(PathBuf::from(p)),
        Some(p) => {
            return Err(Error::config(format!(
                "ipam.resolvConf {p:?} must be an absolute path"
            )))
        }
    };
    Ok(Ipam::Builtin(Builtin {
        range_sets: sets,
        routes,
        data_dir: data_dir(f.string("dataDir")?, "ipam.dataDir", HOST_LOCAL_DATA_DIR)?,
        resolv_conf,
    }))
}

fn data_dir(value: Option<String>, field: &str, default: &str) -> Result<PathBuf> {
    match value {
        None => Ok(PathBuf::from(default)),
        Some(d) if d.starts_with('/') => Ok(PathBuf::from(d)),
        Some(d) => Err(Error::config(format!(
            "{field} {d:?} must be an absolute path"
        ))),
    }
}

/// `addr` must be a host address of `subnet`: inside it, and neither its network nor its
/// broadcast address.
fn check_host_address(subnet: IpNetwork, addr: IpAddr, field: &str) -> Result<()> {
    if !subnet.contains(addr) {
        return Err(Error::config(format!(
            "{field} {addr} is not inside subnet {subnet}"
        )));
    }
    if addr == subnet.network() {
        return Err(Error::config(format!(
            "{field} {addr} is the network address of {subnet}"
        )));
    }
    if let IpNetwork::V4(n) = subnet {
        if addr == IpAddr::V4(n.broadcast()) {
            return Err(Error::config(format!(
                "{field} {addr} is the broadcast address of {subnet}"
            )));
        }
    }
    Ok(())
}
