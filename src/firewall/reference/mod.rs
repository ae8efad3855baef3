//! What the reference chain (bridge + host-local + portmap + firewall) left for a
//! container made before its network was switched to academy (`academy convert
//! --in-place`). A DEL through the new conflist reaches academy, not the reference
//! plugins, so academy takes away their per-container state itself before the address
//! is freed; otherwise the next container given that address would inherit the old
//! one's published ports, and the old interface would still answer for the address.
//!
//! Recognised, as the reference plugins 1.1.1 write them through iptables-nft (read from
//! their source, and from a real run of them here):
//! - bridge's ipMasq: chain `CNI-` + 24 hex digits in table nat, jumped to from
//!   POSTROUTING by a rule commented `name: "<network>" id: "<container id>"`;
//! - portmap: chain `CNI-DN-` + 21 hex digits, jumped to from CNI-HOSTPORT-DNAT by a rule
//!   commented `dnat name: "<network>" id: "<container id>"` (and the `CNI-SN-` chain of
//!   portmap before 0.8, commented `snat name: ...`, from CNI-HOSTPORT-SNAT);
//! - firewall: in CNI-FORWARD of table filter, `-d ADDR -m conntrack --ctstate
//!   RELATED,ESTABLISHED -j ACCEPT` and `-s ADDR -j ACCEPT`, which name no container.
//!
//! A chain goes only when its name has the reference's form, a rule commented with
//! exactly this network and container id jumps to it, its own rules carry no other
//! comment, and nothing else jumps to it. The firewall's accepts carry no comment, so
//! they go only for addresses this container holds in the network's store and that no
//! other network's store (beside it in the same dataDir) holds: the plugin writes one
//! rule per address, shared by every network giving out that address, and academy must
//! not open or close another network's container. The interface goes through
//! wire::remove_reference_interface.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use crate::attachment::Attachment;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::ipam::store::StoreDir;
use crate::ipam::Store;
use crate::netlink::{
    CmpOp, Expr, Family, IptablesRemoval, IptablesRule, Netlink, Nftables, PayloadBase, Verdict,
};
use crate::wire;

const NAT: &str = "nat";
const FILTER: &str = "filter";
/// The firewall plugin's chain.
const FIREWALL_CHAIN: &str = "CNI-FORWARD";
/// xt_comment's limit with its NUL; portmap cuts longer comments to 253 bytes and "...".
const COMMENT_MAX: usize = 256;

/// What was taken away.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// Chains deleted, as "<table> <chain> (<family>)".
    pub chains: Vec<String>,
    /// Rules deleted, chains' own included.
    pub rules: usize,
    /// The container's interface, with its host peer.
    pub interface: Option<String>,
}

/// The kinds of per-container chain the reference makes: (comment prefix, chain prefix,
/// hex digits after it).
const KINDS: [(&str, &str, usize); 3] = [
    ("", "CNI-", 24),
    ("dnat ", "CNI-DN-", 21),
    ("snat ", "CNI-SN-", 21),
];

/// The comments the reference writes for (network, container id), by kind. CNI network
/// names and container ids are quoted by Go's %q; neither may hold a character %q would
/// escape (libcni's name rule, the spec's id rule), so plain quotes are the same text.
fn comments(network: &str, container_id: &str) -> Vec<String> {
    KINDS
        .iter()
        .map(|(kind, _, _)| trim(format!("{kind}name: \"{network}\" id: \"{container_id}\"")))
        .collect()
}

/// portmap's trimComment; the ipMasq comment is never that long with a 200-byte id.
fn trim(comment: String) -> String {
    if comment.len() <= COMMENT_MAX {
        return comment;
    }
    let mut end = COMMENT_MAX - 3;
    while !comment.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &comment[..end])
}

