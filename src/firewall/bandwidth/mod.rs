//! The `bandwidth` capability and the reference bandwidth plugin's keys: an attachment's
//! traffic shaped on the host side only, as the reference does it (plugins/meta/bandwidth,
//! ifb_creator.go), so ADD enters the container's netns no more often than without it:
//!
//! - ingress (to the container): a TBF as the root qdisc of its host veth, whose egress
//!   is the container's ingress;
//! - egress (from the container): the host veth's ingress qdisc with a u32 match-all
//!   filter whose mirred action redirects every packet to the egress of an ifb, whose
//!   root qdisc is a TBF.
//!
//! The ifb is named from the attachment, "bwp" + the 11 hex digits of its host veth's name
//! (14 characters; the reference's are "bwp" + 12, so the two never collide), and carries
//! the host veth's owner alias, by which the one removal, CHECK and GC know it. It is tc
//! state, not nf_tables, but per-attachment state all the same, so it is a kind of the
//! table (firewall/mod.rs); its operations open their own rtnetlink socket.
//!
//! What goes with what: the qdiscs and the filter of the host veth go with the veth; the
//! removal deletes the ifb (its TBF with it), in the same request as the host veth. No nf_tables reload or flush touches tc.
//! `missing` and `restore` put back the redirect from a host veth to its attachment's
//! existing ifb (an ifb exists only for a shaped egress), and a TBF deleted by hand
//! with the rates ADD recorded (rates.rs; an attachment an older academy added has no
//! record, and its TBF is CHECK's to report and DEL and ADD's to repair). Nothing is
//! network-wide.

use std::collections::{HashMap, HashSet};

use super::{Adding, Checking, Diff, Looking, Releasing, Removing, Repair, Sweeping, Wired};

mod rates;
use crate::attachment::{self, Attachment};
use crate::cni::result::{format_mac, Interface};
use crate::cni::{code, Error, Result};
use crate::config::{Config, Shape};
use crate::netlink::{Link, LinkKind, Netlink, Object, Tbf};
use crate::wire;

/// The ifb of an attachment: "bwp" + its host veth's hash digits.
pub fn ifb_name(who: &Attachment) -> String {
    ifb_for(&who.host_name())
}

fn ifb_for(host_veth: &str) -> String {
    format!("bwp{}", &host_veth[4..])
}

