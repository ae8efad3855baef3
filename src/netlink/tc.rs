//! Traffic control over rtnetlink: what `tc qdisc add ... tbf`, `tc qdisc add ... ingress`,
//! `tc filter add ... u32 match u32 0 0 action mirred egress redirect dev IFB` and `ip
//! link add IFB type ifb` do, without their binaries. Beside route/ because it speaks
//! netlink-packet-route too; the rest of academy sees only `Tbf`, `Qdisc` and plain
//! numbers.
//!
//! netlink-packet-route 0.34 encodes the ingress qdisc, the u32 filter and the mirred
//! action; it has no TBF, whose options are written and read here by the names of
//! uapi linux/pkt_sched.h (`struct tc_tbf_qopt` in TCA_TBF_PARMS, TCA_TBF_RATE64).

use netlink_packet_core::{DefaultNla, Nla, NlasIterator, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionMirrorOption, TcActionOption, TcActionType, TcAttribute,
    TcFilterU32Option, TcHandle, TcMessage, TcMirror, TcMirrorActionType, TcOption, TcU32Key,
    TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::route::Netlink;
use super::socket::{Await, NlResult};

/// pkt_sched.h: the attributes of TCA_OPTIONS for a tbf qdisc.
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// pkt_sched.h: `enum { TC_LINKLAYER_UNAWARE, TC_LINKLAYER_ETHERNET, TC_LINKLAYER_ATM }`.
const TC_LINKLAYER_ETHERNET: u8 = 1;
/// if_ether.h: every protocol, as a filter's protocol (in network order in tcm_info).
const ETH_P_ALL: u16 = 0x0003;
/// The size of `struct tc_ratespec` and `struct tc_tbf_qopt` (pkt_sched.h).
const TC_RATESPEC_LEN: usize = 12;
const TC_TBF_QOPT_LEN: usize = 2 * TC_RATESPEC_LEN + 12;

/// The kernel's scheduler clock: one tick is 1 << PSCHED_SHIFT (6) ns, so a microsecond
/// is 1000 / 64 ticks, as /proc/net/psched says (t2us 0x3e8, us2t 0x40) and tc and the
/// reference's netlink library read it there. PSCHED_SHIFT has been 6 since Linux 2.6.31.
const TICKS_PER_USEC: f64 = 1000.0 / 64.0;
/// TIME_UNITS_PER_SEC of iproute2 and the reference: microseconds.
const USEC_PER_SEC: f64 = 1_000_000.0;
/// The reference's queue: the bucket plus what `latencyInMillis` (25 ms) at the rate holds.
const LATENCY_USEC: f64 = 25_000.0;
/// The kernel keeps a TBF's buffer in nanoseconds capped at u32::MAX (sch_tbf.c:
/// `min_t(u64, PSCHED_TICKS2NS(qopt->buffer), ~0U)`), so a dump gives at most this.
const MAX_BUFFER_TICKS: u32 = u32::MAX >> 6;

/// The tbf root qdisc's handle, 1:0, as the reference makes it.
const TBF_HANDLE: TcHandle = TcHandle { major: 1, minor: 0 };
/// The ingress qdisc's handle, ffff:0.
const INGRESS_HANDLE: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0,
};
/// The redirect filter's priority, as the reference's.
const REDIRECT_PRIORITY: u16 = 1;

/// A TBF qdisc's parameters as the kernel takes and reports them (`struct tc_tbf_qopt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Bytes per second.
    pub rate: u64,
    /// The queue, in bytes.
    pub limit: u32,
    /// The bucket, in scheduler ticks.
    pub buffer: u32,
}

impl Tbf {
    /// The reference bandwidth plugin's TBF for a rate in bits per second and a burst in
    /// bits (ifb_creator.go createTBF, with its float arithmetic): rate/8 bytes per
    /// second, a buffer of burst/8 bytes' worth of time at that rate, and a queue of the
    /// bucket plus 25 ms at the rate. What overflows a u32 is held at u32::MAX.
    pub fn shaping(rate_bits: u64, burst_bits: u64) -> Tbf {
        let rate = rate_bits / 8;
        let burst = u32::try_from(burst_bits / 8).unwrap_or(u32::MAX);
        let usec = saturate(f64::from(burst) * USEC_PER_SEC / rate.max(1) as f64);
        let buffer = saturate(f64::from(usec) * TICKS_PER_USEC);
        let limit = saturate(rate as f64 * LATENCY_USEC / USEC_PER_SEC).saturating_add(burst);
        Tbf {
            rate,
            limit,
            buffer,
        }
    }

