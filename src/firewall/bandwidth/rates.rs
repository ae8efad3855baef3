//! The shaping the runtime records ask for (src/ipam/store/runtime.rs) that tc lacks: a
//! TBF deleted from a host veth (ingress) or from its attachment's ifb (egress). Put
//! back with the recorded rate and burst, as ADD made it. An ifb that is gone is said,
//! not rebuilt: the host veth's redirect to the deleted link stays and drops the
//! container's traffic, and only DEL and ADD replace the veth's filters.

use std::collections::HashMap;

use super::{ifb_name, ifb_of, root_tbf, tbf, Found};
use crate::cni::Result;
use crate::config::{Config, Shape};
use crate::firewall::{Asked, Wired};
use crate::netlink::{Link, Netlink};

/// A TBF to put back: on which link, with what, and in words.
pub(super) struct Lost {
    pub index: u32,
    pub shape: Shape,
    pub words: String,
}

/// (what, because) of what cannot be put back.
type Unrepaired = Vec<(String, String)>;

/// The lost TBFs, and what cannot be put back.
pub(super) fn lost(
    nl: &mut Netlink,
    conf: &Config,
    wired: &Wired,
) -> Result<(Vec<Lost>, Unrepaired)> {
    let (mut found, mut not) = (Vec::new(), Vec::new());
    let shaped: Vec<_> = wired
        .attachments
        .iter()
        .filter_map(|a| match &a.asked {
            Asked::Known(r) => r.bandwidth.map(|bw| (a, bw)),
            _ => None,
        })
        .collect();
    if shaped.is_empty() {
        return Ok((found, not));
    }
    let links: HashMap<String, Link> = nl
        .links()?
        .into_iter()
        .map(|l| (l.name.clone(), l))
        .collect();
    for (a, bw) in shaped {
        let who = a.who(conf);
        let host = who.host_name();
        let Some(veth) = links.get(&host) else {
            continue;
        };
        if let Some(shape) = bw.ingress {
            if root_tbf(nl, veth.index)?.is_none() {
                found.push(Lost {
                    index: veth.index,
                    shape,
                    words: format!(
                        "the tbf of host veth {host} (ingress, {} bit/s)",
                        shape.rate
                    ),
                });
            }
        }
        if let Some(shape) = bw.egress {
            let name = ifb_name(&who);
            match ifb_of(nl, &who)? {
                Found::Ours(ifb) if root_tbf(nl, ifb.index)?.is_none() => found.push(Lost {
                    index: ifb.index,
                    shape,
                    words: format!("the tbf of ifb {name} (egress, {} bit/s)", shape.rate),
                }),
                Found::Ours(_) | Found::Foreign(_) => {}
                Found::Absent => not.push((
                    format!(
                        "the egress shaping of {}/{} (ifb {name})",
                        a.container_id, a.ifname
                    ),
                    format!("ifb {name} is gone and host veth {host} still redirects to it; DEL and ADD the container"),
                )),
            }
        }
    }
    Ok((found, not))
}

/// Puts back `lost`: what it put back, and (what, because) of a link whose root qdisc
/// is another's (an admin's choice, CHECK's to report).
pub(super) fn put_back(nl: &mut Netlink, lost: Vec<Lost>) -> Result<(Vec<String>, Unrepaired)> {
    let (mut done, mut not) = (Vec::new(), Vec::new());
    for l in lost {
        match nl.add_tbf(l.index, &tbf(l.shape)) {
            Ok(()) => done.push(l.words),
            Err(e) if e.is(libc::EEXIST) => not.push((
                l.words,
                "another root qdisc is there, which academy does not replace".into(),
            )),
            Err(e) => return Err(e.into()),
        }
    }
    Ok((done, not))
}
