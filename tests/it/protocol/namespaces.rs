//! The container's namespace: paths that are no usable netns (102), and a netns that
//! already holds the interface name (101); nothing of the ADD is left behind. (A netns
//! another network already routes is served as the reference serves it: multinet.rs.)

use super::*;

#[test]
fn unusable_netns_paths() {
    let lab = Lab::new("nspath");
    let missing = format!("/var/run/netns/ac-nonexistent-{}", std::process::id());
    let cases: &[(&str, &[&str])] = &[
        (&missing, &["CNI_NETNS", &missing, "does not exist"]),
        ("relative-netns", &["CNI_NETNS"]),
        ("/etc/hostname", &["not a network namespace"]),
        ("/tmp", &["not a network namespace"]),
        ("/dev/null", &["not a network namespace"]),
        // pid 1's netns: the host's own, or (in a sandbox where pid 1 is not ours to
        // open) unreadable; 102 naming CNI_NETNS either way.
        ("/proc/1/ns/net", &["CNI_NETNS"]),
        ("/proc/self/ns/net", &["host"]),
    ];
    let table = cases
        .iter()
        .map(|(path, needles)| {
            refusal(
                format!("ADD in {path}"),
                lab.call("ADD").env("CNI_NETNS", path),
                102,
                needles,
            )
        })
        .collect();
    refuse_all(&lab, table);
}

/// A namespace file of another kind (uts, ipc) is on nsfs like a netns, so the nsfs
/// test alone passes it. It must be refused as unusable (102) before anything is made.
#[test]
fn netns_of_another_kind_is_refused_as_unusable() {
    let lab = Lab::new("nskind");
    let table = ["/proc/self/ns/uts", "/proc/self/ns/ipc"]
        .into_iter()
        .map(|path| {
            refusal(
                format!("ADD in {path}"),
                lab.call("ADD").env("CNI_NETNS", path),
                102,
                &["CNI_NETNS"],
            )
        })
        .collect();
    refuse_all(&lab, table);
}

/// CNI_IFNAME already in the netns (a plain eth0, or lo): 101, and nothing of the ADD
/// left behind.
#[test]
fn ifname_already_in_the_netns() {
    let lab = Lab::new("iftaken");
    // One good ADD/DEL first: the bridge (shared, never deleted) and the store folder
    // exist from then on, so the snapshot compares against that steady state.
    lab.call("ADD").run().expect_result("first ADD");
    lab.call("DEL").run().expect_silent_success("first DEL");

    add_plain_link(Some(&lab.netns), "eth0", "eth0-peer");
    refuse_all(
        &lab,
        vec![
            refusal("eth0 exists in the netns", lab.call("ADD"), 101, &["eth0"]),
            refusal(
                "CNI_IFNAME=lo",
                lab.call("ADD").env("CNI_IFNAME", "lo"),
                101,
                &["lo"],
            ),
        ],
    );
    ip(&["-n", &lab.netns, "link", "del", "eth0"]); // a veth takes its peer with it
}
