//! nfnetlink messages and batches: changes sent together between BATCH_BEGIN and
//! BATCH_END in one sendmsg, acknowledged one by one, applied all or nothing.

use netlink_packet_core::{NLM_F_ACK, NLM_F_REQUEST};

#[cfg(test)]
use super::consts::NFPROTO_INET;
use super::consts::{NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END, NFNL_SUBSYS_NFTABLES};
use super::step::Step;
use crate::netlink::nfnetlink::{encode, Attrs};
use crate::netlink::socket::{NlError, NlResult, NlSocket, Subsystem};

pub fn nftables_type(kind: u8) -> u16 {
    NFNL_SUBSYS_NFTABLES << 8 | u16::from(kind)
}

/// Changes sent together between BATCH_BEGIN and BATCH_END: one sendmsg, one ack per
/// change, applied all or nothing.
struct Batch<'a> {
    socket: &'a mut NlSocket,
    bytes: Vec<u8>,
    first: u32,
    /// Each message's description and step, in sequence order.
    descriptions: Vec<(String, Step)>,
    /// A change whose attributes could not be encoded (an attribute over 64 KiB).
    too_long: Option<(String, Step)>,
}

/// Bytes per sendmsg, well below the socket's default send buffer (212,992 bytes: a
/// larger message fails with EMSGSIZE). Only a batch this large (an ADD publishing more
/// than about 1,400 ports, a GC removing thousands of elements, a restore of a big node)
/// is split, each part applied all or nothing: nfnetlink's batch is the kernel's
/// transaction, and one batch is one sendmsg. How a split ADD stays whole: nat.rs.
pub const BATCH_BYTES: usize = 128 * 1024;

/// How many items a description names before "and N more": an error names its request,
/// and a request of thousands of elements must not make an error of hundreds of KB.
pub const NAMED_IN_DESCRIPTION: usize = 8;

/// "a, b, c" for a few, "a, b, ... and 598 more" for many.
pub fn named(items: impl ExactSizeIterator<Item = String>) -> String {
    let total = items.len();
    let mut names: Vec<String> = items.take(NAMED_IN_DESCRIPTION).collect();
    if total > names.len() {
        names.push(format!("and {} more", total - names.len()));
    }
    names.join(", ")
}

/// One message of a batch: a change (model.rs) as encode.rs wrote it.
pub(super) struct Message {
    pub step: Step,
    pub kind: u8,
    pub flags: u16,
    pub attrs: Attrs,
    pub description: String,
}

/// Sends `changes` in as few batches as fit BATCH_BYTES (one in every usual case), in
/// order; stops at the first refused batch.
pub(super) fn commit_all(
    socket: &mut NlSocket,
    changes: impl IntoIterator<Item = (u8, Message)>,
) -> NlResult<()> {
    let mut batch = Batch::new(socket);
    for (family, change) in changes {
        if !batch.descriptions.is_empty()
            && batch.bytes.len() + change.attrs.0.len() + 64 > BATCH_BYTES
        {
            let socket = batch.commit_keep()?;
            batch = Batch::new(socket);
        }
        batch.add(
            family,
            change.step,
            change.kind,
            change.flags,
            change.attrs,
            change.description,
        );
    }
    batch.commit()
}

impl<'a> Batch<'a> {
    fn new(socket: &'a mut NlSocket) -> Batch<'a> {
        let mut bytes = Vec::with_capacity(1024);
        let sequence = socket.next_sequence();
        let res_id = NFNL_SUBSYS_NFTABLES;
        encode(
            &mut bytes,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            sequence,
            0,
            res_id,
            Vec::new(),
        );
        Batch {
            first: sequence + 1,
            socket,
            bytes,
            descriptions: Vec::new(),
            too_long: None,
        }
    }

    /// A message to tables of `family` (nfproto).
    fn add(
        &mut self,
        family: u8,
        step: Step,
        kind: u8,
        flags: u16,
        attrs: Attrs,
        description: String,
    ) {
        if attrs.too_long() {
            self.too_long.get_or_insert((description, step));
            return;
        }
        let sequence = self.socket.next_sequence();
        let flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        encode(
            &mut self.bytes,
            nftables_type(kind),
            flags,
            sequence,
            family,
            0,
            attrs.0,
        );
        self.descriptions.push((description, step));
    }

    fn commit(self) -> NlResult<()> {
        self.commit_keep().map(drop)
    }

    /// Commits, and gives the socket back for the next batch.
    fn commit_keep(mut self) -> NlResult<&'a mut NlSocket> {
        if let Some((what, step)) = self.too_long {
            return Err(NlError {
                reason: Some("an attribute is longer than netlink's 65,535 bytes".into()),
                refused: Some(step),
                ..NlError::new(what, libc::EMSGSIZE).within(Subsystem::NfTables)
            });
        }
        if self.descriptions.is_empty() {
            return Ok(self.socket);
        }
        let sequence = self.socket.next_sequence();
        let res_id = NFNL_SUBSYS_NFTABLES;
        encode(
            &mut self.bytes,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            sequence,
            0,
            res_id,
            Vec::new(),
        );
        let what = self
            .descriptions
            .iter()
            .map(|(description, _)| description.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        self.socket.send(&self.bytes, &what)?;
        let first = self.first;
        let descriptions = &self.descriptions;
        self.socket.receive_acks(first..sequence, |seq| {
            match descriptions.get((seq - first) as usize) {
                Some((description, step)) => (description.clone(), Some(*step)),
                None => (what.clone(), None),
            }
        })?;
        Ok(self.socket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change refused before anything is sent (an attribute over 64 KiB) is named and
    /// tagged like one the kernel refuses, so the caller's decision is the same.
    #[test]
    fn a_refused_change_carries_its_step_and_its_description() {
        let mut socket = NlSocket::open(Subsystem::NfTables).expect("a netfilter socket");
        let mut fits = Attrs::default();
        fits.put(1, &[0; 8]);
        let mut too_long = Attrs::default();
        too_long.put(1, &vec![0; 70_000]);
        let mut batch = Batch::new(&mut socket);
        let inet = NFPROTO_INET;
        batch.add(inet, Step::CreateTable, 0, 0, fits, "create table".into());
        batch.add(
            inet,
            Step::Publish,
            12,
            0,
            too_long,
            "publish tcp/80".into(),
        );
        let e = batch.commit().unwrap_err();
        assert_eq!(e.request, "publish tcp/80");
        assert!(e.is(libc::EMSGSIZE));
        assert_eq!(e.refused, Some(Step::Publish));
        assert!(e.refused_in(&[Step::AddElement, Step::Publish]));
        assert!(!e.refused_in(&[Step::AddElement]));
        assert_eq!(e.subsystem, Some(Subsystem::NfTables));
    }
}