/// A chain name of the reference's per-container form for one kind.
fn per_container_chain(name: &str, prefix: &str, digits: usize) -> bool {
    name.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == digits && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// DEL's step for a container the reference made: its iptables chains and rules (both
/// families), the firewall's accepts for its addresses, and its interface in `netns`.
/// Cheap when there is none: one dump of each family's nat table, one of each
/// CNI-FORWARD chain, and one link lookup.
pub fn remove_leftovers(
    nft: &mut Nftables,
    conf: &Config,
    who: &Attachment,
    netns: &str,
) -> Result<Removed> {
    let mut removed = Removed::default();
    // A container academy made has its holder index: the reference made nothing for it,
    // and every DEL would otherwise pay four dumps and a link lookup to find so.
    if let Some(b) = conf.builtin() {
        if Store::open(&b.data_dir, &conf.name)?.has_index(&who.holder())? {
            return Ok(removed);
        }
    }
    let ours = comments(who.network, who.container_id);
    for family in [Family::V4, Family::V6] {
        let rules = nft.iptables_rules(family, NAT, None)?;
        let plan = nat_plan(&rules, &ours);
        apply(nft, family, NAT, plan, &mut removed)?;
    }
    let mut firewall = Vec::new();
    for family in [Family::V4, Family::V6] {
        let rules = nft.iptables_rules(family, FILTER, Some(FIREWALL_CHAIN))?;
        if rules.iter().any(|r| firewall_address(r, family).is_some()) {
            firewall.push((family, rules));
        }
    }
    if !firewall.is_empty() {
        let addresses = exclusively_held(conf, who)?;
        for (family, rules) in firewall {
            let plan = IptablesRemoval {
                rules: rules
                    .iter()
                    .filter(|r| firewall_address(r, family).is_some_and(|a| addresses.contains(&a)))
                    .map(|r| (r.chain.clone(), r.handle))
                    .collect(),
                chains: Vec::new(),
            };
            apply(nft, family, FILTER, plan, &mut removed)?;
        }
    }
    let mut nl = Netlink::open()?;
    removed.interface = wire::remove_reference_interface(&mut nl, &conf.bridge, who, netns)?;
    if removed != Removed::default() {
        eprintln!(
            "academy: removed what the reference plugins left for container {} on network {}: {}",
            who.container_id,
            who.network,
            describe(&removed)
        );
    }
    Ok(removed)
}

fn describe(r: &Removed) -> String {
    let mut parts = vec![format!("{} iptables rule(s)", r.rules)];
    if !r.chains.is_empty() {
        parts.push(format!("chain(s) {}", r.chains.join(", ")));
    }
    if let Some(i) = &r.interface {
        parts.push(format!("interface {i}"));
    }
    parts.join("; ")
}

/// Sends one table's removal; a chain another rule still jumps to (EBUSY: it changed
/// since the dump) is kept and emptied of nothing, its jumps from this container gone.
fn apply(
    nft: &mut Nftables,
    family: Family,
    table: &'static str,
    plan: IptablesRemoval,
    removed: &mut Removed,
) -> Result<()> {
    if plan.is_empty() {
        return Ok(());
    }
    let plan = match nft.remove_iptables(family, table, &plan) {
        Err(e) if e.is(libc::EBUSY) && !plan.chains.is_empty() => {
            eprintln!(
                "academy: kept iptables' chain(s) {} of table {table}: something else jumps to them now",
                plan.chains.join(", ")
            );
            let rules_only = IptablesRemoval {
                rules: plan.rules,
                chains: Vec::new(),
            };
            nft.remove_iptables(family, table, &rules_only)
                .map_err(Error::from)?;
            rules_only
        }
        other => other.map(|()| plan).map_err(Error::from)?,
    };
    removed.rules += plan.rules.len();
    removed.chains.extend(
        plan.chains
            .iter()
            .map(|c| format!("{table} {c} ({family:?})")),
    );
    Ok(())
}

/// Which rules and chains of a nat table are this container's (see the module's rules).
fn nat_plan(rules: &[IptablesRule], ours: &[String]) -> IptablesRemoval {
    let is_ours = |r: &IptablesRule| r.comments.iter().any(|c| ours.contains(c));
    let mut chains = BTreeSet::new();
    for r in rules.iter().filter(|r| is_ours(r)) {
        let Some(target) = r.target_chain() else {
            continue;
        };
        let kind = KINDS
            .iter()
            .zip(ours)
            .find(|((_, prefix, digits), comment)| {
                r.comments.contains(comment) && per_container_chain(target, prefix, *digits)
            });
        if kind.is_some() {
            chains.insert(target.to_string());
        }
    }
    // A chain holding a rule commented for someone else, or jumped to by a rule that is
    // neither ours nor inside a chain that goes, is not this container's alone.
    chains.retain(|chain| {
        let inside_foreign = rules
            .iter()
            .filter(|r| &r.chain == chain)
            .any(|r| r.comments.iter().any(|c| !ours.contains(c)));
        let referenced_elsewhere = rules
            .iter()
            .any(|r| r.target_chain() == Some(chain.as_str()) && !is_ours(r) && &r.chain != chain);
        !inside_foreign && !referenced_elsewhere
    });
    let mut doomed: Vec<(String, u64)> = rules
        .iter()
        .filter(|r| is_ours(r) || chains.contains(&r.chain))
        .map(|r| (r.chain.clone(), r.handle))
        .collect();
    doomed.sort();
    doomed.dedup();
    IptablesRemoval {
        rules: doomed,
        chains: chains.into_iter().collect(),
    }
}

/// The address a firewall-plugin accept of CNI-FORWARD is for, if the rule is exactly
/// one of the plugin's two forms (counters aside) and carries no comment.
fn firewall_address(r: &IptablesRule, family: Family) -> Option<IpAddr> {
    if r.chain != FIREWALL_CHAIN || !r.comments.is_empty() {
        return None;
    }
    let (len, saddr, daddr) = match family {
        Family::V4 => (4, 12, 16),
        Family::V6 => (16, 8, 24),
    };
    let shape = r.shape();
    let (offset, bytes) = match shape.as_slice() {
        [Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len: l,
            ..
        }, Expr::Cmp {
            op: CmpOp::Eq,
            data: bytes,
            ..
        }, Expr::Match { name: m, .. }, Expr::Verdict(Verdict::Accept)]
            if *offset == daddr && *l == len && m == "conntrack" =>
        {
            (*offset, bytes)
        }
        [Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len: l,
            ..
        }, Expr::Cmp {
            op: CmpOp::Eq,
            data: bytes,
            ..
        }, Expr::Verdict(Verdict::Accept)]
            if *offset == saddr && *l == len =>
        {
            (*offset, bytes)
        }
        _ => return None,
    };
    let _ = offset;
    match family {
        Family::V4 => <[u8; 4]>::try_from(bytes.as_slice()).ok().map(IpAddr::from),
        Family::V6 => <[u8; 16]>::try_from(bytes.as_slice())
            .ok()
            .map(IpAddr::from),
    }
}

