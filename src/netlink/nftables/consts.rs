//! Every number of the nf_tables uapi that academy writes or reads, each defined once,
//! grouped by the enum of include/uapi/linux/netfilter/nf_tables.h it comes from (then
//! the other headers' few), under the headers' own names so that each can be checked
//! against its header.

// linux/netfilter/nfnetlink.h
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// NLMSG_MIN_TYPE: the batch's begin and end are nfnetlink's own messages.
pub const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub const NFNL_MSG_BATCH_END: u16 = 0x11;

// linux/netfilter.h: enum (NFPROTO_*)
pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_BRIDGE: u8 = 7;
pub const NFPROTO_IPV6: u8 = 10;
// linux/netfilter.h: enum nf_inet_hooks
pub const NF_INET_PRE_ROUTING: u32 = 0;
pub const NF_INET_LOCAL_IN: u32 = 1;
pub const NF_INET_FORWARD: u32 = 2;
pub const NF_INET_LOCAL_OUT: u32 = 3;
pub const NF_INET_POST_ROUTING: u32 = 4;
// linux/netfilter.h: verdicts
pub const NF_DROP: u32 = 0;
pub const NF_ACCEPT: u32 = 1;

// linux/netfilter_ipv4.h: enum nf_ip_hook_priorities
pub const NF_IP_PRI_NAT_DST: i32 = -100;
pub const NF_IP_PRI_FILTER: i32 = 0;
pub const NF_IP_PRI_NAT_SRC: i32 = 100;

// linux/netfilter_bridge.h: the bridge's hooks and enum nf_br_hook_priorities
pub const NF_BR_PRE_ROUTING: u32 = 0;
pub const NF_BR_PRI_NAT_DST_BRIDGED: i32 = -300;

// linux/netfilter/nf_conntrack_common.h: enum ip_conntrack_status
pub const IPS_DST_NAT: u32 = 1 << 5;

// linux/rtnetlink.h: an address type, as fib's NFT_FIB_RESULT_ADDRTYPE gives it
pub const RTN_LOCAL: u32 = 2;

// linux/if.h
pub const IFNAMSIZ: usize = 16;

// enum nf_tables_msg_types
pub const NFT_MSG_NEWTABLE: u8 = 0;
pub const NFT_MSG_NEWCHAIN: u8 = 3;
pub const NFT_MSG_GETCHAIN: u8 = 4;
pub const NFT_MSG_NEWRULE: u8 = 6;
pub const NFT_MSG_GETRULE: u8 = 7;
pub const NFT_MSG_DELRULE: u8 = 8;
pub const NFT_MSG_NEWSET: u8 = 9;
pub const NFT_MSG_GETSET: u8 = 10;
pub const NFT_MSG_DELSET: u8 = 11;
pub const NFT_MSG_NEWSETELEM: u8 = 12;
pub const NFT_MSG_GETSETELEM: u8 = 13;
pub const NFT_MSG_DELSETELEM: u8 = 14;
pub const NFT_MSG_GETGEN: u8 = 16;

// enum nft_registers
pub const NFT_REG_VERDICT: u32 = 0;
pub const NFT_REG_1: u32 = 1;
pub const NFT_REG_2: u32 = 2;
/// The 32-bit registers after NFT_REG_1's 16 bytes: where a concatenation's later fields go.
pub const NFT_REG32_00: u32 = 8;

// enum nft_list_attributes
pub const NFTA_LIST_ELEM: u16 = 1;

// enum nft_hook_attributes
pub const NFTA_HOOK_HOOKNUM: u16 = 1;
pub const NFTA_HOOK_PRIORITY: u16 = 2;

// enum nft_table_attributes
pub const NFTA_TABLE_NAME: u16 = 1;

// enum nft_chain_attributes
pub const NFTA_CHAIN_TABLE: u16 = 1;
pub const NFTA_CHAIN_NAME: u16 = 3;
pub const NFTA_CHAIN_HOOK: u16 = 4;
pub const NFTA_CHAIN_POLICY: u16 = 5;
pub const NFTA_CHAIN_TYPE: u16 = 7;

// enum nft_rule_attributes
pub const NFTA_RULE_TABLE: u16 = 1;
pub const NFTA_RULE_CHAIN: u16 = 2;
pub const NFTA_RULE_HANDLE: u16 = 3;
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub const NFTA_RULE_USERDATA: u16 = 7;

// enum nft_set_flags
pub const NFT_SET_MAP: u32 = 0x8;