    /// As a dump reports it: the kernel holds the buffer at MAX_BUFFER_TICKS.
    pub fn as_kept(self) -> Tbf {
        Tbf {
            buffer: self.buffer.min(MAX_BUFFER_TICKS),
            ..self
        }
    }

    fn options(&self) -> Vec<TcOption> {
        let mut qopt = [0u8; TC_TBF_QOPT_LEN];
        // rate: cell_log, linklayer, overhead, cell_align, mpu, then the rate itself.
        qopt[1] = TC_LINKLAYER_ETHERNET;
        let rate32 = u32::try_from(self.rate).unwrap_or(u32::MAX);
        qopt[8..12].copy_from_slice(&rate32.to_ne_bytes());
        // peakrate stays zero (none); then limit, buffer, mtu (0: no peak rate).
        let at = 2 * TC_RATESPEC_LEN;
        qopt[at..at + 4].copy_from_slice(&self.limit.to_ne_bytes());
        qopt[at + 4..at + 8].copy_from_slice(&self.buffer.to_ne_bytes());
        let mut options = vec![TcOption::Other(DefaultNla::new(
            TCA_TBF_PARMS,
            qopt.to_vec(),
        ))];
        if self.rate > u64::from(u32::MAX) {
            options.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                self.rate.to_ne_bytes().to_vec(),
            )));
        }
        options
    }

    /// Reads TCA_TBF_PARMS (and TCA_TBF_RATE64) from a tbf qdisc's TCA_OPTIONS payload.
    fn parse(nested: &[u8]) -> Option<Tbf> {
        let (mut tbf, mut rate64) = (None, None);
        for nla in NlasIterator::new(nested) {
            let nla = nla.ok()?;
            let value = nla.value();
            match nla.kind() {
                TCA_TBF_PARMS if value.len() >= TC_TBF_QOPT_LEN => {
                    let u32_at =
                        |at: usize| u32::from_ne_bytes(value[at..at + 4].try_into().unwrap());
                    let at = 2 * TC_RATESPEC_LEN;
                    tbf = Some(Tbf {
                        rate: u64::from(u32_at(8)),
                        limit: u32_at(at),
                        buffer: u32_at(at + 4),
                    });
                }
                TCA_TBF_RATE64 if value.len() >= 8 => {
                    rate64 = Some(u64::from_ne_bytes(value[..8].try_into().unwrap()));
                }
                _ => {}
            }
        }
        let mut tbf = tbf?;
        if let Some(rate) = rate64 {
            tbf.rate = rate;
        }
        Some(tbf)
    }
}

/// Saturating float to u32, as a kernel field can hold it.
fn saturate(v: f64) -> u32 {
    if v >= f64::from(u32::MAX) {
        u32::MAX
    } else if v > 0.0 {
        v as u32
    } else {
        0
    }
}

/// One qdisc of a link, as academy needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    pub kind: String,
    /// The root qdisc (parent TC_H_ROOT), not a child or the ingress one.
    pub root: bool,
    /// A tbf's parameters.
    pub tbf: Option<Tbf>,
}