/// True for names `ifb_name` makes ("bwp" + 11 hex digits).
fn is_derived(name: &str) -> bool {
    name.len() == 14
        && name.starts_with("bwp")
        && name[3..]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_ifb(link: &Link) -> bool {
    link.kind == LinkKind::Other("ifb".into())
}

/// What is under an attachment's ifb name.
enum Found {
    Absent,
    /// An ifb with this attachment's alias, or none (an ADD killed between creating and
    /// labelling it: nothing else makes "bwp" + 11 hex names).
    Ours(Link),
    Foreign(String),
}

fn ifb_of(nl: &mut Netlink, who: &Attachment) -> Result<Found> {
    let name = ifb_name(who);
    Ok(match nl.link(&name)? {
        None => Found::Absent,
        Some(l) if is_ifb(&l) && l.alias.as_deref().is_none_or(|a| a == who.alias()) => {
            Found::Ours(l)
        }
        Some(l) => Found::Foreign(match &l.alias {
            Some(a) => format!("it is {} with alias {a:?}", wire::kind_name(&l.kind)),
            None => format!("it is {}", wire::kind_name(&l.kind)),
        }),
    })
}

fn foreign(name: &str, why: &str) -> Error {
    Error::new(
        code::HOST_NAME_TAKEN,
        format!("ifb {name}, which academy derives from this container id and ifname for egress shaping, already exists and is not academy's: {why}"),
    )
    .details("academy will not delete a link it did not make; remove it by hand if it is stale")
}

/// ADD's step, on the host side, once the pair exists with its host end down: the TBF of
/// ingress on the host veth, and for egress the ifb, its TBF, then the redirect to it;
/// then the host veth up. Each qdisc goes on a device that is down: on an up one the
/// kernel waits out an RCU grace period per qdisc (qdisc_graft's dev_deactivate): with
/// both directions shaped, ADD took 1.01 to 3.27 times an unshaped ADD that way, and
/// 0.97 to 1.27 times this way (medians of 20 to 40 interleaved runs of each, paired, on
/// a shared 2-CPU node). Returns the ifb as the reference reports it (appended to the
/// result's interfaces).
pub fn add(a: &mut Adding) -> Result<()> {
    let (Some((host, _)), Some(bw)) = (&a.host, a.conf.bandwidth) else {
        return Ok(());
    };
    let (nl, who) = (&mut *a.nl, a.who);
    let veth = nl.link(host)?.ok_or_else(|| wire::vanished(host))?;
    if let Some(s) = bw.ingress {
        add_tbf(nl, &veth, s)?;
    }
    let ifb = match bw.egress {
        Some(s) => Some(add_egress(nl, who, &veth, s)?),
        None => None,
    };
    nl.set_up(veth.index)?;
    a.interfaces.extend(ifb);
    Ok(())
}

/// The host veth's TBF. One already there is accepted when it is the one the config
/// makes: a restore beside this ADD put it back from this attachment's runtime record,
/// written before the veth was made.
fn add_tbf(nl: &mut Netlink, veth: &Link, s: Shape) -> Result<()> {
    match nl.add_tbf(veth.index, &tbf(s)) {
        Err(e) if e.is(libc::EEXIST) => {
            match compare(
                &format!("host veth {}", veth.name),
                "ingress",
                s,
                root_tbf(nl, veth.index)?,
            ) {
                None => Ok(()),
                Some(_) => Err(e.into()),
            }
        }
        other => Ok(other?),
    }
}

/// The ifb, its TBF, the host veth's ingress qdisc and the redirect.
fn add_egress(nl: &mut Netlink, who: &Attachment, veth: &Link, s: Shape) -> Result<Interface> {
    let name = ifb_name(who);
    match nl.create_ifb(&name, veth.mtu) {
        Err(e) if e.is(libc::EEXIST) => match ifb_of(nl, who)? {
            // A killed ADD of this attachment left it (its veth was replaced since).
            Found::Ours(old) => {
                eprintln!("academy: replacing the stale ifb {name} of {}", who.alias());
                wire::delete_if_present(nl, old.index)?;
                nl.create_ifb(&name, veth.mtu)?;
            }
            Found::Absent => nl.create_ifb(&name, veth.mtu)?,
            Found::Foreign(why) => return Err(foreign(&name, &why)),
        },
        other => other?,
    }
    let ifb = nl.link(&name)?.ok_or_else(|| wire::vanished(&name))?;
    // Shaped while down (no grace period to wait out), labelled and up before anything
    // is redirected to it.
    nl.add_tbf(ifb.index, &tbf(s))?;
    nl.label_and_up(ifb.index, &who.alias())?;
    // A restore (the watch's, after a flush) running beside this ADD sees the labelled
    // veth and ifb and may put the qdisc and the redirect first: an ingress qdisc has
    // no parameters, so one there is this one, and the redirect is made once.
    match nl.add_ingress_qdisc(veth.index) {
        Err(e) if e.is(libc::EEXIST) => {
            if !nl.redirects(veth.index)?.contains(&ifb.index) {
                nl.add_redirect(veth.index, ifb.index)?;
            }
        }
        other => {
            other?;
            nl.add_redirect(veth.index, ifb.index)?;
        }
    }
    Ok(Interface {
        name,
        mac: ifb.mac.map(format_mac).unwrap_or_default(),
        mtu: None,
        sandbox: String::new(),
    })
}

fn tbf(s: Shape) -> Tbf {
    Tbf::shaping(s.rate, s.burst)
}

/// The one removal: the attachment's ifb, if it is its (the veth's qdiscs go with it).
/// Looked up whatever the config says (the keys may have been taken out since ADD):
/// one link lookup on the removal's socket when there is none. An ifb whose host veth
/// is there and the attachment's is not deleted here but put, with that veth, in the
/// attachment's removal group, which the pair's step then deletes in one request
/// (wire::removal_group: one grace period instead of two). A removal killed between
/// the marks and the deletion leaves both links, each still the attachment's by its
/// alias, for the next one to mark again and delete.
pub fn remove(r: &mut Removing) -> Result<()> {
    let conf = r.conf;
    let mut own;
    let nl = match r.nl.as_deref_mut() {
        Some(nl) => nl,
        None => {
            own = Netlink::open()?;
            &mut own
        }
    };
    match ifb_of(nl, &r.who)? {
        Found::Ours(ifb) => {
            let veth = nl.link(&r.who.host_name())?;
            match veth.filter(|v| wire::is_own_pair(v, &r.who)) {
                Some(veth) => {
                    // The veth first: gone meanwhile, the ifb goes alone; the ifb gone
                    // meanwhile, the veth's group holds it alone.
                    let group = wire::removal_group(&r.who);
                    match nl.set_group(veth.index, group) {
                        Err(e) if e.is(libc::ENODEV) => {
                            return wire::delete_if_present(nl, ifb.index).map(drop)
                        }
                        other => other?,
                    }
                    match nl.set_group(ifb.index, group) {
                        Err(e) if e.is(libc::ENODEV) => Ok(()),
                        other => Ok(other?),
                    }
                }
                // Nothing to go with: alone.
                None => wire::delete_if_present(nl, ifb.index).map(drop),
            }
        }
        Found::Foreign(why) => {
            eprintln!(
                "academy: {} on network {} is not {}'s ifb ({why}); left alone",
                ifb_name(&r.who),
                conf.name,
                r.who.owner()
            );
            Ok(())
        }
        Found::Absent => Ok(()),
    }
}

/// CHECK: the shaping the config asks for is on the host side: the TBF of each shaped
/// direction with the parameters its rate and burst make, the ifb up, and the redirect
/// to it (which the restore command can put back; the rest needs DEL and ADD).
pub fn check(c: &mut Checking) -> Result<Vec<Diff>> {
    let (conf, who) = (c.conf, c.who);
    let Some(bw) = conf.bandwidth else {
        return Ok(Vec::new());
    };
    let mut nl = Netlink::open()?;
    let host = who.host_name();
    // A missing veth is check_host's to report.
    let Some(veth) = nl.link(&host)? else {
        return Ok(Vec::new());
    };
    let mut diffs = Vec::new();
    let mut diff = |text: String, restorable: bool| diffs.push(Diff { text, restorable });
    if let Some(s) = bw.ingress {
        let found = root_tbf(&mut nl, veth.index)?;
        if let Some(text) = compare(&format!("host veth {host}"), "ingress", s, found) {
            diff(text, false);
        }
    }
    if let Some(s) = bw.egress {
        let name = ifb_name(who);
        match ifb_of(&mut nl, who)? {
            Found::Absent => diff(
                format!(
                    "ifb {name} is missing: traffic from the container is not limited to {} bit/s",
                    s.rate
                ),
                false,
            ),
            Found::Foreign(why) => {
                diff(format!("{name} is not this attachment's ifb: {why}"), false)
            }
            Found::Ours(ifb) => {
                if !ifb.up {
                    diff(
                        format!("ifb {name} is down: traffic from the container is dropped"),
                        false,
                    );
                }
                let found = root_tbf(&mut nl, ifb.index)?;
                if let Some(text) = compare(&format!("ifb {name}"), "egress", s, found) {
                    diff(text, false);
                }
                if !nl.redirects(veth.index)?.contains(&ifb.index) {
                    diff(
                        format!("host veth {host} does not redirect its ingress to ifb {name}: traffic from the container is not limited"),
                        true,
                    );
                }
            }
        }
    }
    Ok(diffs)
}

fn root_tbf(nl: &mut Netlink, index: u32) -> Result<Option<Tbf>> {
    Ok(nl
        .qdiscs(index)?
        .into_iter()
        .find(|q| q.root)
        .and_then(|q| q.tbf))
}

/// The difference between the TBF a direction's shape makes and the one found, if any.
fn compare(on: &str, direction: &str, s: Shape, found: Option<Tbf>) -> Option<String> {
    let want = tbf(s).as_kept();
    match found {
        None => Some(format!(
            "{on} has no tbf qdisc: {direction} traffic is not limited to {} bit/s",
            s.rate
        )),
        Some(got) if got != want => Some(format!(
            "{on}'s tbf qdisc has rate {} B/s, limit {} B, buffer {} ticks, but {direction}Rate {} and {direction}Burst {} make rate {} B/s, limit {} B, buffer {} ticks",
            got.rate, got.limit, got.buffer, s.rate, s.burst, want.rate, want.limit, want.buffer
        )),
        Some(_) => None,
    }
}

/// GC: the ifbs of this network whose owner is not live, and unlabelled ifbs of academy's
/// names whose host veth is gone (an ADD killed between creating and labelling one).
pub fn sweep(s: &mut Sweeping) {
    // Whatever the config says: its keys may have been taken out since the ifbs were made.
    let (conf, live, errors) = (s.conf, s.live, &mut *s.errors);
    let mut nl = match Netlink::open() {
        Ok(nl) => nl,
        Err(e) => return errors.push(e.into()),
    };
    let links = match nl.links() {
        Ok(l) => l,
        Err(e) => return errors.push(e.into()),
    };
    let names: HashSet<&str> = links.iter().map(|l| l.name.as_str()).collect();
    for link in links.iter().filter(|l| is_ifb(l)) {
        let stale = match link.alias.as_deref().map(attachment::owner) {
            Some(Some((network, cid, ifname))) => {
                network == conf.name && !live.owns(&Attachment::new(network, cid, ifname).owner())
            }
            Some(None) => false,
            None => {
                is_derived(&link.name)
                    && !names.contains(format!("veth{}", &link.name[3..]).as_str())
            }
        };
        if !stale {
            continue;
        }
        match wire::delete_if_present(&mut nl, link.index) {
            Ok(_) => {
                let owner = link.alias.as_deref().unwrap_or("unlabelled");
                crate::log::debug(format_args!("GC deleted ifb {} ({owner})", link.name));
                s.removed.push(format!("ifb {} ({owner})", link.name));
            }
            Err(e) => errors.push(e.context(format!("GC could not delete ifb {}", link.name))),
        }
    }
}

/// The redirects missing from the network's wired attachments that have an ifb, and
/// the TBFs their runtime records ask for that tc lacks (rates.rs).
pub fn missing(l: &mut Looking) -> Result<Vec<String>> {
    let mut missing: Vec<String> = unredirected(l.conf, l.wired)?
        .into_iter()
        .map(|(veth, ifb)| {
            format!(
                "the redirect of host veth {} to ifb {}",
                veth.name, ifb.name
            )
        })
        .collect();
    if l.conf.shapes && !l.wired.attachments.is_empty() {
        let (lost, _) = rates::lost(&mut Netlink::open()?, l.conf, l.wired)?;
        missing.extend(lost.into_iter().map(|l| l.words));
    }
    Ok(missing)
}

/// Puts back what `missing` names: the ingress qdisc (unless there) and the redirect,
/// and the recorded TBFs; says what it could not.
pub fn restore(l: &mut Looking) -> Result<Repair> {
    let mut repair = Repair::default();
    if !l.conf.shapes || l.wired.attachments.is_empty() {
        return Ok(repair);
    }
    let gaps = unredirected(l.conf, l.wired)?;
    let mut nl = Netlink::open()?;
    for (veth, ifb) in gaps {
        match nl.add_ingress_qdisc(veth.index) {
            Err(e) if !e.is(libc::EEXIST) => return Err(e.into()),
            _ => {}
        }
        nl.add_redirect(veth.index, ifb.index)?;
        repair.put_back.push(format!(
            "the redirect of host veth {} to ifb {}",
            veth.name, ifb.name
        ));
    }
    let (lost, not) = rates::lost(&mut nl, l.conf, l.wired)?;
    repair.not_put_back = not;
    let (done, refused) = rates::put_back(&mut nl, lost)?;
    repair.put_back.extend(done);
    repair.not_put_back.extend(refused);
    Ok(repair)
}

/// (host veth, ifb) of each wired attachment whose ifb is there but not redirected to.
fn unredirected(conf: &Config, wired: &Wired) -> Result<Vec<(Link, Link)>> {
    if !conf.shapes || wired.attachments.is_empty() {
        return Ok(Vec::new());
    }
    let mut nl = Netlink::open()?;
    let links: HashMap<String, Link> = nl
        .links()?
        .into_iter()
        .map(|l| (l.name.clone(), l))
        .collect();
    let mut gaps = Vec::new();
    for a in &wired.attachments {
        let who = a.who(conf);
        let (Some(veth), Some(ifb)) = (links.get(&who.host_name()), links.get(&ifb_name(&who)))
        else {
            continue;
        };
        if !is_ifb(ifb) || ifb.alias.as_deref() != Some(who.alias().as_str()) {
            continue;
        }
        if !nl.redirects(veth.index)?.contains(&ifb.index) {
            gaps.push((veth.clone(), ifb.clone()));
        }
    }
    Ok(gaps)
}

/// Nothing of the kind is the network's own.
pub fn objects(_r: &mut Releasing) -> Result<Option<Vec<Object>>> {
    Ok(Some(Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifb_names_follow_the_host_veth_and_fit() {
        let who = Attachment::new("net", "c1", "eth0");
        let name = ifb_name(&who);
        assert_eq!(name.len(), 14);
        assert!(is_derived(&name));
        assert_eq!(&name[3..], &who.host_name()[4..]);
        // The reference's (bwp + 12 hex) and anything else are not academy's.
        for other in ["bwp0123456789ab", "bwp0123", "ifb0", "bwpXXXXXXXXXXX"] {
            assert!(!is_derived(other), "{other}");
        }
    }
}