// enum nft_set_attributes
pub const NFTA_SET_TABLE: u16 = 1;
pub const NFTA_SET_NAME: u16 = 2;
pub const NFTA_SET_FLAGS: u16 = 3;
pub const NFTA_SET_KEY_TYPE: u16 = 4;
pub const NFTA_SET_KEY_LEN: u16 = 5;
pub const NFTA_SET_DATA_TYPE: u16 = 6;
pub const NFTA_SET_DATA_LEN: u16 = 7;
pub const NFTA_SET_ID: u16 = 10;
pub const NFTA_SET_TIMEOUT: u16 = 11;
pub const NFTA_SET_USERDATA: u16 = 13;
pub const NFTA_SET_OBJ_TYPE: u16 = 15;
pub const NFTA_SET_EXPR: u16 = 17;
pub const NFTA_SET_EXPRESSIONS: u16 = 18;

// enum nft_set_elem_attributes
pub const NFTA_SET_ELEM_KEY: u16 = 1;
pub const NFTA_SET_ELEM_DATA: u16 = 2;
pub const NFTA_SET_ELEM_USERDATA: u16 = 6;

// enum nft_set_elem_list_attributes
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;

// enum nft_data_attributes
pub const NFTA_DATA_VALUE: u16 = 1;
pub const NFTA_DATA_VERDICT: u16 = 2;

// enum nft_verdict_attributes
pub const NFTA_VERDICT_CODE: u16 = 1;

// enum nft_expr_attributes
pub const NFTA_EXPR_NAME: u16 = 1;
pub const NFTA_EXPR_DATA: u16 = 2;

// enum nft_immediate_attributes
pub const NFTA_IMMEDIATE_DREG: u16 = 1;
pub const NFTA_IMMEDIATE_DATA: u16 = 2;

// enum nft_bitwise_attributes
pub const NFTA_BITWISE_SREG: u16 = 1;
pub const NFTA_BITWISE_DREG: u16 = 2;
pub const NFTA_BITWISE_LEN: u16 = 3;
pub const NFTA_BITWISE_MASK: u16 = 4;
pub const NFTA_BITWISE_XOR: u16 = 5;

// enum nft_cmp_ops
pub const NFT_CMP_EQ: u32 = 0;
pub const NFT_CMP_NEQ: u32 = 1;

// enum nft_cmp_attributes
pub const NFTA_CMP_SREG: u16 = 1;
pub const NFTA_CMP_OP: u16 = 2;
pub const NFTA_CMP_DATA: u16 = 3;

// enum nft_lookup_flags
pub const NFT_LOOKUP_F_INV: u32 = 1;

// enum nft_lookup_attributes
pub const NFTA_LOOKUP_SET: u16 = 1;
pub const NFTA_LOOKUP_SREG: u16 = 2;
pub const NFTA_LOOKUP_DREG: u16 = 3;
pub const NFTA_LOOKUP_SET_ID: u16 = 4;
pub const NFTA_LOOKUP_FLAGS: u16 = 5;

// enum nft_payload_bases
pub const NFT_PAYLOAD_LL_HEADER: u32 = 0;
pub const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
pub const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;

// enum nft_payload_attributes
pub const NFTA_PAYLOAD_DREG: u16 = 1;
pub const NFTA_PAYLOAD_BASE: u16 = 2;
pub const NFTA_PAYLOAD_OFFSET: u16 = 3;
pub const NFTA_PAYLOAD_LEN: u16 = 4;

// enum nft_meta_keys
pub const NFT_META_MARK: u32 = 3;
pub const NFT_META_IIFNAME: u32 = 6;
pub const NFT_META_OIFNAME: u32 = 7;
pub const NFT_META_NFPROTO: u32 = 15;
pub const NFT_META_L4PROTO: u32 = 16;

// enum nft_meta_attributes
pub const NFTA_META_DREG: u16 = 1;
pub const NFTA_META_KEY: u16 = 2;
pub const NFTA_META_SREG: u16 = 3;

// enum nft_ct_keys
pub const NFT_CT_STATUS: u32 = 2;

// enum nft_ct_attributes
pub const NFTA_CT_DREG: u16 = 1;
pub const NFTA_CT_KEY: u16 = 2;

// enum nft_match_attributes (nft_compat: an xt match inside an nf_tables rule)
pub const NFTA_MATCH_NAME: u16 = 1;
pub const NFTA_MATCH_REV: u16 = 2;
pub const NFTA_MATCH_INFO: u16 = 3;