impl Netlink {
    /// Creates an ifb link, down, with `mtu` (`ip link add NAME mtu MTU type ifb`).
    /// EEXIST when a link of that name exists. Down, so that its qdisc is added without
    /// the grace period a qdisc change on an up device waits out (qdisc_graft's
    /// dev_deactivate); `label_and_up` then brings it up.
    pub fn create_ifb(&mut self, name: &str, mtu: Option<u32>) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Ifb)]));
        self.request_flags(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            Await::Ack,
            &format!("create ifb {name}"),
        )
        .map(drop)
    }

    /// Sets link `index`'s alias and brings it up, in one request (the kernel ignores an
    /// alias given at creation).
    pub fn label_and_up(&mut self, index: u32, alias: &str) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.header.flags |= LinkFlags::Up;
        msg.header.change_mask |= LinkFlags::Up;
        msg.attributes
            .push(LinkAttribute::IfAlias(alias.to_string()));
        self.change_link(msg, &format!("label link #{index} {alias} and set it up"))
    }

    /// Makes a tbf the root qdisc of link `index` (`tc qdisc add dev DEV root handle 1:
    /// tbf ...`). EEXIST when the link already has a root qdisc of its own.
    pub fn add_tbf(&mut self, index: u32, tbf: &Tbf) -> NlResult<()> {
        let mut msg = TcMessage::with_index(index as i32);
        msg.header.parent = TcHandle::ROOT;
        msg.header.handle = TBF_HANDLE;
        msg.attributes.push(TcAttribute::Kind("tbf".into()));
        msg.attributes.push(TcAttribute::Options(tbf.options()));
        self.request_flags(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            Await::Ack,
            &format!("add a tbf qdisc of {} bytes/s to link #{index}", tbf.rate),
        )
        .map(drop)
    }

    /// Adds the ingress qdisc to link `index` (`tc qdisc add dev DEV handle ffff:
    /// ingress`).
    pub fn add_ingress_qdisc(&mut self, index: u32) -> NlResult<()> {
        let mut msg = TcMessage::with_index(index as i32);
        msg.header.parent = TcHandle::INGRESS;
        msg.header.handle = INGRESS_HANDLE;
        msg.attributes.push(TcAttribute::Kind("ingress".into()));
        self.request_flags(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            Await::Ack,
            &format!("add the ingress qdisc to link #{index}"),
        )
        .map(drop)
    }

    /// Redirects everything arriving on link `index` to the egress of link `to` (`tc
    /// filter add dev DEV parent ffff: protocol all prio 1 u32 match u32 0 0 action
    /// mirred egress redirect dev TO`). Needs the ingress qdisc.
    pub fn add_redirect(&mut self, index: u32, to: u32) -> NlResult<()> {
        let mut msg = TcMessage::with_index(index as i32);
        msg.header.parent = INGRESS_HANDLE;
        msg.header.info = (u32::from(REDIRECT_PRIORITY) << 16) | u32::from(ETH_P_ALL.to_be());
        msg.attributes.push(TcAttribute::Kind("u32".into()));
        // One key matching every packet: mask 0, value 0.
        let mut selector = TcU32Selector::default();
        selector.flags = TcU32SelectorFlags::Terminal;
        selector.nkeys = 1;
        selector.keys = vec![TcU32Key::default()];
        let mut mirror = TcMirror::default();
        mirror.generic.action = TcActionType::Stolen;
        mirror.eaction = TcMirrorActionType::EgressRedir;
        mirror.ifindex = to;
        let mut action = TcAction::default();
        action.attributes = vec![
            TcActionAttribute::Kind("mirred".into()),
            TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(
                mirror,
            ))]),
        ];
        msg.attributes.push(TcAttribute::Options(vec![
            TcOption::U32(TcFilterU32Option::Selector(selector)),
            TcOption::U32(TcFilterU32Option::Action(vec![action])),
        ]));
        self.request_flags(
            RouteNetlinkMessage::NewTrafficFilter(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            Await::Ack,
            &format!("redirect link #{index}'s ingress to link #{to}"),
        )
        .map(drop)
    }

    /// The qdiscs of link `index` (the kernel dumps every link's; only these are kept).
    pub fn qdiscs(&mut self, index: u32) -> NlResult<Vec<Qdisc>> {
        let replies = self.request(
            RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
            Await::Dump,
            &format!("list the qdiscs of link #{index}"),
        )?;
        Ok(replies
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(q) if q.header.index == index as i32 => {
                    Some(to_qdisc(q))
                }
                _ => None,
            })
            .collect())
    }

    /// The links that the ingress filters of link `index` redirect to (mirred egress
    /// redirect); empty without an ingress qdisc.
    pub fn redirects(&mut self, index: u32) -> NlResult<Vec<u32>> {
        let mut msg = TcMessage::with_index(index as i32);
        msg.header.parent = INGRESS_HANDLE;
        let replies = match self.request(
            RouteNetlinkMessage::GetTrafficFilter(msg),
            Await::Dump,
            &format!("list the ingress filters of link #{index}"),
        ) {
            // No ingress qdisc to hold filters.
            Err(e) if e.is(libc::EINVAL) || e.is(libc::ENOENT) => return Ok(Vec::new()),
            other => other?,
        };
        let mut to = Vec::new();
        for m in &replies {
            let RouteNetlinkMessage::NewTrafficFilter(f) = m else {
                continue;
            };
            for attr in &f.attributes {
                let TcAttribute::Options(options) = attr else {
                    continue;
                };
                for option in options {
                    let TcOption::U32(TcFilterU32Option::Action(actions)) = option else {
                        continue;
                    };
                    for action in actions {
                        to.extend(mirred_egress_redirect(action));
                    }
                }
            }
        }
        Ok(to)
    }
}