/// The addresses this container holds in the network's store (read by content: the
/// reference's reservations have no academy index) that no other network's store in the
/// same dataDir holds. None without academy's store (a delegated IPAM).
fn exclusively_held(conf: &Config, who: &Attachment) -> Result<Vec<IpAddr>> {
    let Some(builtin) = conf.builtin() else {
        return Ok(Vec::new());
    };
    let Some(store) = StoreDir::open(&builtin.data_dir.join(&conf.name))? else {
        return Ok(Vec::new());
    };
    let held: Vec<IpAddr> = store
        .reservations()?
        .into_iter()
        .filter(|r| {
            r.container_id == who.container_id
                && r.ifname.as_deref().is_none_or(|i| i == who.ifname)
        })
        .map(|r| r.address)
        .collect();
    let others = other_networks(&builtin.data_dir, &conf.name);
    Ok(held
        .into_iter()
        .filter(|a| {
            !others
                .iter()
                .any(|dir| std::fs::symlink_metadata(dir.join(a.to_string())).is_ok())
        })
        .collect())
}

fn other_networks(data_dir: &Path, network: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(data_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name() != network && e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// One per-container rule of the reference found for a network (`academy convert`'s
/// report of what DEL will take away).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub container_id: String,
    pub family: Family,
    /// The chain of the commented rule (POSTROUTING, CNI-HOSTPORT-DNAT, ...).
    pub from: String,
    /// The per-container chain it jumps to, when of the reference's form.
    pub chain: Option<String>,
    pub comment: String,
}

/// The reference's commented per-container rules of `network`, in both families' nat
/// tables, with the container id each names.
pub fn survey(nft: &mut Nftables, network: &str) -> Result<Vec<Leftover>> {
    let mut found = Vec::new();
    for family in [Family::V4, Family::V6] {
        for rule in nft.iptables_rules(family, NAT, None)? {
            // The rules inside a per-container chain repeat its jump's comment.
            let inside = KINDS
                .iter()
                .any(|(_, prefix, digits)| per_container_chain(&rule.chain, prefix, *digits));
            if inside {
                continue;
            }
            for comment in &rule.comments {
                let Some((kind, container_id)) = names(comment, network) else {
                    continue;
                };
                let (_, prefix, digits) = KINDS[kind];
                let chain = rule
                    .target_chain()
                    .filter(|t| per_container_chain(t, prefix, digits))
                    .map(str::to_string);
                found.push(Leftover {
                    container_id,
                    family,
                    from: rule.chain.clone(),
                    chain,
                    comment: comment.clone(),
                });
            }
        }
    }
    Ok(found)
}

/// The kind (index in KINDS) and container id of a reference comment for `network`.
fn names(comment: &str, network: &str) -> Option<(usize, String)> {
    KINDS.iter().enumerate().find_map(|(i, (kind, _, _))| {
        let rest = comment.strip_prefix(&format!("{kind}name: \"{network}\" id: \""))?;
        let id = rest
            .strip_suffix('"')
            .or_else(|| rest.strip_suffix("..."))?;
        Some((i, id.to_string()))
    })
}

/// The addresses the firewall plugin accepts in CNI-FORWARD, both families.
pub fn firewall_accepts(nft: &mut Nftables) -> Result<Vec<IpAddr>> {
    let mut found = Vec::new();
    for family in [Family::V4, Family::V6] {
        let rules = nft.iptables_rules(family, FILTER, Some(FIREWALL_CHAIN))?;
        found.extend(rules.iter().filter_map(|r| firewall_address(r, family)));
    }
    found.sort();
    found.dedup();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::model::Reg;

    const NET: &str = "expnet";
    const CID: &str = "cnitool-767de159e706b79ef4ea";
    const MASQ: &str = "CNI-f932e8dd6bf382c1e3921eeb";
    const DN: &str = "CNI-DN-f932e8dd6bf382c1e3921";

    fn rule(chain: &str, handle: u64, comment: Option<&str>, exprs: Vec<Expr>) -> IptablesRule {
        IptablesRule {
            chain: chain.into(),
            handle,
            comments: comment.map(str::to_string).into_iter().collect(),
            exprs,
        }
    }

    /// An xt target or match by name (what telling the reference's rules apart reads).
    fn target(name: &str) -> Expr {
        Expr::Target {
            name: name.into(),
            rev: 0,
            info: Vec::new(),
        }
    }

    fn xt_match(name: &str) -> Expr {
        Expr::Match {
            name: name.into(),
            rev: 0,
            info: Vec::new(),
        }
    }

    fn jump(chain: &str) -> Expr {
        Expr::Verdict(Verdict::Jump(chain.into()))
    }

    /// The nat table of the real run in the module's doc: one container with ipMasq and
    /// one published port, plus the shared chains.
    fn table() -> Vec<IptablesRule> {
        let c = format!("name: \"{NET}\" id: \"{CID}\"");
        let d = format!("dnat name: \"{NET}\" id: \"{CID}\"");
        vec![
            rule(
                "POSTROUTING",
                10,
                Some("CNI portfwd requiring masquerade"),
                vec![jump("CNI-HOSTPORT-MASQ")],
            ),
            rule("POSTROUTING", 5, Some(&c), vec![jump(MASQ)]),
            rule(MASQ, 2, Some(&c), vec![Expr::Verdict(Verdict::Accept)]),
            rule(MASQ, 3, Some(&c), vec![target("MASQUERADE")]),
            rule("PREROUTING", 13, None, vec![jump("CNI-HOSTPORT-DNAT")]),
            rule(
                "CNI-HOSTPORT-DNAT",
                20,
                Some(&d),
                vec![xt_match("multiport"), jump(DN)],
            ),
            rule(DN, 17, None, vec![jump("CNI-HOSTPORT-SETMARK")]),
            rule(DN, 19, None, vec![target("DNAT")]),
            rule(
                "CNI-HOSTPORT-SETMARK",
                7,
                Some("CNI portfwd masquerade mark"),
                vec![],
            ),
        ]
    }

    #[test]
    fn the_container_s_chains_and_jumps_go_and_the_shared_ones_stay() {
        let plan = nat_plan(&table(), &comments(NET, CID));
        assert_eq!(plan.chains, [DN, MASQ]);
        let handles: Vec<u64> = plan.rules.iter().map(|(_, h)| *h).collect();
        assert_eq!(handles, [17, 19, 20, 2, 3, 5]);
    }

    #[test]
    fn another_container_or_network_is_not_matched() {
        for (net, cid) in [
            (NET, "cnitool-767de159e706b79ef4e"),
            ("expne", CID),
            (NET, &format!("{CID}x")[..]),
        ] {
            assert!(
                nat_plan(&table(), &comments(net, cid)).is_empty(),
                "{net} {cid}"
            );
        }
    }

    #[test]
    fn a_chain_someone_else_uses_is_kept_but_the_jump_goes() {
        let mut rules = table();
        rules.push(rule("OUTPUT", 30, None, vec![jump(DN)]));
        let plan = nat_plan(&rules, &comments(NET, CID));
        assert_eq!(plan.chains, [MASQ]);
        assert!(plan.rules.contains(&("CNI-HOSTPORT-DNAT".into(), 20)));
        assert!(!plan.rules.iter().any(|(c, _)| c == DN));
        // A chain with a rule commented for another container is not ours alone.
        let mut rules = table();
        rules.push(rule(MASQ, 4, Some("name: \"other\" id: \"x\""), vec![]));
        assert_eq!(nat_plan(&rules, &comments(NET, CID)).chains, [DN]);
    }

    #[test]
    fn a_commented_jump_to_a_chain_not_of_the_reference_s_form_leaves_the_chain() {
        let c = format!("name: \"{NET}\" id: \"{CID}\"");
        let rules = vec![rule(
            "POSTROUTING",
            5,
            Some(&c),
            vec![jump("KUBE-POSTROUTING")],
        )];
        let plan = nat_plan(&rules, &comments(NET, CID));
        assert!(plan.chains.is_empty());
        assert_eq!(plan.rules, [("POSTROUTING".to_string(), 5)]);
    }

    #[test]
    fn firewall_accepts_are_read_in_their_two_forms_only() {
        let a = vec![10, 199, 7, 2];
        let established = rule(
            FIREWALL_CHAIN,
            6,
            None,
            vec![
                Expr::payload(PayloadBase::Network, 16, 4, Reg::R1),
                Expr::cmp(Reg::R1, CmpOp::Eq, a.clone()),
                xt_match("conntrack"),
                Expr::counter(),
                Expr::Verdict(Verdict::Accept),
            ],
        );
        let from = rule(
            FIREWALL_CHAIN,
            7,
            None,
            vec![
                Expr::payload(PayloadBase::Network, 12, 4, Reg::R1),
                Expr::cmp(Reg::R1, CmpOp::Eq, a.clone()),
                Expr::counter(),
                Expr::Verdict(Verdict::Accept),
            ],
        );
        let ip: IpAddr = "10.199.7.2".parse().unwrap();
        assert_eq!(firewall_address(&established, Family::V4), Some(ip));
        assert_eq!(firewall_address(&from, Family::V4), Some(ip));
        let mut admin = from.clone();
        admin.comments.push("an admin's".into());
        assert_eq!(firewall_address(&admin, Family::V4), None);
        let mut dropping = from.clone();
        dropping.exprs[3] = Expr::Verdict(Verdict::Drop);
        assert_eq!(firewall_address(&dropping, Family::V4), None);
        let mut to_without_state = from;
        to_without_state.exprs[0] = Expr::payload(PayloadBase::Network, 16, 4, Reg::R1);
        assert_eq!(firewall_address(&to_without_state, Family::V4), None);
    }

    #[test]
    fn a_comment_names_its_container_for_its_network_only() {
        assert_eq!(
            names(&format!("dnat name: \"{NET}\" id: \"{CID}\""), NET),
            Some((1, CID.to_string()))
        );
        assert_eq!(
            names(&format!("name: \"{NET}\" id: \"{CID}\""), NET),
            Some((0, CID.to_string()))
        );
        assert_eq!(names(&format!("name: \"{NET}x\" id: \"{CID}\""), NET), None);
        assert_eq!(names("CNI portfwd masquerade mark", NET), None);
    }

    #[test]
    fn long_comments_are_cut_as_portmap_cuts_them() {
        let c = trim(format!("dnat name: \"n\" id: \"{}\"", "c".repeat(300)));
        assert_eq!(c.len(), 256);
        assert!(c.ends_with("..."));
    }
}