// linux/netfilter/xt_conntrack.h: struct xt_conntrack_mtinfo3 (revision 3, what
// iptables 1.8 writes for `-m conntrack`), its size rounded up by XT_ALIGN (8), and
// the offsets of the fields academy sets (host byte order, as every xt info is).
pub const XT_CONNTRACK_REV: u32 = 3;
pub const XT_CONNTRACK_INFO_LEN: usize = 168;
pub const XT_CONNTRACK_MATCH_FLAGS_AT: usize = 146;
pub const XT_CONNTRACK_STATE_MASK_AT: usize = 150;
pub const XT_CONNTRACK_STATE: u16 = 1 << 0;
/// XT_CONNTRACK_STATE_BIT(IP_CT_ESTABLISHED), _BIT(IP_CT_RELATED); the virtual state
/// DNAT is 1 << (IP_CT_NUMBER + 2): the connection's destination was NATed.
pub const XT_CONNTRACK_STATE_ESTABLISHED: u16 = 1 << 1;
pub const XT_CONNTRACK_STATE_RELATED: u16 = 1 << 2;
pub const XT_CONNTRACK_STATE_DNAT: u16 = 1 << 7;
// linux/netfilter/xt_comment.h: struct xt_comment_info { char comment[256]; }, rev 0.
pub const XT_MAX_COMMENT_LEN: usize = 256;

// enum nft_nat_types
pub const NFT_NAT_DNAT: u32 = 1;

// enum nft_nat_attributes
pub const NFTA_NAT_TYPE: u16 = 1;
pub const NFTA_NAT_FAMILY: u16 = 2;
pub const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
pub const NFTA_NAT_REG_PROTO_MIN: u16 = 5;

// enum nft_fib_result
pub const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;

// enum nft_fib_flags
pub const NFTA_FIB_F_DADDR: u32 = 1 << 1;

// enum nft_fib_attributes
pub const NFTA_FIB_DREG: u16 = 1;
pub const NFTA_FIB_RESULT: u16 = 2;
pub const NFTA_FIB_FLAGS: u16 = 3;

// nft's datatypes (nftables' include/datatype.h, not the uapi: the kernel only stores
// them), so that `nft list` shows addresses, names and MACs; a concatenation's type is
// its parts' shifted in TYPE_BITS at a time.
pub const TYPE_IPV4_ADDR: u32 = 7;
pub const TYPE_IPV6_ADDR: u32 = 8;
pub const TYPE_ETHERADDR: u32 = 9;
pub const TYPE_INET_PROTOCOL: u32 = 12;
pub const TYPE_INET_SERVICE: u32 = 13;
pub const TYPE_IFNAME: u32 = 41;
pub const TYPE_BITS: u32 = 6;

// Added for the reference's leftovers (reference.rs), the change monitor (monitor.rs)
// and iptables-nft's FORWARD rules (forward.rs), each from the enum of nf_tables.h or
// nfnetlink.h named beside it.
/// enum nf_tables_msg_types
pub const NFT_MSG_DELCHAIN: u8 = 5;
pub const NFT_MSG_NEWGEN: u8 = 15;
/// enum nft_target_attributes
pub const NFTA_TARGET_NAME: u16 = 1;
/// enum nft_verdict_attributes
pub const NFTA_VERDICT_CHAIN: u16 = 2;
/// enum nft_verdicts (negative: the kernel's own verdicts beside NF_ACCEPT/NF_DROP)
pub const NFT_RETURN: i32 = -5;
pub const NFT_GOTO: i32 = -4;
pub const NFT_JUMP: i32 = -3;
/// enum nfnetlink_groups
pub const NFNLGRP_NFTABLES: u32 = 7;
/// enum nft_gen_attributes
pub const NFTA_GEN_ID: u16 = 1;
pub const NFTA_GEN_PROC_PID: u16 = 2;
pub const NFTA_GEN_PROC_NAME: u16 = 3;
/// enum nft_counter_attributes
pub const NFTA_COUNTER_BYTES: u16 = 1;
pub const NFTA_COUNTER_PACKETS: u16 = 2;
// Added for the typed model (model.rs): the rest of the enums its expressions name.
/// enum nft_cmp_ops
pub const NFT_CMP_LT: u32 = 2;
pub const NFT_CMP_LTE: u32 = 3;
pub const NFT_CMP_GT: u32 = 4;
pub const NFT_CMP_GTE: u32 = 5;
/// enum nft_nat_types
pub const NFT_NAT_SNAT: u32 = 0;
/// enum nft_target_attributes
pub const NFTA_TARGET_REV: u16 = 2;
pub const NFTA_TARGET_INFO: u16 = 3;