fn mirred_egress_redirect(action: &TcAction) -> Option<u32> {
    action.attributes.iter().find_map(|a| match a {
        TcActionAttribute::Options(options) => options.iter().find_map(|o| match o {
            TcActionOption::Mirror(TcActionMirrorOption::Parms(m))
                if m.eaction == TcMirrorActionType::EgressRedir =>
            {
                Some(m.ifindex)
            }
            _ => None,
        }),
        _ => None,
    })
}

fn to_qdisc(msg: &TcMessage) -> Qdisc {
    let mut qdisc = Qdisc {
        kind: String::new(),
        root: msg.header.parent == TcHandle::ROOT,
        tbf: None,
    };
    for attr in &msg.attributes {
        match attr {
            TcAttribute::Kind(k) => qdisc.kind = k.clone(),
            // An options type the crate does not know is kept whole: the TCA_OPTIONS
            // attribute itself, whose value is the nested attributes.
            TcAttribute::Options(options) => {
                for option in options {
                    if let TcOption::Other(nla) = option {
                        let mut value = vec![0u8; nla.value_len()];
                        nla.emit_value(&mut value);
                        qdisc.tbf = qdisc.tbf.or_else(|| Tbf::parse(&value));
                    }
                }
            }
            _ => {}
        }
    }
    if qdisc.kind != "tbf" {
        qdisc.tbf = None;
    }
    qdisc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_s_tbf_for_8_mbit() {
        // 8 Mbit/s, burst 80 kbit: 1e6 B/s, 10 kB = 10 ms = 156250 ticks; queue 25 kB +
        // 10 kB.
        assert_eq!(
            Tbf::shaping(8_000_000, 80_000),
            Tbf {
                rate: 1_000_000,
                limit: 35_000,
                buffer: 156_250
            }
        );
        // containerd's burst (u32::MAX bits) at 1 Mbit/s: far beyond what the kernel
        // keeps (4.29 s), held there in a dump.
        let big = Tbf::shaping(1_000_000, u64::from(u32::MAX));
        assert_eq!(big.buffer, u32::MAX);
        assert_eq!(big.as_kept().buffer, MAX_BUFFER_TICKS);
    }

    #[test]
    fn tbf_options_read_back() {
        for tbf in [
            Tbf::shaping(8_000_000, 80_000),
            Tbf::shaping(80_000_000_000, 8_000_000),
        ] {
            let mut nested = Vec::new();
            for o in tbf.options() {
                let mut b = vec![0u8; netlink_packet_core::Emitable::buffer_len(&o)];
                netlink_packet_core::Emitable::emit(&o, &mut b);
                nested.extend(b);
            }
            assert_eq!(Tbf::parse(&nested), Some(tbf));
        }
    }

    #[test]
    fn the_psched_clock_is_the_kernel_s() {
        // Where /proc/net/psched is readable, it says what TICKS_PER_USEC assumes.
        let Ok(text) = std::fs::read_to_string("/proc/net/psched") else {
            return;
        };
        let f: Vec<u32> = text
            .split_whitespace()
            .filter_map(|w| u32::from_str_radix(w, 16).ok())
            .collect();
        assert_eq!(f[0] as f64 / f[1] as f64, TICKS_PER_USEC, "{text}");
    }
}
